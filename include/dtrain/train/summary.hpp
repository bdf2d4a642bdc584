// dtrain/train/summary.hpp — TensorBoard event files: the chief's scalar summaries, as
// TensorFlow's FileWriter / tf.summary write them (MonitoredTrainingSession's summary hook).
//
// Format. An event file `events.out.tfevents.<unix seconds>.<host>` is a TFRecord file: each
// record is
//     uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
// (little-endian), where data is a serialized `tensorflow.Event` (vendored event.proto and
// summary.proto in third_party/tensorflow, compiled with protoc; no hand-written encoding) and
// masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 over CRC-32C (Castagnoli; Boost.CRC). The
// first record is an Event with file_version "brain.Event:2". Scalars are Summary.Value
// simple_value (float32), the "legacy" scalar summary TensorBoard's scalar dashboard reads.
//
// Resume. A resumed run never reopens an old file: it starts a new one (a new name) whose first
// event after the version is SessionLog START at the resumed global_step + 1. TensorBoard reads
// every file of the run dir in name order as one run (steps continue from the checkpoint, so the
// curve is continuous) and, on START at step s, drops the events of earlier files at steps ≥ s —
// those a killed run logged after its last checkpoint, which the resumed run trains again.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain {

struct MetricsRow;  // dtrain/train/report.hpp

/// CRC-32C of bytes[0, n), masked as TFRecord framing does (see above). Pure function.
std::uint32_t masked_crc32c(const void* bytes, std::size_t n);

/// One tag and its value, e.g. {"train/loss", 0.41}.
using Scalar = std::pair<std::string, double>;

/// Appends TensorFlow Event records to one new event file. Not thread-safe (one writer thread).
class EventWriter {
 public:
  /// Creates `<dir>/events.out.tfevents.<unix seconds>.<host>` (gethostname()); when that name
  /// exists (two writers in the same second), `.1`, `.2`, ... is appended: an existing file is
  /// never opened or overwritten (O_EXCL). Writes the file_version event and flushes.
  /// Throws LibraryError (exit code 3, as every output's write) naming the file and the system's
  /// reason when it cannot be created or written (a full disk, a missing directory).
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  /// The file's path.
  [[nodiscard]] const std::string& path() const { return path_; }

  /// One Event at global step `step` whose Summary holds every scalar (tag, value rounded to
  /// float32 — simple_value's type) at wall_time = now (seconds since the Unix epoch). Written and
  /// flushed to the OS before returning, so a killed run keeps every event written so far.
  /// Throws LibraryError naming the file and the reason on a write failure.
  void write_scalars(std::int64_t step, const std::vector<Scalar>& scalars);

  /// An Event with SessionLog START at `step` (see "Resume" above). Flushed. Throws like
  /// write_scalars().
  void write_session_start(std::int64_t step);

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::FILE* file_ = nullptr;
};

/// The scalars of one metrics.csv row, tagged "<kind>/<column>": train rows give train/loss,
/// train/accuracy, train/learning_rate, train/samples_per_sec, train/staleness, train/epoch and
/// train/wall_seconds; test rows test/loss, test/accuracy (their other columns are placeholders).
/// One table in summary.cpp lists them: a new MetricsRow column becomes a scalar with one line.
std::vector<Scalar> summary_scalars(const MetricsRow& row);

/// When the chief writes summaries (Config::summaries, summary_every; see MetricsWriter).
struct SummaryOptions {
  bool enabled = false;
  /// 0: every train row of metrics.csv (each log interval); N > 0: a train row when its
  /// global_step crossed a multiple of N since the last one written (TF's save_summaries_steps,
  /// at log-interval granularity). Test rows (evaluations) are always written.
  std::int64_t every = 0;
  std::int64_t start_step = 0;  ///< global_step the run starts (or resumes) from
};

/// Decides which rows become summaries and writes them (owned by MetricsWriter).
class SummaryWriter {
 public:
  /// Opens a new event file in run_dir (EventWriter) and writes SessionLog START at
  /// opts.start_step + 1. Throws LibraryError naming the file (EventWriter).
  SummaryWriter(const std::string& run_dir, const SummaryOptions& opts);
  /// Writes `row` when the SummaryOptions rule above selects it. Throws LibraryError on a write
  /// failure (EventWriter).
  void write(const MetricsRow& row);
  [[nodiscard]] const std::string& path() const { return events_.path(); }

 private:
  EventWriter events_;
  std::int64_t every_;
  std::int64_t last_bucket_;  ///< global_step / every of the last train row written
};

}  // namespace dtrain
