// dtrain/train/report.hpp — the chief's outputs in the run dir: metrics.csv (appended, one row per
// log interval and per evaluation), the same rows as TensorBoard scalars (train/summary.hpp), and
// results.json (written atomically at the end).
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dtrain/train/summary.hpp"

namespace dtrain {

/// One metrics.csv row. kind = "train" (log interval) or "test" (evaluation after an epoch or
/// every --eval-every steps).
struct MetricsRow {
  std::string kind;
  std::int64_t global_step = 0;
  int epoch = 0;            ///< 1-based epoch the row falls in
  double wall_seconds = 0;  ///< wall time of training so far, seconds, before a resume too
  /// Mean softmax cross-entropy per sample (nats; the --label-smoothing target): train rows over
  /// the chief's own samples of the interval, test rows over the evaluated test samples
  double loss = 0;
  /// Fraction of those samples whose argmax logit is the label, in [0, 1]
  double accuracy = 0;
  double samples_per_sec = 0;  ///< all workers together; 0 for test rows
  double lr = 0;               ///< learning_rate() of the last global step applied; 0 in test rows
  double staleness = 0;        ///< mean staleness of this worker's pushes (async), else 0
  double ms_per_step = 0;      ///< the chief's mean step time over the interval (train rows)
  double exposed_comm_ms = 0;  ///< the chief's mean exposed communication per step, ms: time
                               ///< waiting on the exchange after backward (train rows)
  /// Fraction of the samples whose label is among the 5 largest logits (ties: the lower class
  /// first), in [0, 1]; 1 when the model has ≤ 5 classes
  double top5 = 0;
};

/// The first `test` row of <run_dir>/metrics.csv with accuracy ≥ target and global_step ≤
/// max_step (a resumed run's evaluations before its checkpoint), or none (also without the file).
std::optional<MetricsRow> first_test_reaching(const std::string& run_dir, double target,
                                              std::int64_t max_step);

/// The last `kind` row ("train" or "test") of <run_dir>/metrics.csv with global_step ≤ max_step
/// (its kind, global_step, epoch, wall_seconds, loss, accuracy and top5), or none (also without the
/// file): what a resumed run recorded before its checkpoint.
std::optional<MetricsRow> last_row(const std::string& run_dir, const std::string& kind,
                                   std::int64_t max_step);

/// --resume from global_step `step`: the rows of <run_dir>/metrics.csv past it — logged by a run
/// killed after its last checkpoint, which the resumed run logs again — move to
/// <run_dir>/metrics-past-<step>.csv (with the header; -2, -3, ... when taken), so that
/// metrics.csv is one run's rows in order, as TensorBoard drops them. The set-aside file is
/// written before metrics.csv is replaced (both atomically): nothing is lost. Returns the
/// set-aside file's path and the rows moved ("" and 0: none, nothing written); a last row cut
/// short (no newline: the killed run was writing it) goes aside too. Throws
/// LibraryError naming the file on a failed write.
std::pair<std::string, int> set_aside_metrics_past(const std::string& run_dir, std::int64_t step);

/// The global_step that <run_dir>/results.json reports (the end of the run that wrote it), or none
/// when the file is absent, does not parse as JSON or has no integer global_step.
std::optional<std::int64_t> results_global_step(const std::string& run_dir);

/// Every metrics row goes through here: into metrics.csv and, when enabled, a TensorBoard event
/// file (SummaryWriter decides which rows, see SummaryOptions).
class MetricsWriter {
 public:
  /// Opens <run_dir>/metrics.csv for appending (writes the header when the file is new) and, when
  /// summaries.enabled, creates a new event file in run_dir. Throws Error naming the file.
  explicit MetricsWriter(const std::string& run_dir, const SummaryOptions& summaries = {});
  ~MetricsWriter();
  /// Appends one row to metrics.csv (flushed) and writes its summary. Throws LibraryError naming
  /// metrics.csv, or the event file, and the system's reason when the append or the summary cannot
  /// be written (a full disk).
  void write(const MetricsRow& r);

 private:
  std::string path_;  ///< <run_dir>/metrics.csv
  std::ofstream out_;
  std::unique_ptr<SummaryWriter> summary_;
};

/// One value of a results.json entry: a number, a string, null (std::monostate), or an array of
/// strings, integers or numbers.
using JsonValue =
    std::variant<double, std::int64_t, std::string, std::monostate, std::vector<std::string>,
                 std::vector<std::int64_t>, std::vector<double>>;
/// Writes `kv` as one JSON object, keys in order, to <run_dir>/results.json via
/// <run_dir>/results.json.tmp and a rename (core/files.hpp write_file_atomically). Throws
/// LibraryError naming the file when the write or the rename fails; results.json is then left
/// as it was.
void write_results_json(const std::string& run_dir, const std::map<std::string, JsonValue>& kv);

}  // namespace dtrain
