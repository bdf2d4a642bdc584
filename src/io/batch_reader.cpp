// dtrain/io/batch_reader.cpp — BatchReader of io/dataset.hpp: a prefetch thread that reads each
// batch's rows (sorted, duplicates dropped, consecutive rows merged into runs) into a staging
// buffer under one hold of hdf5_mutex(), then places them back in the requested order and
// normalizes (or, with uint8_batches, leaves the bytes raw for a GPU worker to normalize).
//
// Why one H5Dread per run instead of one read of a hyperslab union (H5S_SELECT_OR): HDF5 1.10.8
// maps an irregular selection onto a chunked dataset element by element. Measured on this machine
// with Fashion-MNIST (256-sample chunks), random 64-sample batches: union read 5.9k samples/s,
// per-run reads of regular hyperslabs 100k samples/s (contiguous layout: 66k vs 77k). Runs still
// merge consecutive rows, so a sequential (evaluation) batch is a single read.
//
// With a cache (cache_bytes), the rows the reader can touch are read once at construction and
// batches are gathered from memory: no HDF5 call per batch at all. Encoded files instead take an
// EncodedCache that outlives the reader (one per worker, kept across epochs).
//
// Labels are read once at construction (only those of `indices` are kept, as int32) and checked.
//
// Augmentation (random crop / flip, see Augmentation) runs here too, on each normalized sample, so
// the training thread never waits for it; its draws depend only on (seed, epoch, sample index).
//
// Threads: the consumer (next/skip) and one reader thread share ring_, free_, ready_, stop_ and
// error_ under mu_. A slot is owned by the reader while in neither list, by the consumer queue
// while in ready_. Reader state (HDF5 handles, staging buffers) is touched only by the reader
// thread while it runs, and by the constructor/destructor when it does not.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/fault.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/hdf5.hpp"
#include "encoded.hpp"
#include "input_fail.hpp"

namespace dtrain {

/// HDF5 handles and reused staging buffers of one reader.
struct BatchReader::Reader {
  H5File file;
  H5Dataset images;
  H5Dataspace image_space;                          ///< file dataspace, re-selected per run
  std::vector<float> lut;                           ///< uint8: 256 normalized values per channel
  std::vector<std::pair<std::int64_t, int>> order;  ///< (sample, position in batch), sorted
  std::vector<std::int64_t> rows;                   ///< unique sorted samples of the batch
  std::vector<int> row_of;                          ///< position in batch → index into rows
  std::vector<float> staging;  ///< rows.size() samples, raw file dtype (uint8 packed)
  std::vector<float> cache;    ///< rows [cache_first, cache_first + n), raw dtype, or empty
  std::int64_t cache_first = 0;
  std::vector<std::int32_t> labels;        ///< label of indices[i]
  std::vector<float> pad_value;            ///< augmentation: normalized raw 0, per channel
  std::vector<float> plain;                ///< augmentation: one normalized sample before the crop
  std::unique_ptr<EncodedSource> encoded;  ///< encoded files: decode pool and buffers
  /// encoded files: this batch's samples (batch order), then those of the batches read ahead
  std::vector<std::vector<std::int64_t>> batch_rows;
};

namespace {

/// The labels of samples `indices` as int32 (0 each for a file without labels), each checked to
/// lie in [0, num_classes). Throws InputError naming the file otherwise.
std::vector<std::int32_t> labels_of(hid_t file, const DatasetInfo& info,
                                    const std::vector<std::int64_t>& indices) {
  if (!info.has_labels) return std::vector<std::int32_t>(indices.size(), 0);  // inference
  const std::vector<std::int64_t> all = read_dataset_int64s(file, "labels", info.path);
  DT_REQUIRE(static_cast<std::int64_t>(all.size()) == info.num_samples,
             info.path + ": dataset `labels` changed since it was validated");
  std::vector<std::int32_t> out(indices.size());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::int64_t label = all[static_cast<std::size_t>(indices[i])];
    DT_REQUIRE(label >= 0 && label < info.num_classes,
               info.path + ": dataset `labels` has label " + std::to_string(label) + " at sample " +
                   std::to_string(indices[i]) + ", expected [0, " +
                   std::to_string(info.num_classes) + ")");
    out[i] = static_cast<std::int32_t>(label);
  }
  return out;
}

/// Augmentation's padding per channel: the normalized value of raw 0, as a 0 pixel reads.
std::vector<float> pad_values(const DatasetInfo& info, const std::vector<float>& lut) {
  const bool norm = !info.mean.empty();
  std::vector<float> pad;
  for (int c = 0; c < info.sample.c; ++c)
    pad.push_back(info.is_uint8 ? lut[static_cast<std::size_t>(c) * 256]
                  : norm        ? (0.0f - info.mean[c]) / info.stddev[c]
                                : 0.0f);
  return pad;
}

/// The batch's samples `samples[0..m)` as sorted unique rows; row_of[p]: the index into rows of
/// batch position p (order: scratch, (sample, position) sorted).
void unique_rows(const std::int64_t* samples, int m,
                 std::vector<std::pair<std::int64_t, int>>& order, std::vector<std::int64_t>& rows,
                 std::vector<int>& row_of) {
  order.resize(static_cast<std::size_t>(m));
  for (int p = 0; p < m; ++p) order[static_cast<std::size_t>(p)] = {samples[p], p};
  std::sort(order.begin(), order.end());
  rows.clear();
  row_of.resize(static_cast<std::size_t>(m));
  for (const auto& [sample_index, pos] : order) {
    if (rows.empty() || rows.back() != sample_index) rows.push_back(sample_index);
    row_of[static_cast<std::size_t>(pos)] = static_cast<int>(rows.size()) - 1;
  }
}

/// One C×H×W sample `raw` in the file's dtype, normalized into dst: uint8 through lut, float32
/// checked finite (InputError naming the file, sample, channel and pixel otherwise).
void normalize_sample(const DatasetInfo& info, const std::vector<float>& lut,
                      const unsigned char* raw, std::int64_t sample_index, float* dst) {
  const std::size_t hw = static_cast<std::size_t>(info.sample.h) * info.sample.w;
  if (info.is_uint8) {
    for (int c = 0; c < info.sample.c; ++c) {
      const float* l = lut.data() + static_cast<std::size_t>(c) * 256;
      for (std::size_t j = c * hw; j < (c + 1) * hw; ++j) dst[j] = l[raw[j]];
    }
    return;
  }
  const bool norm = !info.mean.empty();
  const auto* src = reinterpret_cast<const float*>(raw);
  for (int c = 0; c < info.sample.c; ++c)
    for (std::size_t j = c * hw; j < (c + 1) * hw; ++j) {
      float v = src[j];
      if (!std::isfinite(v))
        DT_INPUT_FAIL(info.path + ": dataset `images` has a non-finite value (" +
                      std::to_string(v) + ") in sample " + std::to_string(sample_index) +
                      " (channel " + std::to_string(c) + ", pixel " + std::to_string(j - c * hw) +
                      "), expected finite pixels");
      if (norm) v = (v - info.mean[c]) / info.stddev[c];
      dst[j] = v;
    }
}

/// Opens a dataset for reads of scattered rows. Unfiltered (uncompressed) chunks are read with the
/// chunk cache switched off: HDF5 then reads just the selected rows from the file instead of whole
/// chunks (a random 64-sample batch from 256-sample chunks would otherwise move 256× the bytes).
/// Filtered chunks must be decompressed whole, so they get a 64 MiB cache.
H5Dataset open_for_sampling(hid_t file, const std::string& name, const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  const bool filtered = dataset_filter_count(open_dataset(file, name, path).get()) > 0;
  H5PropList dapl(DT_CHECK_HDF5(H5Pcreate(H5P_DATASET_ACCESS), path + " `" + name + "`"));
  const std::size_t bytes = filtered ? std::size_t{64} << 20 : 0;
  DT_CHECK_HDF5(H5Pset_chunk_cache(dapl.get(), 12421, bytes, 1.0), path + " `" + name + "`");
  return open_dataset(file, name, path, dapl.get());
}

}  // namespace

AugmentDraw augment_draw(const Augmentation& a, std::int64_t sample) {
  AugmentDraw d;
  const std::uint64_t key =
      mix_seed(mix_seed(mix_seed(a.seed, 0xA116'3E47ull), static_cast<std::uint64_t>(a.epoch)),
               static_cast<std::uint64_t>(sample));
  if (a.crop_pad > 0) {
    const auto span = static_cast<std::uint64_t>(2 * a.crop_pad + 1);  // bias < span / 2^64
    d.dy = static_cast<int>(counter_hash(key, 0) % span);
    d.dx = static_cast<int>(counter_hash(key, 1) % span);
  }
  d.flip = a.flip && (counter_hash(key, 2) >> 63) != 0;
  return d;
}

std::vector<float> uint8_lut(const DatasetInfo& info) {
  if (!info.is_uint8) return {};
  const bool norm = !info.mean.empty();
  std::vector<float> lut(static_cast<std::size_t>(info.sample.c) * 256);
  for (int c = 0; c < info.sample.c; ++c)
    for (int b = 0; b < 256; ++b) {
      float v = static_cast<float>(b);
      v /= 255.0f;
      if (norm) v = (v - info.mean[c]) / info.stddev[c];
      lut[static_cast<std::size_t>(c) * 256 + b] = v;
    }
  return lut;
}

namespace {
/// augment_image on pixels of type T (normalized float, or raw uint8 padded with 0).
template <typename T>
void augment_pixels(const T* src, T* dst, int channels, int height, int width, int pad,
                    const AugmentDraw& d, const T* pad_value) {
  const std::size_t hw = static_cast<std::size_t>(height) * width;
  for (int c = 0; c < channels; ++c) {
    const T* s = src + c * hw;
    T* o = dst + c * hw;
    for (int y = 0; y < height; ++y, o += width) {
      const int sy = y + d.dy - pad;
      if (sy < 0 || sy >= height) {
        std::fill(o, o + width, pad_value[c]);
        continue;
      }
      const T* row = s + static_cast<std::size_t>(sy) * width;
      for (int x = 0; x < width; ++x) {
        const int sx = (d.flip ? width - 1 - x : x) + d.dx - pad;
        o[x] = sx >= 0 && sx < width ? row[sx] : pad_value[c];
      }
    }
  }
}
}  // namespace

void augment_image(const float* src, float* dst, int channels, int height, int width, int pad,
                   const AugmentDraw& d, const float* pad_value) {
  augment_pixels(src, dst, channels, height, width, pad, d, pad_value);
}

void augment_image(const std::uint8_t* src, std::uint8_t* dst, int channels, int height, int width,
                   int pad, const AugmentDraw& d) {
  const std::vector<std::uint8_t> zero(static_cast<std::size_t>(channels), 0);
  augment_pixels(src, dst, channels, height, width, pad, d, zero.data());
}

BatchReader::BatchReader(const DatasetInfo& info, std::vector<std::int64_t> indices, int batch_size,
                         int depth, std::int64_t start_batch, const Augmentation& augment,
                         std::size_t cache_bytes, EncodedCache* encoded_cache, bool uint8_batches)
    : info_(info), indices_(std::move(indices)), batch_size_(batch_size), depth_(depth),
      augment_(augment), uint8_batches_(uint8_batches) {
  DT_REQUIRE(!uint8_batches_ || info_.is_uint8,
             info_.path + ": uint8 batches asked of a file whose `images` are float32 (only "
                          "uint8 pixels can reach the device unnormalized)");
  DT_REQUIRE(batch_size_ >= 1, "batch size must be ≥ 1, got " + std::to_string(batch_size_));
  DT_REQUIRE(depth_ >= 1, "prefetch depth must be ≥ 1, got " + std::to_string(depth_));
  DT_REQUIRE(augment_.crop_pad >= 0,
             "random-crop padding must be ≥ 0, got " + std::to_string(augment_.crop_pad));
  for (std::size_t i = 0; i < indices_.size(); ++i)
    DT_REQUIRE(indices_[i] >= 0 && indices_[i] < info_.num_samples,
               info_.path + ": sample index " + std::to_string(indices_[i]) + " (entry " +
                   std::to_string(i) + ") not in [0, " + std::to_string(info_.num_samples) + ")");
  num_batches_ = (static_cast<std::int64_t>(indices_.size()) + batch_size_ - 1) / batch_size_;
  DT_REQUIRE(start_batch >= 0 && start_batch <= num_batches_,
             "start batch " + std::to_string(start_batch) + " not in [0, " +
                 std::to_string(num_batches_) + "]");
  next_batch_ = start_batch;

  reader_ = std::make_unique<Reader>();
  Reader& r = *reader_;
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    r.file = open_file_read(info_.path);
    r.images = open_for_sampling(r.file.get(), "images", info_.path);
    r.image_space =
        H5Dataspace(DT_CHECK_HDF5(H5Dget_space(r.images.get()), info_.path + " `images`"));
  }
  r.labels = labels_of(r.file.get(), info_, indices_);
  const std::vector<hsize_t> dims = dataset_dims(r.images.get());
  DT_REQUIRE(info_.encoded ||
                 (dims.size() == 4 && static_cast<std::int64_t>(dims[0]) == info_.num_samples &&
                  static_cast<int>(dims[1]) == info_.sample.c &&
                  static_cast<int>(dims[2]) == info_.sample.h &&
                  static_cast<int>(dims[3]) == info_.sample.w),
             info_.path + ": dataset `images` changed since it was validated");
  const bool norm = !info_.mean.empty();
  DT_REQUIRE(!norm || (static_cast<int>(info_.mean.size()) == info_.sample.c &&
                       static_cast<int>(info_.stddev.size()) == info_.sample.c),
             "DatasetInfo mean/std must have C values");
  r.lut = uint8_lut(info_);
  if (augment_.enabled()) {
    r.pad_value = pad_values(info_, r.lut);
    r.plain.resize(info_.sample.sample_count());
  }
  if (info_.encoded) {
    DT_REQUIRE(dims.size() == 1 && static_cast<std::int64_t>(dims[0]) == info_.num_samples,
               info_.path + ": dataset `images` changed since it was validated");
    DT_REQUIRE(augment_.crop_pad == 0, info_.path +
                                           ": --random-crop (pad and crop) needs decoded "
                                           "pixels; encoded images take --random-resized-crop");
    r.encoded = std::make_unique<EncodedSource>(info_, r.images.get(),
                                                uint8_batches_ ? nullptr : &r.lut, encoded_cache);
    cache_bytes = 0;  // encoded rows: encoded_cache
  }
  if (!indices_.empty() && cache_bytes > 0) {
    const auto [lo, hi] = std::minmax_element(indices_.begin(), indices_.end());
    const auto rows = static_cast<std::size_t>(*hi - *lo + 1);
    const std::size_t bytes =
        rows * info_.sample.sample_count() * (info_.is_uint8 ? 1 : sizeof(float));
    if (bytes <= cache_bytes) {
      r.cache.resize((bytes + sizeof(float) - 1) / sizeof(float));
      r.cache_first = *lo;
      read_rows(r.cache_first, rows, r.cache.data());
    }
  }
  ring_.resize(static_cast<std::size_t>(depth_));
  start();
}

void BatchReader::read_rows(std::int64_t first, std::size_t count, void* dst) {
  Reader& r = *reader_;
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  const std::string where = info_.path + " `images`";
  const hsize_t mdims[4] = {count, static_cast<hsize_t>(info_.sample.c),
                            static_cast<hsize_t>(info_.sample.h),
                            static_cast<hsize_t>(info_.sample.w)};
  H5Dataspace mspace(DT_CHECK_HDF5(H5Screate_simple(4, mdims, nullptr), where));
  const hsize_t file_start[4] = {static_cast<hsize_t>(first), 0, 0, 0};
  const hsize_t ones[4] = {1, 1, 1, 1};
  DT_CHECK_HDF5(
      H5Sselect_hyperslab(r.image_space.get(), H5S_SELECT_SET, file_start, nullptr, ones, mdims),
      where);
  DT_CHECK_HDF5(H5Dread(r.images.get(), info_.is_uint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT,
                        mspace.get(), r.image_space.get(), H5P_DEFAULT, dst),
                where);
}

BatchReader::~BatchReader() { stop(); }

bool BatchReader::cached() const { return !reader_->cache.empty(); }

std::int64_t BatchReader::bad_images() const { return bad_images_.load(); }

void BatchReader::start() {
  free_.clear();
  ready_.clear();
  for (int s = depth_ - 1; s >= 0; --s) free_.push_back(s);
  stop_ = false;
  thread_ = std::thread([this] { run(); });
}

void BatchReader::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A reader stuck in read_batch (next() timed out) cannot be joined: it is left behind, and the
  // process exits with the error next() threw.
  if (thread_.joinable()) stuck_ ? thread_.detach() : thread_.join();
}

void BatchReader::run() noexcept {
  std::int64_t k;
  {
    std::lock_guard<std::mutex> lock(mu_);
    k = next_batch_;
  }
  try {
    for (; k < num_batches_; ++k) {
      int slot;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !free_.empty(); });
        if (stop_) return;
        slot = free_.back();
        free_.pop_back();
      }
      read_batch(k, ring_[static_cast<std::size_t>(slot)].batch);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ring_[static_cast<std::size_t>(slot)].index = k;
        ready_.push_back(slot);
      }
      cv_.notify_all();
    }
  } catch (...) {
    // A failed HDF5 read or an absurd allocation here means a damaged file: bad input (exit 2).
    std::exception_ptr err = std::current_exception();
    try {
      std::rethrow_exception(err);
    } catch (const LibraryError& e) {
      err = std::make_exception_ptr(
          InputError(info_.path + ": corrupt or unreadable data in the dataset file: " +
                     without_error_prefix(e.what())));  // log_error() tags the message once
    } catch (const std::bad_alloc&) {
      err = std::make_exception_ptr(
          InputError(info_.path + ": corrupt dataset file (declared sizes too large to read)"));
    } catch (...) {
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = err;
    }
    cv_.notify_all();
  }
}

void BatchReader::read_batch(std::int64_t k, HostBatch& out) {
  if (fault_fires(FaultKind::hang_reader, k))  // test-only hook (core/fault.hpp)
    hang_forever("the batch reader at batch " + std::to_string(k));
  Reader& r = *reader_;
  const std::int64_t begin = k * batch_size_;
  const int m = static_cast<int>(
      std::min<std::int64_t>(batch_size_, static_cast<std::int64_t>(indices_.size()) - begin));
  if (r.encoded) {  // decode pool: bytes, decode, crop, flip, normalize (encoded.cpp)
    // The next batches' bytes are read while this one decodes.
    r.batch_rows.resize(1 + EncodedSource::kReadAhead);
    std::size_t count = 0;
    for (auto& rows : r.batch_rows) {
      const std::int64_t first = begin + static_cast<std::int64_t>(count) * batch_size_;
      if (first >= static_cast<std::int64_t>(indices_.size())) break;
      const std::int64_t end =
          std::min<std::int64_t>(first + batch_size_, static_cast<std::int64_t>(indices_.size()));
      rows.assign(indices_.begin() + first, indices_.begin() + end);
      ++count;
    }
    r.batch_rows.resize(count);
    r.encoded->fill(r.batch_rows, r.labels.data() + begin, augment_, out, bad_images_);
    return;
  }
  const std::size_t sample = info_.sample.sample_count();
  const std::size_t elem = info_.is_uint8 ? 1 : sizeof(float);

  unique_rows(indices_.data() + begin, m, r.order, r.rows, r.row_of);
  const std::size_t u = r.rows.size();
  const bool cached = !r.cache.empty();
  // Raw bytes of unique row i: from the in-memory cache, or from this batch's staging buffer.
  auto raw_row = [&](std::size_t i) -> const unsigned char* {
    const auto* base =
        reinterpret_cast<const unsigned char*>(cached ? r.cache.data() : r.staging.data());
    const std::size_t at = cached ? static_cast<std::size_t>(r.rows[i] - r.cache_first) : i;
    return base + at * sample * elem;
  };
  if (!cached) {
    r.staging.resize((u * sample * elem + sizeof(float) - 1) / sizeof(float));
    auto* staging = reinterpret_cast<unsigned char*>(r.staging.data());
    for (std::size_t i = 0; i < u;) {  // one regular hyperslab per run of consecutive rows
      std::size_t j = i + 1;
      while (j < u && r.rows[j] == r.rows[j - 1] + 1) ++j;
      read_rows(r.rows[i], j - i, staging + i * sample * elem);
      i = j;
    }
  }

  // Place rows in the requested order, normalized (or as they are: uint8_batches).
  out.n = m;
  out.x.resize(uint8_batches_ ? 0 : static_cast<std::size_t>(m) * sample);
  out.raw.resize(uint8_batches_ ? static_cast<std::size_t>(m) * sample : 0);
  out.y.resize(static_cast<std::size_t>(m));
  const bool augment = augment_.enabled();
  for (int p = 0; p < m; ++p) {
    const std::size_t row = static_cast<std::size_t>(r.row_of[static_cast<std::size_t>(p)]);
    out.y[static_cast<std::size_t>(p)] = r.labels[static_cast<std::size_t>(begin + p)];
    if (uint8_batches_) {
      std::uint8_t* const out_raw = out.raw.data() + static_cast<std::size_t>(p) * sample;
      if (augment)
        augment_image(raw_row(row), out_raw, info_.sample.c, info_.sample.h, info_.sample.w,
                      augment_.crop_pad, augment_draw(augment_, r.rows[row]));
      else std::copy_n(raw_row(row), sample, out_raw);
      continue;
    }
    float* const out_x = out.x.data() + static_cast<std::size_t>(p) * sample;
    float* dst = augment ? r.plain.data() : out_x;
    normalize_sample(info_, r.lut, raw_row(row), r.rows[row], dst);
    if (augment)
      augment_image(dst, out_x, info_.sample.c, info_.sample.h, info_.sample.w, augment_.crop_pad,
                    augment_draw(augment_, r.rows[row]), r.pad_value.data());
  }
}

bool BatchReader::next(HostBatch& out) {
  std::unique_lock<std::mutex> lock(mu_);
  consumed_ = true;
  if (next_batch_ >= num_batches_) return false;
  const double timeout = comm_timeout();
  if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout),
                    [this] { return !ready_.empty() || error_; })) {
    stuck_ = true;
    throw TimeoutError(timeout,
                       "reading batch " + std::to_string(next_batch_) + " of '" + info_.path + "'",
                       "the reader thread is stuck: a hung file system?");
  }
  if (ready_.empty()) std::rethrow_exception(error_);
  const int slot = ready_.front();
  ready_.erase(ready_.begin());
  Slot& s = ring_[static_cast<std::size_t>(slot)];
  DT_ASSERT(s.index == next_batch_, "batch reader delivered batches out of order");
  std::swap(out, s.batch);
  free_.push_back(slot);
  ++next_batch_;
  lock.unlock();
  cv_.notify_all();
  return true;
}

std::int64_t BatchReader::batches() const { return num_batches_; }

std::int64_t BatchReader::position() const { return next_batch_; }

void BatchReader::skip(std::int64_t batches) {
  DT_REQUIRE(!consumed_, "BatchReader::skip() is only allowed before the first next()");
  DT_REQUIRE(batches >= 0 && next_batch_ + batches <= num_batches_,
             "cannot skip " + std::to_string(batches) +
                 " batches: " + std::to_string(num_batches_ - next_batch_) + " remain");
  if (batches == 0) return;
  stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_batch_ += batches;
    error_ = nullptr;  // an error in a skipped batch does not matter
  }
  start();
}

}  // namespace dtrain
