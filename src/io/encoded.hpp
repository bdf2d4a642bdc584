// src/io/encoded.hpp — private to src/io: datasets of encoded images (docs/data.md, "Encoded
// images"): schema checks at open, the all-bad probe, and EncodedSource, which turns a batch of
// sample indices into normalized C×S×S samples through a pool of decode threads (job_pool.hpp).
#pragma once

#include <hdf5.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/io/dataset.hpp"
#include "dtrain/io/encoded_cache.hpp"
#include "dtrain/io/hdf5.hpp"
#include "dtrain/io/image.hpp"
#include "job_pool.hpp"

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

/// Decodes one reader's batches: bytes from the file (under hdf5_mutex()), then decode, crop,
/// flip and normalize on the pool's threads (no lock). Up to 1 + kReadAhead batches are in the
/// pool at a time — the one fill() returns and the next kReadAhead, read ahead — so that a thread
/// with nothing left of the first starts on the next, and the serial read of a batch's bytes runs
/// while the pool still has a whole batch to decode. Owned and used by the reader thread only.
/// Holds 1 + kReadAhead batches' buffers of its own besides the caller's.
class EncodedSource {
 public:
  /// info: an encoded, configured DatasetInfo; images: its open `images` dataset (kept open by
  /// the caller). lut: C×256 normalized values of each raw byte, or nullptr: the samples stay
  /// uint8 (HostBatch::raw; x left empty). cache (may be null; outlives this): rows held in
  /// memory, loaded by the first fill() and then read from there.
  EncodedSource(const DatasetInfo& info, hid_t images, const std::vector<float>* lut,
                EncodedCache* cache = nullptr);
  /// Batches whose bytes fill() reads ahead of the one it returns.
  static constexpr int kReadAhead = 2;

  /// Stops the pool's threads first (they may be decoding the batches read ahead).
  ~EncodedSource();
  EncodedSource(const EncodedSource&) = delete;
  EncodedSource& operator=(const EncodedSource&) = delete;
  /// Fills out with the samples batches[0] (dataset indices, batch order) and `labels`, leaving
  /// out bad images (--on-bad-image skip: counted in bad, logged) or throwing InputError naming
  /// file, sample index and reason (fail). augment: seed, epoch, flip; crops are keyed by (seed,
  /// epoch, sample). batches[1..]: the rows the following calls will ask for, in order (fewer or
  /// none: unknown or the end; those past kReadAhead are ignored): their bytes are read here
  /// while the pool decodes (the read is serial, HDF5 under one lock) and the pool starts on them
  /// as its threads run out of the batches before; a following call with other rows drops that
  /// work. A failed read of a batch read ahead is thrown by the call that asks for it. out's
  /// buffers are swapped with this source's (no copy).
  void fill(const std::vector<std::vector<std::int64_t>>& batches, const std::int32_t* labels,
            const Augmentation& augment, HostBatch& out, std::atomic<std::int64_t>& bad);

 private:
  struct View {
    const std::uint8_t* data = nullptr;
    std::size_t size = 0;
  };
  /// One batch in the pool: its encoded bytes (views[p] = the bytes of rows[p], from the cache or
  /// from `bytes`, the misses read together with one H5Dread), its samples and its decode job.
  struct Slot {
    std::vector<std::int64_t> rows;
    std::vector<std::vector<std::uint8_t>> bytes;  ///< the misses' bytes
    std::vector<std::int64_t> miss_rows;
    std::vector<int> miss_pos;  ///< batch position of miss_rows[j]
    std::vector<View> views;    ///< per batch position
    std::vector<int> order;     ///< batch positions, the costliest decode first
    std::uint64_t seed = 0;     ///< the augmentation the batch is decoded with
    int epoch = 0;
    std::exception_ptr error;         ///< the read failed (thrown when the batch is asked for)
    bool ready = false;               ///< holds `rows` (decoding on the pool, or their error)
    HostBatch batch;                  ///< the decoded samples, in batch position order
    std::vector<std::string> errors;  ///< per batch position: empty when decoded
    JobPool::Job job;
    /// Whether the slot holds `r` under `a`'s seed and epoch (decoding, done, or their error).
    [[nodiscard]] bool holds(const std::vector<std::int64_t>& r, const Augmentation& a) const {
      return ready && rows == r && seed == a.seed && epoch == a.epoch;
    }
  };
  /// Reads rows' bytes into s (Throws LibraryError), orders them by cost, sizes s.batch and
  /// queues the decode job. With defer_error a failed read is kept in s.error instead.
  void prepare(Slot& s, const std::vector<std::int64_t>& rows, const Augmentation& augment,
               bool defer_error);
  /// Fills s's bytes and views for s.rows. Throws LibraryError.
  void gather(Slot& s);
  /// s.order: s's positions by transform_cost(), largest first (ties in position order), so that
  /// the pool's last images of a batch are short ones. Uses thread 0's decoder (the caller's:
  /// run it where the caller is not decoding).
  void order_by_cost(Slot& s, const Augmentation& augment);
  /// Decodes, crops, flips and normalizes batch position p of s into s.batch (s.errors[p] when
  /// bad).
  void decode_one(Slot& s, int p, int thread, const Augmentation& augment);
  /// Drops the bad images from s.batch (counted in bad, or InputError under --on-bad-image fail).
  void compact(Slot& s, const std::int32_t* labels, std::atomic<std::int64_t>& bad);
  /// Takes s off the pool (its running items finish first) and forgets its rows.
  void drop(Slot& s);

  const DatasetInfo& info_;
  hid_t images_;
  const std::vector<float>* lut_;
  EncodedCache* cache_;
  const ImageTransform transform_;  ///< from info_.decode (each sample's flip is its own)
  struct Scratch;
  std::vector<std::unique_ptr<Scratch>> scratch_;  ///< per thread
  static constexpr int kSlots = 1 + kReadAhead;
  /// The slot i batches after the one the next fill() should ask for.
  Slot& slot(int i) { return slots_[(cur_ + i) % kSlots]; }

  Slot slots_[kSlots];
  int cur_ = 0;   ///< slots_[cur_]: the batch the next fill() should ask for, then those after it
  JobPool pool_;  ///< last: destroyed (its threads stopped) before the slots they decode into
};

}  // namespace dtrain
