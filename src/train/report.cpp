// dtrain/train/report.cpp — metrics.csv and results.json.
#include "dtrain/train/report.hpp"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "dtrain/core/error.hpp"
#include "dtrain/core/files.hpp"

namespace fs = std::filesystem;

namespace dtrain {

namespace {

constexpr const char* kMetricsHeader =
    "kind,global_step,epoch,wall_seconds,loss,accuracy,samples_per_sec,lr,staleness,"
    "ms_per_step,exposed_comm_ms,top5";

/// A metrics.csv of an older dtrain (fewer columns: exposed_comm_ms and top5 came later) gets
/// this header, so that the rows a resumed run appends match it; the older rows keep their
/// fields and read as missing the later columns.
void update_header(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return;  // a device or pipe: never read to its end
  std::ifstream in(p);
  std::string header(256, '\0');  // ours is 113 characters: a longer first line is not ours
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  header.resize(static_cast<std::size_t>(in.gcount()));
  const std::size_t eol = header.find('\n');
  if (eol == std::string::npos) return;
  header.resize(eol);
  if (header == kMetricsHeader || std::string(kMetricsHeader).rfind(header, 0) != 0)
    return;  // current, or not a prefix of ours (not our file: leave it as it is)
  in.clear();
  in.seekg(static_cast<std::streamoff>(eol + 1));
  std::stringstream rest;
  rest << in.rdbuf();
  write_file_atomically(p.string(), std::string(kMetricsHeader) + '\n' + rest.str());
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& run_dir, const SummaryOptions& summaries) {
  const fs::path p = fs::path(run_dir) / "metrics.csv";
  path_ = p.string();
  const bool fresh = !fs::exists(p);
  if (!fresh) update_header(p);
  out_.open(p, std::ios::app);
  if (!out_) throw Error("cannot open '" + p.string() + "' for appending");
  if (fresh) out_ << kMetricsHeader << '\n';
  out_.flush();
  if (summaries.enabled) summary_ = std::make_unique<SummaryWriter>(run_dir, summaries);
}

MetricsWriter::~MetricsWriter() = default;

void MetricsWriter::write(const MetricsRow& r) {
  errno = 0;  // a failed write below leaves its reason
  out_ << r.kind << ',' << r.global_step << ',' << r.epoch << ',' << std::fixed
       << std::setprecision(3) << r.wall_seconds << ',' << std::setprecision(6) << r.loss << ','
       << r.accuracy << ',' << std::setprecision(1) << r.samples_per_sec << ','
       << std::setprecision(6) << r.lr << ',' << std::setprecision(3) << r.staleness << ','
       << r.ms_per_step << ',' << r.exposed_comm_ms << ',' << std::setprecision(6) << r.top5
       << '\n';
  out_.flush();
  if (!out_)
    throw LibraryError(
        format_error("cannot append to '" + path_ + "'" + errno_reason(), __FILE__, __LINE__));
  if (summary_) summary_->write(r);
}

namespace {
/// Calls f(row) for each `kind` row of <run_dir>/metrics.csv with global_step ≤ max_step (its
/// first six columns) until f returns true.
template <class F>
void for_rows(const std::string& run_dir, const std::string& kind, std::int64_t max_step, F f) {
  std::ifstream in(fs::path(run_dir) / "metrics.csv");
  std::string line;
  const std::string lead = kind + ",";
  while (std::getline(in, line)) {
    if (line.rfind(lead, 0) != 0) continue;
    MetricsRow r;
    char comma = 0;
    std::istringstream is(line.substr(lead.size()));
    is >> r.global_step >> comma >> r.epoch >> comma >> r.wall_seconds >> comma >> r.loss >>
        comma >> r.accuracy;
    MetricsRow rest;  // the later columns, where the row has them
    if (is >> comma >> rest.samples_per_sec >> comma >> rest.lr >> comma >> rest.staleness >>
        comma >> rest.ms_per_step >> comma >> rest.exposed_comm_ms >> comma >> rest.top5)
      r.top5 = rest.top5;
    else is.clear();
    r.kind = kind;
    if (is && r.global_step <= max_step && f(r)) return;
  }
}
}  // namespace

std::optional<MetricsRow> first_test_reaching(const std::string& run_dir, double target,
                                              std::int64_t max_step) {
  std::optional<MetricsRow> found;
  for_rows(run_dir, "test", max_step, [&](const MetricsRow& r) {
    if (r.accuracy >= target) found = r;
    return found.has_value();
  });
  return found;
}

std::optional<MetricsRow> last_row(const std::string& run_dir, const std::string& kind,
                                   std::int64_t max_step) {
  std::optional<MetricsRow> last;
  for_rows(run_dir, kind, max_step, [&](const MetricsRow& r) {
    last = r;
    return false;
  });
  return last;
}

std::pair<std::string, int> set_aside_metrics_past(const std::string& run_dir, std::int64_t step) {
  const fs::path csv = fs::path(run_dir) / "metrics.csv";
  std::ifstream in(csv);
  std::string header, line, kept, past;
  if (!std::getline(in, header)) return {"", 0};
  int moved = 0;
  while (std::getline(in, line)) {
    // A last line without its newline is a row the killed run was writing, cut short: its step
    // (a prefix of the real one) says nothing. It goes aside whole.
    const bool torn = in.eof();
    const std::size_t comma = line.find(',');
    std::int64_t at = 0;
    std::istringstream field(comma == std::string::npos ? "" : line.substr(comma + 1));
    const bool later = torn || (static_cast<bool>(field >> at) && at > step);
    (later ? past : kept) += line + '\n';
    moved += later ? 1 : 0;
  }
  if (moved == 0) return {"", 0};
  const std::string aside =
      first_free_path(run_dir, "metrics-past-" + std::to_string(step), ".csv");
  write_file_atomically(aside, header + '\n' + past);
  write_file_atomically(csv.string(), header + '\n' + kept);
  return {aside, moved};
}

std::optional<std::int64_t> results_global_step(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "results.json");
  if (!in) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("global_step") || !j["global_step"].is_number_integer())
    return std::nullopt;
  return j["global_step"].get<std::int64_t>();
}

void write_results_json(const std::string& run_dir, const std::map<std::string, JsonValue>& kv) {
  nlohmann::json j = nlohmann::json::object();  // keys sorted, as kv's
  for (const auto& [k, v] : kv)
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) j[k] = nullptr;
          else j[k] = x;
        },
        v);
  // A path of the job in another encoding than UTF-8 (Linux paths are bytes) reads as U+FFFD
  // rather than making the file unreadable JSON; a non-finite number as null.
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + '\n';
  const fs::path final_path = fs::path(run_dir) / "results.json";
  write_file_atomically(final_path.string(), text);
}

}  // namespace dtrain
