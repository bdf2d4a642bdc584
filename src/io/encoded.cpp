// dtrain/io/encoded.cpp — src/io/encoded.hpp: datasets of encoded images (schema, the all-bad
// probe, point-selection reads of variable-length rows) and the decode pool that turns a batch's
// bytes into normalized samples with io/image.hpp's decode and transforms.
#include "encoded.hpp"

#include <algorithm>
#include <cstring>

#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "dtrain/io/image.hpp"
#include "input_fail.hpp"

namespace dtrain {

bool is_encoded_images(hid_t images) {
  H5Datatype type(DT_CHECK_HDF5(H5Dget_type(images), "images datatype"));
  if (H5Tget_class(type.get()) != H5T_VLEN) return false;
  H5Datatype base(DT_CHECK_HDF5(H5Tget_super(type.get()), "images base datatype"));
  return H5Tget_class(base.get()) == H5T_INTEGER && H5Tget_size(base.get()) == 1 &&
         H5Tget_sign(base.get()) == H5T_SGN_NONE;
}

void read_encoded_schema(hid_t file, hid_t images, DatasetInfo& info) {
  const std::string& path = info.path;
  const std::vector<hsize_t> dims = dataset_dims(images);
  if (dims.size() != 1)
    DT_INPUT_FAIL(path + ": dataset `images` of variable-length uint8 (encoded images) has rank " +
                  std::to_string(dims.size()) + ", expected rank 1 (N)");
  if (!has_attribute(file, "channels"))
    DT_INPUT_FAIL(path +
                  ": encoded images need root attribute `channels` (1 or 3), which is missing");
  const std::int64_t c = read_attr_int(file, "channels", path);
  if (c != 1 && c != 3)
    DT_INPUT_FAIL(path + ": attribute `channels` = " + std::to_string(c) + ", expected 1 or 3");
  if (!has_link(file, "image_shapes"))
    DT_INPUT_FAIL(
        path +
        ": encoded images need dataset `image_shapes` (N×3: C, H, W per image), which is missing");
  std::vector<hsize_t> sdims;
  const std::vector<std::int64_t> shapes = read_dataset_int64s(file, "image_shapes", path, &sdims);
  if (sdims.size() != 2 || sdims[0] != dims[0] || sdims[1] != 3)
    DT_INPUT_FAIL(path + ": dataset `image_shapes` has shape " +
                  (sdims.size() == 2 ? std::to_string(sdims[0]) + "×" + std::to_string(sdims[1])
                                     : "of rank " + std::to_string(sdims.size())) +
                  ", expected N×3 = " + std::to_string(dims[0]) + "×3");
  for (std::size_t i = 0; i < shapes.size(); ++i)
    if (shapes[i] < 1 || shapes[i] > (1 << 20))
      DT_INPUT_FAIL(path + ": dataset `image_shapes` has " + std::to_string(shapes[i]) +
                    " at sample " + std::to_string(i / 3) + ", expected sizes in [1, 2^20]");
  info.encoded = true;
  info.is_uint8 = true;
  info.num_samples = static_cast<std::int64_t>(dims[0]);
  info.sample = Shape{1, static_cast<int>(c), 0, 0};
}

void read_encoded_rows(hid_t images, const std::vector<std::int64_t>& rows,
                       std::vector<std::vector<std::uint8_t>>& out, const std::string& path) {
  out.resize(rows.size());
  if (rows.empty()) return;
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  const std::string where = path + " `images`";
  H5Dataspace fspace(DT_CHECK_HDF5(H5Dget_space(images), where));
  std::vector<hsize_t> coords(rows.begin(), rows.end());
  DT_CHECK_HDF5(H5Sselect_elements(fspace.get(), H5S_SELECT_SET, coords.size(), coords.data()),
                where);
  const hsize_t n = rows.size();
  H5Dataspace mspace(DT_CHECK_HDF5(H5Screate_simple(1, &n, nullptr), where));
  H5Datatype vtype(DT_CHECK_HDF5(H5Tvlen_create(H5T_NATIVE_UINT8), where));
  std::vector<hvl_t> buf(rows.size());
  DT_CHECK_HDF5(H5Dread(images, vtype.get(), mspace.get(), fspace.get(), H5P_DEFAULT, buf.data()),
                where);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto* p = static_cast<const std::uint8_t*>(buf[i].p);
    out[i].assign(p, p + buf[i].len);
  }
  H5Dvlen_reclaim(vtype.get(), mspace.get(), H5P_DEFAULT, buf.data());
}

void probe_encoded(const DatasetInfo& info) {
  std::vector<std::int64_t> rows;
  const std::int64_t k = std::min<std::int64_t>(64, info.num_samples);
  for (std::int64_t i = 0; i < k; ++i) rows.push_back(i * info.num_samples / k);
  std::vector<std::vector<std::uint8_t>> bytes;
  {
    std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
    H5File file = open_file_read(info.path);
    H5Dataset images = open_dataset(file.get(), "images", info.path);
    read_encoded_rows(images.get(), rows, bytes, info.path);
  }
  ImageDecoder dec;
  Image8 img;
  std::string first_error;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    try {
      dec.decode(bytes[i].data(), bytes[i].size(), info.sample.c, img);
      return;
    } catch (const ImageError& e) {
      if (first_error.empty()) first_error = "sample " + std::to_string(rows[i]) + ": " + e.what();
    }
  }
  DT_INPUT_FAIL(info.path + ": dataset `images`: none of the " + std::to_string(rows.size()) +
                " encoded images probed" + (k < info.num_samples ? " (spread over the file)" : "") +
                " decodes (" + first_error + "), expected JPEG or PNG images");
}

// ---- EncodedSource ----
namespace {
/// What transform_image() does to every image of a file configured with `d` (the flip is per
/// sample).
ImageTransform transform_of(const DecodeOptions& d) {
  ImageTransform t;
  t.out = d.crop;
  t.random_crop = d.random_resized;
  t.range = d.range;
  t.resize = d.resize;
  t.dct_ratio = d.dct_ratio;
  return t;
}

/// The key of sample `row`'s random crop and flip in this epoch.
std::uint64_t sample_key(const Augmentation& augment, std::int64_t row) {
  return mix_seed(
      mix_seed(mix_seed(augment.seed, 0x52'52'43'20ull), static_cast<std::uint64_t>(augment.epoch)),
      static_cast<std::uint64_t>(row));
}
}  // namespace

struct EncodedSource::Scratch {
  ImageDecoder decoder;
  Image8 image;
  std::vector<std::uint8_t> planar;  ///< C×S×S before normalization
};

EncodedSource::EncodedSource(const DatasetInfo& info, hid_t images, const std::vector<float>* lut,
                             EncodedCache* cache)
    : info_(info), images_(images), lut_(lut), cache_(cache), transform_(transform_of(info.decode)),
      pool_(std::max(1, info.decode.threads)) {
  DT_REQUIRE(info_.decode.crop >= 1, info_.path +
                                         ": encoded images need an output size "
                                         "(--random-resized-crop SIZE or --center-crop SIZE)");
  for (int t = 0; t < pool_.threads(); ++t) scratch_.push_back(std::make_unique<Scratch>());
}

EncodedSource::~EncodedSource() = default;  // pool_, the last member, goes first

void EncodedSource::gather(Slot& s) {
  if (cache_ != nullptr)
    cache_->load(info_.num_samples, [&](std::int64_t first, std::int64_t count,
                                        std::vector<std::vector<std::uint8_t>>& out) {
      std::vector<std::int64_t> block(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) block[static_cast<std::size_t>(i)] = first + i;
      read_encoded_rows(images_, block, out, info_.path);
    });
  s.views.assign(s.rows.size(), View{});
  s.miss_rows.clear();
  s.miss_pos.clear();
  for (std::size_t p = 0; p < s.rows.size(); ++p) {
    const std::vector<std::uint8_t>* held = cache_ != nullptr ? cache_->find(s.rows[p]) : nullptr;
    if (held != nullptr) {
      s.views[p] = View{held->data(), held->size()};
    } else {
      s.miss_rows.push_back(s.rows[p]);
      s.miss_pos.push_back(static_cast<int>(p));
    }
  }
  read_encoded_rows(images_, s.miss_rows, s.bytes, info_.path);
  for (std::size_t j = 0; j < s.miss_pos.size(); ++j)
    s.views[static_cast<std::size_t>(s.miss_pos[j])] = View{s.bytes[j].data(), s.bytes[j].size()};
}

void EncodedSource::order_by_cost(Slot& s, const Augmentation& augment) {
  const std::size_t m = s.rows.size();
  s.order.resize(m);
  for (std::size_t p = 0; p < m; ++p) s.order[p] = static_cast<int>(p);
  if (pool_.threads() == 1) return;  // one thread decodes them all in any order
  std::vector<double> cost(m);
  ImageDecoder& dec = scratch_.front()->decoder;
  for (std::size_t p = 0; p < m; ++p)
    cost[p] = transform_cost(dec, s.views[p].data, s.views[p].size, transform_,
                             sample_key(augment, s.rows[p]));
  std::stable_sort(s.order.begin(), s.order.end(), [&](int a, int b) {
    return cost[static_cast<std::size_t>(a)] > cost[static_cast<std::size_t>(b)];
  });
}

void EncodedSource::decode_one(Slot& s, int p, int thread, const Augmentation& augment) {
  Scratch& sc = *scratch_[static_cast<std::size_t>(thread)];
  const std::uint64_t key = sample_key(augment, s.rows[static_cast<std::size_t>(p)]);
  ImageTransform tp = transform_;
  tp.flip = augment.flip && (counter_hash(key, 62) >> 63) != 0;
  const int c = info_.sample.c, size = transform_.out;
  const std::size_t plane = static_cast<std::size_t>(size) * size;
  std::vector<std::uint8_t>& planar = sc.planar;
  planar.resize(plane * c);
  const View& b = s.views[static_cast<std::size_t>(p)];
  // Raw batches: straight into the batch slot; else through planar, normalized below.
  std::uint8_t* const to = lut_ == nullptr
                               ? s.batch.raw.data() + static_cast<std::size_t>(p) * plane * c
                               : planar.data();
  try {
    transform_image(sc.decoder, b.data, b.size, c, tp, key, sc.image, to);
  } catch (const ImageError& e) {
    s.errors[static_cast<std::size_t>(p)] = e.what();
    return;
  }
  if (lut_ == nullptr) return;
  // Normalize in the same pass (LUT of (v/255 − mean[c]) / std[c]) into the batch slot.
  float* dst = s.batch.x.data() + static_cast<std::size_t>(p) * plane * c;
  for (int ch = 0; ch < c; ++ch) {
    const float* lut = lut_->data() + static_cast<std::size_t>(ch) * 256;
    const std::uint8_t* src = planar.data() + ch * plane;
    for (std::size_t j = 0; j < plane; ++j) dst[ch * plane + j] = lut[src[j]];
  }
}

void EncodedSource::compact(Slot& s, const std::int32_t* labels, std::atomic<std::int64_t>& bad) {
  HostBatch& out = s.batch;
  const int m = static_cast<int>(s.rows.size());
  const std::size_t sample = static_cast<std::size_t>(info_.sample.c) * info_.decode.crop *
                             static_cast<std::size_t>(info_.decode.crop);
  int kept = 0;
  for (int p = 0; p < m; ++p) {
    const std::string& err = s.errors[static_cast<std::size_t>(p)];
    if (!err.empty()) {
      const std::string msg = info_.path + ": dataset `images` sample " +
                              std::to_string(s.rows[static_cast<std::size_t>(p)]) +
                              " is a bad image: " + err;
      if (info_.decode.fail_on_bad) throw InputError(msg + " (" + info_.decode.fail_reason + ")");
      const std::int64_t count = ++bad;
      if (count <= 10)
        log_warn(msg + "; skipped (--on-bad-image skip)" +
                 (count == 10 ? "; further ones are counted, not logged" : ""));
      continue;
    }
    if (kept != p && lut_ != nullptr)
      std::memmove(out.x.data() + static_cast<std::size_t>(kept) * sample,
                   out.x.data() + static_cast<std::size_t>(p) * sample, sample * sizeof(float));
    else if (kept != p)
      std::memmove(out.raw.data() + static_cast<std::size_t>(kept) * sample,
                   out.raw.data() + static_cast<std::size_t>(p) * sample, sample);
    out.y[static_cast<std::size_t>(kept)] = labels[p];
    ++kept;
  }
  out.n = kept;
  if (lut_ != nullptr) out.x.resize(static_cast<std::size_t>(kept) * sample);
  else out.raw.resize(static_cast<std::size_t>(kept) * sample);
  out.y.resize(static_cast<std::size_t>(kept));
}

void EncodedSource::drop(Slot& s) {
  pool_.cancel(s.job);
  s.ready = false;
  s.error = nullptr;
}

void EncodedSource::prepare(Slot& s, const std::vector<std::int64_t>& rows,
                            const Augmentation& augment, bool defer_error) {
  s.rows = rows;
  s.seed = augment.seed;
  s.epoch = augment.epoch;
  s.error = nullptr;
  try {
    gather(s);
    order_by_cost(s, augment);
  } catch (...) {
    if (!defer_error) throw;
    s.error = std::current_exception();
    s.ready = true;
    return;
  }
  const std::size_t m = rows.size();
  const std::size_t sample =
      static_cast<std::size_t>(info_.sample.c) * transform_.out * transform_.out;
  s.batch.x.resize(lut_ != nullptr ? m * sample : 0);
  s.batch.raw.resize(lut_ != nullptr ? 0 : m * sample);
  s.batch.y.resize(m);
  s.errors.assign(m, std::string());
  s.ready = true;
  // Each image goes to one slot of its own (position p), so the order of the work does not
  // change the batch.
  pool_.publish(s.job, static_cast<int>(m), [this, &s, augment](int i, int thread) {
    decode_one(s, s.order[static_cast<std::size_t>(i)], thread, augment);
  });
}

void EncodedSource::fill(const std::vector<std::vector<std::int64_t>>& batches,
                         const std::int32_t* labels, const Augmentation& augment, HostBatch& out,
                         std::atomic<std::int64_t>& bad) {
  DT_ASSERT(!batches.empty(), "EncodedSource::fill: no batch asked for");
  const int want = std::min(kSlots, static_cast<int>(batches.size()));
  // The slots from cur_ on hold the batches asked for, in order, as far as they were read ahead.
  // From the first that does not, that slot and every later one are dropped and queued again in
  // order (the pool runs the oldest job first).
  int held = 0;
  while (held < want && slot(held).holds(batches[static_cast<std::size_t>(held)], augment)) ++held;
  for (int i = held; i < kSlots; ++i) drop(slot(i));
  Slot& s = slot(0);
  if (held == 0) {
    prepare(s, batches.front(), augment, false);
  } else if (s.error) {  // the read ahead failed
    const std::exception_ptr error = s.error;
    drop(s);
    std::rethrow_exception(error);
  }
  // The next batches' bytes are read while the pool decodes those before them; the pool starts
  // on them as its threads run out of the earlier batches' images.
  for (int i = std::max(held, 1); i < want; ++i)
    prepare(slot(i), batches[static_cast<std::size_t>(i)], augment, true);
  try {
    pool_.finish(s.job);
  } catch (...) {
    s.ready = false;
    throw;
  }
  s.ready = false;
  compact(s, labels, bad);  // bad images leave the batch (or end the run), in order
  std::swap(out, s.batch);
  cur_ = (cur_ + 1) % kSlots;
}

}  // namespace dtrain
