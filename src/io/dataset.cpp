// dtrain/io/dataset.cpp — schema validation (open_dataset_info) and per-epoch sharding
// (epoch_shard, shard_size, check_dataset_fits) of io/dataset.hpp. The batch reader is in
// batch_reader.cpp.
#include <algorithm>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>
#include <new>
#include <stdexcept>
#include <cmath>
#include <numeric>
#include <random>

#include "dtrain/core/error.hpp"
#include "dtrain/core/synthetic_spec.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/io/hdf5.hpp"
#include "encoded.hpp"
#include "input_fail.hpp"

namespace dtrain {
namespace {

/// Reads mean or std: 1 or C finite values, broadcast to C. Empty when the attribute is absent.
std::vector<float> read_channel_attr(hid_t file, const std::string& name, const std::string& path,
                                     int channels) {
  if (!has_attribute(file, name)) return {};
  std::vector<float> v = read_attr_floats(file, name, path);
  if (v.size() != 1 && v.size() != static_cast<std::size_t>(channels))
    DT_INPUT_FAIL(path + ": attribute `" + name + "` has " + std::to_string(v.size()) +
                  " values, expected 1 or C = " + std::to_string(channels));
  for (float x : v)
    if (!std::isfinite(x))
      DT_INPUT_FAIL(path + ": attribute `" + name + "` has a non-finite value");
  if (v.size() == 1) v.assign(static_cast<std::size_t>(channels), v[0]);
  return v;
}

/// SplitMix64 finalizer: mixes (seed, epoch) into a well-spread 64-bit seed.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Unbiased draw in [0, range) from the raw 64-bit stream (rejection of the short last interval).
/// Deterministic across platforms, unlike std::uniform_int_distribution.
std::uint64_t bounded(std::mt19937_64& rng, std::uint64_t range) {
  const std::uint64_t threshold = (0 - range) % range;  // 2^64 mod range
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % range;
  }
}

void check_workers(std::int64_t n, int worker, int workers) {
  DT_REQUIRE(n >= 0, "dataset size must be ≥ 0, got " + std::to_string(n));
  DT_REQUIRE(workers >= 1, "number of workers must be ≥ 1, got " + std::to_string(workers));
  DT_REQUIRE(worker >= 0 && worker < workers, "worker index " + std::to_string(worker) +
                                                  " not in [0, " + std::to_string(workers) + ")");
}

/// First index of worker's block.
std::int64_t shard_begin(std::int64_t n, int worker, int workers) {
  const std::int64_t base = n / workers, rem = n % workers;
  return worker * base + std::min<std::int64_t>(worker, rem);
}

}  // namespace

/// A damaged header can declare far more image bytes than the file holds (HDF5 would then return
/// fill values). Unless a compression filter is set, every declared byte must be stored.
static void check_images_stored(const DatasetInfo& info) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5File file = open_file_read(info.path);
  H5Dataset images = open_dataset(file.get(), "images", info.path);
  H5PropList dcpl(DT_CHECK_HDF5(H5Dget_create_plist(images.get()), info.path + " `images`"));
  const int filters = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, cd[8];
    std::size_t ncd = 8;
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &ncd, cd, 0, nullptr, nullptr);
    if (id != H5Z_FILTER_FLETCHER32 && id != H5Z_FILTER_SHUFFLE) return;  // compressed
  }
  const double declared = static_cast<double>(info.num_samples) *
                          static_cast<double>(info.sample.sample_count()) * (info.is_uint8 ? 1 : 4);
  const double stored = static_cast<double>(H5Dget_storage_size(images.get()));
  if (stored < declared)
    throw InputError(
        info.path + ": dataset `images` declares " + std::to_string(info.num_samples) +
        " samples of " + info.sample.str() + " (" +
        std::to_string(static_cast<long long>(declared)) + " bytes) but the file stores only " +
        std::to_string(static_cast<long long>(stored)) + " bytes: truncated or corrupt");
}

/// mean / std attributes into info: both or neither; 1 or C values; std > 0.
static void read_normalization(hid_t file, DatasetInfo& info) {
  const std::string& path = info.path;
  const int channels = info.sample.c;
  info.mean = read_channel_attr(file, "mean", path, channels);
  info.stddev = read_channel_attr(file, "std", path, channels);
  if (info.mean.empty() != info.stddev.empty())
    DT_INPUT_FAIL(path + ": has attribute `" + std::string(info.mean.empty() ? "std" : "mean") +
                  "` but not `" + (info.mean.empty() ? "mean" : "std") +
                  "`, expected both or neither");
  for (float s : info.stddev)
    if (!(s > 0.0f))
      DT_INPUT_FAIL(path + ": attribute `std` has value " + std::to_string(s) + ", expected > 0");
}

/// `images` into info (sample shape, dtype, encoded schema); returns N, its sample count. Rank 4,
/// uint8 or float32 — or rank 1 of encoded images (variable-length uint8).
static hsize_t read_images_schema(hid_t file, DatasetInfo& info) {
  const std::string& path = info.path;
  H5Dataset images = open_dataset(file, "images", path);
  std::vector<hsize_t> idims = dataset_dims(images.get());
  if (is_encoded_images(images.get())) {
    read_encoded_schema(file, images.get(), info);
    idims = {static_cast<hsize_t>(info.num_samples), static_cast<hsize_t>(info.sample.c), 1, 1};
  }
  // The dtype first: variable-length data of another type is not encoded images of rank 4.
  const H5TypeInfo itype = dataset_type(images.get());
  const bool is_u8 =
      info.encoded || (itype.cls == H5T_INTEGER && itype.size == 1 && !itype.is_signed);
  const bool is_f32 = !info.encoded && itype.cls == H5T_FLOAT && itype.size == 4;
  if (!is_u8 && !is_f32)
    DT_INPUT_FAIL(path + ": dataset `images` has dtype " + itype.str() +
                  ", expected uint8 or float32 (or variable-length uint8: encoded images)");
  if (idims.size() != 4)
    DT_INPUT_FAIL(path + ": dataset `images` has rank " + std::to_string(idims.size()) + " (" +
                  dims_text(idims) + "), expected rank 4 (N×C×H×W)");
  for (int d = 1; d < 4; ++d)
    if (idims[d] < 1 || idims[d] > static_cast<hsize_t>(INT_MAX))
      DT_INPUT_FAIL(path + ": dataset `images` has shape " + dims_text(idims) +
                    ", expected C, H, W in [1, 2^31)");
  info.is_uint8 = is_u8;
  if (!info.encoded)
    info.sample = Shape{1, static_cast<int>(idims[1]), static_cast<int>(idims[2]),
                        static_cast<int>(idims[3])};
  return idims[0];
}

/// `labels`: rank 1, integer, one per image (n of them, n ≥ 1), each ≥ 0; returns them.
static std::vector<std::int64_t> read_labels(hid_t file, const std::string& path, hsize_t n) {
  H5Dataset labels_ds = open_dataset(file, "labels", path);
  const std::vector<hsize_t> ldims = dataset_dims(labels_ds.get());
  if (ldims.size() != 1)
    DT_INPUT_FAIL(path + ": dataset `labels` has rank " + std::to_string(ldims.size()) + " (" +
                  dims_text(ldims) + "), expected rank 1 (N)");
  const H5TypeInfo ltype = dataset_type(labels_ds.get());
  if (!ltype.is_integer())
    DT_INPUT_FAIL(path + ": dataset `labels` has dtype " + ltype.str() +
                  ", expected an integer type");
  if (ldims[0] != n)
    DT_INPUT_FAIL(path + ": dataset `images` has N = " + std::to_string(n) +
                  " samples but dataset `labels` has " + std::to_string(ldims[0]) +
                  ", expected equal");
  if (n == 0) DT_INPUT_FAIL(path + ": dataset `images` has zero samples, expected N ≥ 1");
  std::vector<std::int64_t> labels = read_dataset_int64s(file, "labels", path);
  const auto min_it = std::min_element(labels.begin(), labels.end());
  if (*min_it < 0)
    DT_INPUT_FAIL(path + ": dataset `labels` has label " + std::to_string(*min_it) + " at sample " +
                  std::to_string(min_it - labels.begin()) + ", expected labels ≥ 0");
  return labels;
}

/// The class count when neither the caller nor the file gives one: max(label) + 1, which must not
/// leave most classes without a sample (one corrupt label, say 1,000,000, must not silently make a
/// million-class model).
static int classes_from_labels(const std::string& path, const std::vector<std::int64_t>& labels) {
  const auto max_it = std::max_element(labels.begin(), labels.end());
  if (*max_it >= INT_MAX)
    DT_INPUT_FAIL(path + ": dataset `labels` has label " + std::to_string(*max_it) + ", too large");
  const int classes = static_cast<int>(*max_it + 1);
  std::vector<std::int64_t> distinct = labels;
  std::sort(distinct.begin(), distinct.end());
  const auto used =
      static_cast<std::int64_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  const std::int64_t empty = classes - used;
  if (2 * empty > classes)
    DT_INPUT_FAIL(path + ": dataset `labels` has label " + std::to_string(*max_it) + " at sample " +
                  std::to_string(max_it - labels.begin()) + ": max label + 1 = " +
                  std::to_string(classes) + " classes, of which " + std::to_string(empty) +
                  " have no sample (more than half): a corrupt label? Expected labels in [0, K) "
                  "for K classes; give K as attribute `num_classes` or option --num-classes");
  return classes;
}

/// The file's `num_classes` attribute, ≥ 1 (0: it has none).
static int num_classes_attribute(hid_t file, const std::string& path) {
  if (!has_attribute(file, "num_classes")) return 0;
  const std::int64_t k = read_attr_int(file, "num_classes", path);
  if (k < 1 || k > INT_MAX)
    DT_INPUT_FAIL(path + ": attribute `num_classes` = " + std::to_string(k) + ", expected ≥ 1");
  return static_cast<int>(k);
}

/// info.num_classes: the expected count (--num-classes, or the training set's for a test file),
/// else the attribute, else max(label) + 1; then every label must lie below it.
static void resolve_classes(hid_t file, const std::vector<std::int64_t>& labels,
                            int expected_classes, const std::string& expected_from,
                            DatasetInfo& info) {
  const std::string& path = info.path;
  const std::string expected_what =
      expected_from.empty()
          ? "the training set has " + std::to_string(expected_classes) + " classes"
          : expected_from + " is " + std::to_string(expected_classes);
  if (const int k = num_classes_attribute(file, path); k > 0) {
    info.num_classes = k;
    if (expected_classes > 0 && k != expected_classes)
      DT_INPUT_FAIL(path + ": attribute `num_classes` = " + std::to_string(k) + " but " +
                    expected_what);
  } else if (expected_classes > 0) {
    info.num_classes = expected_classes;
  } else {
    info.num_classes = classes_from_labels(path, labels);
  }
  const auto max_it = std::max_element(labels.begin(), labels.end());
  if (*max_it < info.num_classes) return;
  const std::string where = path + ": dataset `labels` has label " + std::to_string(*max_it) +
                            " at sample " + std::to_string(max_it - labels.begin());
  if (expected_classes > 0 && !expected_from.empty())
    DT_INPUT_FAIL(where + ", expected < " + std::to_string(expected_classes) + " (" +
                  expected_from + ")");
  if (expected_classes > 0)
    DT_INPUT_FAIL(where + ", but the training set has only " + std::to_string(expected_classes) +
                  " classes");
  DT_INPUT_FAIL(where + ", expected < num_classes = " + std::to_string(info.num_classes));
}

static DatasetInfo read_dataset_info(const std::string& path, int expected_classes,
                                     const std::string& expected_from, bool labels_optional) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  DatasetInfo info;
  info.path = path;
  H5File file = open_file_read(path);
  const hsize_t n = read_images_schema(file.get(), info);
  if (labels_optional && !has_link(file.get(), "labels")) {
    if (n == 0) DT_INPUT_FAIL(path + ": dataset `images` has zero samples, expected N ≥ 1");
    info.num_samples = static_cast<std::int64_t>(n);
    info.num_classes =
        expected_classes > 0 ? expected_classes : num_classes_attribute(file.get(), path);
    info.has_labels = false;
    read_normalization(file.get(), info);
    return info;
  }
  const std::vector<std::int64_t> labels = read_labels(file.get(), path, n);
  info.num_samples = static_cast<std::int64_t>(n);
  resolve_classes(file.get(), labels, expected_classes, expected_from, info);
  read_normalization(file.get(), info);
  if (has_attribute(file.get(), "class_names")) {
    info.class_names = read_attr_strings(file.get(), "class_names", path);
    if (info.class_names.size() != static_cast<std::size_t>(info.num_classes))
      DT_INPUT_FAIL(path + ": attribute `class_names` has " +
                    std::to_string(info.class_names.size()) +
                    " names, expected num_classes = " + std::to_string(info.num_classes));
  }
  return info;
}

void check_class_names(const DatasetInfo& train, const DatasetInfo& test) {
  for (std::size_t k = 0; k < test.class_names.size() && k < train.class_names.size(); ++k)
    if (test.class_names[k] != train.class_names[k])
      DT_INPUT_FAIL(test.path + ": attribute `class_names` differs from the training file " +
                    train.path + "'s: label " + std::to_string(k) + " is '" + test.class_names[k] +
                    "' here, '" + train.class_names[k] +
                    "' there; expected the training file's classes in its order "
                    "(images_to_h5.py --like " +
                    train.path + " converts a test set so)");
}

namespace {
std::atomic<double> g_open_deadline{120.0};

// While open_dataset_info() reads a file's metadata, a damaged file can make libhdf5 loop forever
// (seen with 1.10 on a corrupt global heap) or crash (SIGSEGV in H5HG_read reading vlen strings).
// Both are bad input, not dtrain bugs: the guard below turns them into "dtrain: error: <file>: ...
// corrupt" and exit code 2 instead of a hang or a crash without a message.
char g_crash_msg[1200];
std::size_t g_crash_len = 0;
std::atomic<bool> g_guarding{false};
pthread_t g_guarded_thread;
struct sigaction g_prev_segv, g_prev_bus;

extern "C" void on_open_crash(int signo) {
  if (g_guarding.load() && pthread_equal(pthread_self(), g_guarded_thread)) {
    ssize_t rc = ::write(2, g_crash_msg, g_crash_len);
    (void)rc;
    ::_exit(kExitInput);
  }
  // Not ours: restore the previous action and return; the fault repeats and is handled there.
  sigaction(signo, signo == SIGSEGV ? &g_prev_segv : &g_prev_bus, nullptr);
}

/// Guards one open_dataset_info() call: a deadline, and SIGSEGV/SIGBUS on this thread.
class OpenDeadline {
 public:
  explicit OpenDeadline(const std::string& path) {
    const double secs = g_open_deadline.load();
    std::snprintf(
        g_crash_msg, sizeof g_crash_msg,
        "dtrain: error: %s: the HDF5 library crashed reading the file's metadata: the file "
        "is corrupt\n",
        path.c_str());
    g_crash_len = std::strlen(g_crash_msg);
    g_guarded_thread = pthread_self();
    struct sigaction sa {};
    sa.sa_handler = on_open_crash;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
    g_guarding = true;
    thread_ = std::thread([this, path, secs] {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(secs), [this] { return done_; })) return;
      std::fprintf(stderr,
                   "dtrain: error: %s: reading the file's metadata did not finish within %g s "
                   "(HDF5 is stuck on damaged metadata): the file is corrupt\n",
                   path.c_str(), secs);
      std::fflush(stderr);
      ::_exit(kExitInput);
    });
  }
  ~OpenDeadline() {
    g_guarding = false;
    sigaction(SIGSEGV, &g_prev_segv, nullptr);
    sigaction(SIGBUS, &g_prev_bus, nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  OpenDeadline(const OpenDeadline&) = delete;
  OpenDeadline& operator=(const OpenDeadline&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};
}  // namespace

void set_dataset_open_deadline(double seconds) { g_open_deadline = seconds; }

DatasetInfo open_dataset_info(const std::string& path, int expected_classes,
                              const std::string& expected_from, bool labels_optional) {
  const OpenDeadline deadline(path);
  // A file whose structure is damaged makes HDF5 calls fail (LibraryError) or declare absurd sizes
  // (bad_alloc): both are bad input, reported as such (exit code 2) with the file named.
  try {
    DatasetInfo info = read_dataset_info(path, expected_classes, expected_from, labels_optional);
    if (info.encoded) probe_encoded(info);  // a file of nothing but bad images fails here, at start
    else check_images_stored(info);
    return info;
  } catch (const LibraryError& e) {
    throw InputError(path + ": corrupt or unreadable HDF5 dataset file: " +
                     without_error_prefix(e.what()));  // log_error() tags the message once
  } catch (const std::bad_alloc&) {
    throw InputError(path + ": corrupt dataset file (declared sizes too large to read)");
  } catch (const std::length_error&) {
    throw InputError(path + ": corrupt dataset file (declared sizes too large to read)");
  }
}

void configure_decode(DatasetInfo& info, const DecodeOptions& opts) {
  if (!info.encoded) return;
  DT_REQUIRE(opts.crop >= 1, info.path +
                                 ": encoded images (JPEG/PNG bytes) need an output size: "
                                 "--random-resized-crop SIZE (training) or --center-crop SIZE");
  DT_REQUIRE(opts.random_resized || opts.resize >= opts.crop,
             "option --eval-resize " + std::to_string(opts.resize) +
                 ": smaller than the centre crop " + std::to_string(opts.crop) +
                 " (--center-crop), expected ≥");
  DT_REQUIRE(opts.threads >= 1,
             "option --data-threads: must be ≥ 1, got " + std::to_string(opts.threads));
  info.decode = opts;
  info.sample = Shape{1, info.sample.c, opts.crop, opts.crop};
}

std::int64_t shard_size(std::int64_t n, int worker, int workers) {
  check_workers(n, worker, workers);
  return n / workers + (worker < n % workers ? 1 : 0);
}

std::vector<std::int64_t> epoch_shard(std::int64_t n, std::uint64_t seed, int epoch, int worker,
                                      int workers, bool shuffle) {
  check_workers(n, worker, workers);
  DT_REQUIRE(epoch >= 0, "epoch must be ≥ 0, got " + std::to_string(epoch));
  const std::int64_t begin = shard_begin(n, worker, workers);
  const std::int64_t size = shard_size(n, worker, workers);
  std::vector<std::int64_t> out(static_cast<std::size_t>(size));
  if (!shuffle) {
    std::iota(out.begin(), out.end(), begin);
    return out;
  }
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  std::mt19937_64 rng(
      mix64(seed ^ mix64(static_cast<std::uint64_t>(epoch) + 0x5851F42D4C957F2DULL)));
  for (std::int64_t i = n - 1; i > 0; --i) {  // Fisher–Yates (Durstenfeld), from the top
    const auto j = static_cast<std::int64_t>(bounded(rng, static_cast<std::uint64_t>(i) + 1));
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(j)]);
  }
  std::copy_n(perm.begin() + begin, size, out.begin());
  return out;
}

std::int64_t check_dataset_fits(const DatasetInfo& info, int workers, int batch_size) {
  DT_REQUIRE(workers >= 1, "number of workers must be ≥ 1, got " + std::to_string(workers));
  DT_REQUIRE(batch_size >= 1, "batch size must be ≥ 1, got " + std::to_string(batch_size));
  const std::int64_t need = static_cast<std::int64_t>(workers) * batch_size;
  if (info.num_samples < need)
    DT_INPUT_FAIL(info.path + ": fewer samples (" + std::to_string(info.num_samples) +
                  ") than workers × batch size (" + std::to_string(workers) + " × " +
                  std::to_string(batch_size) + " = " + std::to_string(need) + ")");
  return (info.num_samples / workers) / batch_size;
}

DatasetInfo parse_synthetic(const std::string& spec) {
  const SyntheticSpec parsed = parse_synthetic_spec(spec);
  DatasetInfo info;
  info.sample = Shape{1, parsed.channels, parsed.height, parsed.width};
  info.num_classes = parsed.classes;
  info.path = "synthetic " + spec;
  return info;
}

DatasetInfo synthetic_dataset(const std::string& spec, std::int64_t num_samples) {
  DatasetInfo info = parse_synthetic(spec);
  DT_REQUIRE(num_samples >= 1,
             "option --synthetic-samples: must be >= 1, got " + std::to_string(num_samples));
  info.num_samples = num_samples;
  return info;
}

}  // namespace dtrain
