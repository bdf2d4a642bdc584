// src/io/encoded.hpp — private to src/io: datasets of encoded images (docs/data.md, "Encoded
// images"): schema checks at open, the all-bad probe, and EncodedSource, which turns a batch of
// sample indices into normalized C×S×S samples through a pool of decode threads.
#pragma once

#include <hdf5.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dtrain/io/dataset.hpp"
#include "dtrain/io/encoded_cache.hpp"
#include "dtrain/io/hdf5.hpp"
#include "dtrain/io/image.hpp"

namespace dtrain {

/// Whether dataset `images` is variable-length uint8 (encoded images). Caller holds hdf5_mutex().
bool is_encoded_images(hid_t images);

/// Fills info (encoded = true, is_uint8, sample 1×C×0×0, num_samples) from an encoded file:
/// `images` rank 1, root attribute `channels` 1 or 3, dataset `image_shapes` int N×3 (C, H, W of
/// each stored image, every entry ≥ 1). Throws InputError naming the file and object.
/// Caller holds hdf5_mutex().
void read_encoded_schema(hid_t file, hid_t images, DatasetInfo& info);

/// The all-bad check at start: decodes up to 64 images spread evenly over the file; throws
/// InputError "<file>: none of the K images probed ... decodes" when none does.
void probe_encoded(const DatasetInfo& info);

/// Reads the encoded bytes of `rows` (any order; each in [0, N)) with one H5Dread of a point
/// selection; out[i] receives row rows[i]. Takes hdf5_mutex(). Throws LibraryError.
void read_encoded_rows(hid_t images, const std::vector<std::int64_t>& rows,
                       std::vector<std::vector<std::uint8_t>>& out, const std::string& path);

/// Runs fn(i) for i in [0, n) over `threads` threads: the caller plus threads − 1 helpers kept
/// for the pool's lifetime. The first exception thrown by fn is rethrown by run() after every
/// index has finished. run() is not re-entrant; use from one thread. With `first` (may be
/// empty), the caller runs first() while the helpers start on the indices, then joins them:
/// serial work of the caller's (the next batch's file read) hidden behind the parallel work;
/// first() must not throw.
class ParallelFor {
 public:
  explicit ParallelFor(int threads);
  ~ParallelFor();
  ParallelFor(const ParallelFor&) = delete;
  ParallelFor& operator=(const ParallelFor&) = delete;
  void run(int n, const std::function<void(int, int)>& fn,  ///< fn(index, thread number)
           const std::function<void()>& first = {});
  [[nodiscard]] int threads() const { return static_cast<int>(helpers_.size()) + 1; }

 private:
  void work(int thread);
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::atomic<const std::function<void(int, int)>*> fn_{nullptr};
  std::atomic<int> n_{0};
  std::atomic<int> next_{0};
  int busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> helpers_;
};

/// Decodes one reader's batches: bytes from the file (under hdf5_mutex()), then decode, crop,
/// flip and normalize in parallel (no lock). Owned and used by the reader thread only.
class EncodedSource {
 public:
  /// info: an encoded, configured DatasetInfo; images: its open `images` dataset (kept open by
  /// the caller). lut: C×256 normalized values of each raw byte, or nullptr: the samples stay
  /// uint8 (HostBatch::raw; x left empty). cache (may be null; outlives this): rows held in
  /// memory, loaded by the first fill() and then read from there.
  EncodedSource(const DatasetInfo& info, hid_t images, const std::vector<float>* lut,
                EncodedCache* cache = nullptr);
  ~EncodedSource();
  EncodedSource(const EncodedSource&) = delete;
  EncodedSource& operator=(const EncodedSource&) = delete;
  /// Fills out with the samples `rows` (dataset indices, batch order) and `labels`, leaving out
  /// bad images (--on-bad-image skip: counted in bad, logged) or throwing InputError naming file,
  /// sample index and reason (fail). augment: seed, epoch, flip; crops are keyed by (seed, epoch,
  /// sample). next_rows: the rows the following call will ask for (empty: none or unknown),
  /// whose bytes this call reads from the file while the pool decodes `rows` — the read is
  /// serial (HDF5 under one lock), and at 16 decode threads it was a third of a batch's time.
  /// A failed read of next_rows is thrown by the call that asks for them.
  void fill(const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& next_rows,
            const std::int32_t* labels, const Augmentation& augment, HostBatch& out,
            std::atomic<std::int64_t>& bad);

 private:
  struct View {
    const std::uint8_t* data = nullptr;
    std::size_t size = 0;
  };
  /// One batch's encoded bytes: views[p] = the bytes of rows[p], from the cache or from `bytes`
  /// (the misses, read together with one H5Dread).
  struct Gathered {
    std::vector<std::int64_t> rows;
    std::vector<std::vector<std::uint8_t>> bytes;  ///< the misses' bytes
    std::vector<std::int64_t> miss_rows;
    std::vector<int> miss_pos;  ///< batch position of miss_rows[j]
    std::vector<View> views;    ///< per batch position
    std::vector<int> order;     ///< batch positions, the costliest decode first
    std::uint64_t seed = 0;     ///< the augmentation `order` was computed for
    int epoch = 0;
    std::exception_ptr error;  ///< the read failed (thrown when the batch is asked for)
    bool ready = false;        ///< holds `rows` (or their error)
  };
  /// Fills g with the bytes of rows (g.ready afterwards). Throws LibraryError.
  void gather(const std::vector<std::int64_t>& rows, Gathered& g);
  /// g.order: g's positions by transform_cost(), largest first (ties in position order), so
  /// that the pool's last images of a batch are short ones — a batch ends when its slowest
  /// thread does. Uses thread 0's decoder (the caller's: run it where the caller is not decoding).
  void order_by_cost(Gathered& g, const Augmentation& augment, const ImageTransform& t);
  /// Decodes, crops, flips and normalizes batch position p into out (errors_[p] when bad).
  void decode_one(int p, int thread, std::int64_t row, const Augmentation& augment,
                  const ImageTransform& t, HostBatch& out);
  /// Drops the bad images from out (counted in bad, or InputError under --on-bad-image fail).
  void compact(const std::vector<std::int64_t>& rows, const std::int32_t* labels, HostBatch& out,
               std::atomic<std::int64_t>& bad);

  const DatasetInfo& info_;
  hid_t images_;
  const std::vector<float>* lut_;
  EncodedCache* cache_;
  ParallelFor pool_;
  Gathered current_, ahead_;         ///< the batch being decoded; the next one, read meanwhile
  std::vector<std::string> errors_;  ///< per batch position: empty when decoded
  struct Scratch;
  std::vector<std::unique_ptr<Scratch>> scratch_;  ///< per thread
};

}  // namespace dtrain
