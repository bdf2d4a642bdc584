// dtrain/io/dataset.hpp — image-classification datasets in HDF5: schema validation, per-epoch
// sharding of sample indices over workers, and a prefetching batch reader.
//
// Schema (docs/data.md): one HDF5 file per split with
//   images  uint8 or float32, rank 4, N×C×H×W
//   labels  any integer type, rank 1, N
//   root attributes (optional): mean, std (float, 1 or C values, in units after the /255 scaling of
//   uint8 images), num_classes (int), class_names (strings).
// Normalization of one pixel of channel c:  v = raw; if uint8: v /= 255; if mean/std: v =
// (v−mean[c])/std[c].
//
// Sharding follows the usual distributed-sampler shape (PyTorch's DistributedSampler, llm.c's
// dataloader): every rank draws the same permutation from (seed, epoch) and takes its contiguous
// block, so the workers together see each sample exactly once per epoch without communication.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/io/encoded_cache.hpp"
#include "dtrain/io/image.hpp"
#include "dtrain/tensor/shape.hpp"

namespace dtrain {

/// How a batch reader turns encoded images (DatasetInfo::encoded) into samples; set by the
/// trainer from the options (--random-resized-crop, --rrc-scale, --rrc-ratio, --center-crop,
/// --eval-resize, --data-threads, --on-bad-image) through configure_decode(). Plain data.
struct DecodeOptions {
  int crop = 0;  ///< S: every sample is C×S×S (0: not configured yet)
  bool random_resized =
      false;        ///< RandomResizedCrop(S) (training); else Resize(resize) + CenterCrop(S)
  CropRange range;  ///< RandomResizedCrop's scale and ratio ranges
  int resize = 0;   ///< shorter side before the centre crop, ≥ crop
  int threads = 1;  ///< decode threads of one reader (the reader thread is one of them)
  bool fail_on_bad = false;  ///< a bad image stops the run (else it is skipped and counted)
  /// fail_on_bad: why, in parentheses at the end of the bad image's error message
  std::string fail_reason = "--on-bad-image fail; its `skip` leaves such images out";
  double dct_ratio = 1.0;  ///< JPEG DCT scaling while the crop stays ≥ this × S (0: never)
};

/// What open_dataset_info() learned about one split file. Plain data: copyable, thread-safe to
/// read.
struct DatasetInfo {
  std::string path;              ///< the file
  std::int64_t num_samples = 0;  ///< N (> 0)
  Shape sample;                  ///< 1×C×H×W
  int num_classes = 0;           ///< see open_dataset_info()
  bool is_uint8 = false;         ///< images stored as uint8 (else float32)
  std::vector<float> mean;  ///< per channel (C values; a 1-value attribute is broadcast), or empty
  std::vector<float> stddev;  ///< per channel, > 0, or empty (then no mean/std normalization)
  std::vector<std::string> class_names;  ///< num_classes names, or empty
  bool has_labels = true;  ///< false: no `labels` dataset (labels_optional; batches get label 0)
  /// `images` holds encoded JPEG/PNG bytes (variable-length uint8, rank 1; docs/data.md); then
  /// sample is 1×C×S×S with S = decode.crop (1×C×0×0 until configure_decode()) and is_uint8 is
  /// true.
  bool encoded = false;
  DecodeOptions decode;  ///< encoded files only
};

/// Sets the transforms of an encoded file (info.encoded) and its sample shape 1×C×S×S, S =
/// opts.crop. Throws InputError naming the option for crop < 1, resize < crop (centre crop),
/// threads < 1. A no-op on decoded-pixel files.
void configure_decode(DatasetInfo& info, const DecodeOptions& opts);

/// Opens `path`, validates it against the schema and returns its description. Reads every label
/// (they are small) but no images. Thread-safe (locks hdf5_mutex()).
///
/// The class count is, in this order: expected_classes when > 0 (the training file's count when
/// opening the test file, or --num-classes, named by expected_from, e.g. "--num-classes"; empty
/// means "the training set"), then the `num_classes` attribute (which must equal expected_classes
/// when both are given), then max(label) + 1 — accepted only when at most half of those classes
/// have no sample, so that one corrupt label (say 1,000,000) cannot silently make a huge model.
///
/// Throws InputError naming the file, the dataset or attribute, and what was expected, for: a
/// missing file, a non-HDF5 file, a truncated/unreadable file, missing `images` or `labels`, wrong
/// rank, wrong dtype (images uint8/float32; labels integer), differing N, zero samples, a label < 0
/// or ≥ the class count (naming the label and its sample index), a max(label) + 1 that leaves most
/// classes empty, num_classes < 1, mean without std (or the reverse), mean/std not of 1 or C
/// values, non-finite mean/std, std ≤ 0, class_names not strings or not num_classes of them.
///
/// labels_optional (inference, `dtrain predict`): a file without a `labels` dataset is accepted
/// with has_labels = false and num_classes = expected_classes, else its `num_classes` attribute,
/// else 0 (the caller names what gives the count).
DatasetInfo open_dataset_info(const std::string& path, int expected_classes = 0,
                              const std::string& expected_from = "", bool labels_optional = false);

/// Checks a test file's class names against the training file's (both opened by
/// open_dataset_info(), the test one with the training set's class count): when both files have
/// `class_names`, label k must name the same class in both — a test file converted on its own can
/// number its classes otherwise, and would be scored against permuted labels. Throws InputError
/// naming both files and the first class whose names differ.
void check_class_names(const DatasetInfo& train, const DatasetInfo& test);

/// The description of synthetic data "CxHxW:classes" (`--synthetic`, e.g. "3x224x224:1000"):
/// path "synthetic CxHxW:classes", `num_samples` samples of shape 1×C×H×W, `classes` classes,
/// float32 with no mean/std. Throws InputError naming --synthetic and the expected format for a
/// malformed spec, a size outside [1, 65536], classes outside [2, 1000000] or a sample of more than
/// 2^31 − 1 floats, and InputError naming --synthetic-samples for num_samples < 1.
DatasetInfo synthetic_dataset(const std::string& spec, std::int64_t num_samples);
/// Just the parse of synthetic_dataset() (sample shape and class count; num_samples left 0), for
/// option validation. Throws InputError for `spec` as synthetic_dataset() does.
DatasetInfo parse_synthetic(const std::string& spec);

/// Deadline of one open_dataset_info() call (default 120 s). HDF5 can loop forever, or crash, on
/// damaged metadata (seen with libhdf5 1.10 on a corrupt global heap); past the deadline, or on
/// SIGSEGV/SIGBUS in the calling thread during the call, the process prints "dtrain: error: <file>:
/// ... corrupt" and _exits with code 2 instead of hanging or crashing. Setter for tests.
void set_dataset_open_deadline(double seconds);

/// Number of samples worker `worker` of `workers` gets from n per epoch: the n samples are cut into
/// `workers` contiguous blocks, the first n % workers of them one longer. Throws InputError for
/// n < 0, workers < 1 or worker ∉ [0, workers).
std::int64_t shard_size(std::int64_t n, int worker, int workers);

/// This worker's sample indices for an epoch: a permutation of [0, n) drawn from (seed, epoch) —
/// identical on every rank and every platform (std::mt19937_64 + a written-out Fisher–Yates with
/// unbiased bounded draws; no std::shuffle / std::uniform_int_distribution) — cut into blocks as
/// in shard_size(); returns block `worker`. shuffle = false gives the identity permutation (eval).
/// Together the workers cover each sample exactly once per epoch. Throws InputError as shard_size()
/// and for epoch < 0. O(n) time and memory.
std::vector<std::int64_t> epoch_shard(std::int64_t n, std::uint64_t seed, int epoch, int worker,
                                      int workers, bool shuffle = true);

/// Checks that every worker gets at least one full batch: throws InputError
/// "<file>: fewer samples (N) than workers × batch size (W × B)" otherwise (also for workers < 1 or
/// batch_size < 1). Returns the number of full batches the smallest shard holds,
/// floor(floor(N / W) / B) — the step count per epoch every worker can take in lock step (sync
/// training must not let workers with one more sample take one more step).
std::int64_t check_dataset_fits(const DatasetInfo& info, int workers, int batch_size);

/// Training-set augmentation, the CIFAR recipe (He et al. 2016 §4.2): zero-pad each image by
/// `crop_pad` pixels on every side and crop it back to H×W at a random offset; mirror it
/// horizontally with probability 1/2. "Zero" is the raw pixel value 0, so the padding of channel c
/// takes the normalized value of 0, (0 − mean[c]) / std[c] (torchvision's RandomCrop(padding=P)
/// runs before Normalize). Every draw is a pure function of (seed, epoch, sample index) —
/// counter_hash, no generator state — so a resumed run augments every sample exactly as an
/// uninterrupted run does.
struct Augmentation {
  int crop_pad = 0;        ///< P ≥ 0; 0 = no crop
  bool flip = false;       ///< random horizontal flip
  std::uint64_t seed = 0;  ///< --seed
  int epoch = 0;           ///< 0-based
  [[nodiscard]] bool enabled() const { return crop_pad > 0 || flip; }
};

/// One sample's draw: the crop's top-left corner in the padded image, dy, dx ∈ [0, 2·crop_pad]
/// (crop_pad, crop_pad is the unshifted image), and whether it is mirrored.
struct AugmentDraw {
  int dy = 0, dx = 0;
  bool flip = false;
};

/// The draw for dataset sample `sample` (its index in the file) under `a`. Pure function.
AugmentDraw augment_draw(const Augmentation& a, std::int64_t sample);

/// dst = the C×H×W image src, padded by `pad` on every side with pad_value[c] (C values), cropped
/// to H×W at (d.dy, d.dx) of the padded image, then mirrored left–right when d.flip:
///   dst[c][y][x] = padded[c][y + d.dy][x' + d.dx], x' = d.flip ? W−1−x : x.
/// src and dst must not overlap.
void augment_image(const float* src, float* dst, int channels, int height, int width, int pad,
                   const AugmentDraw& d, const float* pad_value);
/// The same on raw uint8 pixels (a batch left unnormalized, BatchReader's uint8_batches): the
/// padding is the raw value 0, whose normalized value is the float version's pad_value, so
/// normalizing the result equals augment_image of the normalized sample, bit for bit.
void augment_image(const std::uint8_t* src, std::uint8_t* dst, int channels, int height, int width,
                   int pad, const AugmentDraw& d);

/// A uint8 file's normalization as a table (the "normalization constants" of a raw batch): 256
/// fp32 values per channel, C×256, entry c·256 + b = (b/255 − mean[c])/std[c] (b/255 without
/// mean/std) — the formula of the header above evaluated in fp32 in that order, which is exactly
/// what every reader path applies per pixel. Empty for a float32 file. Pure function.
std::vector<float> uint8_lut(const DatasetInfo& info);

/// One batch on the host: y is n int32 labels in [0, num_classes); the pixels are either x, n×C×H×W
/// float32 normalized, or — from a reader made with uint8_batches — raw, n×C×H×W uint8 as stored
/// (augmented, not normalized; x is then empty): normalizing raw through uint8_lut() of the file
/// gives x bit for bit (on a GPU: Backend::normalize_uint8, a quarter of the bytes over PCIe).
/// Vectors keep their capacity across next() calls (BatchReader swaps buffers; no allocation in
/// steady state).
struct HostBatch {
  std::vector<float> x;
  std::vector<std::uint8_t> raw;
  std::vector<std::int32_t> y;
  int n = 0;
};

/// Reads batches of the given sample indices, in order, through a prefetch thread that keeps up to
/// `depth` batches ready (and augments them there, off the training thread, when asked to).
/// Batch k holds indices[k·B, min((k+1)·B, size)) in that order (the last one may be partial). Only
/// the selected image rows are read — sorted, consecutive rows merged into runs, one
/// regular-hyperslab read per run (see batch_reader.cpp for why not one union read) — never the
/// whole images dataset. The labels of `indices` are read once at construction. The thread does all
/// HDF5 work under hdf5_mutex(), so checkpoint writes on other threads are safe. Buffers are
/// allocated once (a ring of `depth` batches plus one staging buffer).
///
/// Encoded files (info.encoded, configured by configure_decode()): each batch's rows are read with
/// one point-selection H5Dread, then decoded, cropped (augment's seed and epoch key the random
/// crops and flips), normalized and placed in order by info.decode.threads threads (the reader
/// thread and helpers it owns; src/io/encoded.hpp) with no lock held, up to three batches at a
/// time (the rows of the batch two ahead read while the pool still decodes this one and the next,
/// and decoded by threads that run out of the earlier batches' images: three batch buffers more
/// than the ring); bad images are left out or end the run
/// (DecodeOptions::fail_on_bad, bad_images()). cache_bytes does not apply; rows held by
/// `encoded_cache` (io/encoded_cache.hpp) are taken from there, the others read per batch.
///
/// Use from one thread (next(), skip() and batches() are not safe to call concurrently). Errors in
/// the reader thread (I/O failure → LibraryError; non-finite float pixel → InputError naming file,
/// `images` and the sample index) are rethrown by next() once the batches before it are taken.
class BatchReader {
 public:
  /// info: from open_dataset_info(). indices: sample indices in [0, N), duplicates allowed.
  /// batch_size ≥ 1, depth ≥ 1. start_batch ∈ [0, batches()]: begin there (resume mid-epoch);
  /// equivalent to skip(start_batch). augment: applied by the reader thread to every sample after
  /// normalization (training batches; default: none). Opens the file and reads the labels on the
  /// calling thread, then starts the reader thread. Throws InputError for bad arguments (a
  /// crop_pad < 0), an unopenable file or a label outside [0, num_classes); LibraryError for a
  /// failed HDF5 call.
  /// `cache_bytes`: when the raw rows the reader can touch (the range [min, max] of `indices`, in
  /// the file's dtype: uint8 or float32) fit in this many bytes, they are read into memory with
  /// one H5Dread at construction and every batch is gathered from there (tf.data's cache(); a
  /// random batch otherwise costs one H5Dread per run of consecutive rows). 0: never cache.
  /// `encoded_cache` (encoded files; may be null; must outlive the reader): loaded by the reader
  /// thread before its first batch when not yet loaded, then serves the rows it holds.
  /// `uint8_batches`: hand out HostBatch::raw instead of x (decoded-pixel and encoded uint8 files
  /// only: InputError naming the file for a float32 one) — for a GPU worker, which normalizes on
  /// the device.
  BatchReader(const DatasetInfo& info, std::vector<std::int64_t> indices, int batch_size,
              int depth = 2, std::int64_t start_batch = 0, const Augmentation& augment = {},
              std::size_t cache_bytes = 0, EncodedCache* encoded_cache = nullptr,
              bool uint8_batches = false);
  /// Stops and joins the reader thread; never throws.
  ~BatchReader();
  BatchReader(const BatchReader&) = delete;
  BatchReader& operator=(const BatchReader&) = delete;
  BatchReader(BatchReader&&) = delete;
  BatchReader& operator=(BatchReader&&) = delete;

  /// Swaps the next batch into out (out's old buffers go back to the ring) and returns true, or
  /// returns false when all batches were delivered. Blocks until the batch is ready, at most
  /// comm_timeout() seconds (--timeout): then throws TimeoutError "timed out after T s waiting in:
  /// reading batch K of 'FILE' ..." and the stuck thread is detached, not joined. Rethrows the
  /// reader thread's error (then every later call rethrows it too).
  bool next(HostBatch& out);
  /// Whether the rows are held in memory (see cache_bytes).
  [[nodiscard]] bool cached() const;
  /// Encoded files: images skipped so far as bad (corrupt, truncated, not JPEG/PNG) under
  /// --on-bad-image skip; each is left out of its batch (HostBatch::n shrinks) and logged once.
  /// Thread-safe.
  [[nodiscard]] std::int64_t bad_images() const;
  /// ceil(indices.size() / batch_size), counting batches skipped at the start.
  [[nodiscard]] std::int64_t batches() const;
  /// Batches delivered or skipped so far (the data cursor to store in a checkpoint).
  [[nodiscard]] std::int64_t position() const;
  /// Skips the next `batches` batches; only before the first next() (InputError otherwise or when
  /// skipping past the end). Restarts the reader thread at the new position.
  void skip(std::int64_t batches);

 private:
  struct Slot {
    HostBatch batch;
    std::int64_t index = 0;  ///< batch number
  };
  void start();
  void stop() noexcept;
  void run() noexcept;
  void read_batch(std::int64_t k, HostBatch& out);
  /// One H5Dread of `count` consecutive rows from `first` into dst (raw dtype, packed): the cache
  /// fill and each run of a batch.
  void read_rows(std::int64_t first, std::size_t count, void* dst);

  DatasetInfo info_;
  std::vector<std::int64_t> indices_;
  int batch_size_;
  int depth_;
  Augmentation augment_;
  bool uint8_batches_;
  std::int64_t num_batches_;
  std::int64_t next_batch_ = 0;  ///< next batch the consumer gets
  bool consumed_ = false;        ///< next() was called

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> ring_;         ///< depth_ slots, reused
  std::vector<int> free_, ready_;  ///< slot numbers; ready_ in batch order
  bool stop_ = false;
  bool stuck_ = false;  ///< next() timed out: the thread is detached, not joined
  std::exception_ptr error_;
  std::thread thread_;
  std::atomic<std::int64_t> bad_images_{0};

  struct Reader;  ///< HDF5 handles and staging buffers, owned by the thread
  std::unique_ptr<Reader> reader_;
};

}  // namespace dtrain
