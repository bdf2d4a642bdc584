// dtrain/train/summary.cpp — TensorBoard event files (see summary.hpp): TFRecord framing with
// Boost.CRC's CRC-32C, Event/Summary messages from TensorFlow's protos (libprotobuf).
#include "dtrain/train/summary.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "dtrain/core/error.hpp"
#include "dtrain/train/report.hpp"
#include "tensorflow/core/util/event.pb.h"

namespace fs = std::filesystem;

namespace dtrain {
namespace {

/// One scalar per metrics.csv column: which rows carry it, its tag, its value. Add a column here.
struct Column {
  const char* kind;
  const char* tag;
  double (*value)(const MetricsRow&);
};
constexpr Column kColumns[] = {
    {"train", "train/loss", [](const MetricsRow& r) { return r.loss; }},
    {"train", "train/accuracy", [](const MetricsRow& r) { return r.accuracy; }},
    {"train", "train/top5", [](const MetricsRow& r) { return r.top5; }},
    {"train", "train/learning_rate", [](const MetricsRow& r) { return r.lr; }},
    {"train", "train/samples_per_sec", [](const MetricsRow& r) { return r.samples_per_sec; }},
    {"train", "train/staleness", [](const MetricsRow& r) { return r.staleness; }},
    {"train", "train/ms_per_step", [](const MetricsRow& r) { return r.ms_per_step; }},
    {"train", "train/exposed_comm_ms", [](const MetricsRow& r) { return r.exposed_comm_ms; }},
    {"train", "train/epoch", [](const MetricsRow& r) { return static_cast<double>(r.epoch); }},
    {"train", "train/wall_seconds", [](const MetricsRow& r) { return r.wall_seconds; }},
    {"test", "test/loss", [](const MetricsRow& r) { return r.loss; }},
    {"test", "test/accuracy", [](const MetricsRow& r) { return r.accuracy; }},
    {"test", "test/top5", [](const MetricsRow& r) { return r.top5; }},
};

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

std::uint32_t masked_crc32c(const void* bytes, std::size_t n) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;  // CRC-32C
  crc.process_bytes(bytes, n);
  const std::uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  const std::string base =
      (fs::path(dir) / ("events.out.tfevents." +
                        std::to_string(static_cast<long long>(unix_seconds())) + "." + host_name()))
          .string();
  int fd = -1;
  for (int k = 0; fd < 0; ++k) {
    path_ = k == 0 ? base : base + "." + std::to_string(k);
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || k >= 1000))
      throw LibraryError(format_error("cannot create TensorBoard event file '" + path_ +
                                          "': " + std::strerror(errno),
                                      __FILE__, __LINE__));
  }
  file_ = ::fdopen(fd, "wb");
  if (!file_) {
    ::close(fd);
    throw LibraryError(
        format_error("cannot open TensorBoard event file '" + path_ + "'", __FILE__, __LINE__));
  }
  tensorflow::Event e;
  e.set_wall_time(unix_seconds());
  e.set_file_version("brain.Event:2");
  write_record(e.SerializeAsString());
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::write_record(const std::string& data) {
  std::string rec;
  rec.reserve(data.size() + 16);
  const std::uint64_t len = data.size();
  for (int i = 0; i < 8; ++i) rec += static_cast<char>((len >> (8 * i)) & 0xff);
  put_u32(rec, masked_crc32c(rec.data(), 8));
  rec += data;
  put_u32(rec, masked_crc32c(data.data(), data.size()));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size() || std::fflush(file_) != 0)
    throw LibraryError(
        format_error("cannot write TensorBoard event file '" + path_ + "': " + std::strerror(errno),
                     __FILE__, __LINE__));
}

void EventWriter::write_scalars(std::int64_t step, const std::vector<Scalar>& scalars) {
  tensorflow::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(step);
  tensorflow::Summary* s = e.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorflow::Summary::Value* v = s->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(e.SerializeAsString());
}

void EventWriter::write_session_start(std::int64_t step) {
  tensorflow::Event e;
  e.set_wall_time(unix_seconds());
  e.set_step(step);
  e.mutable_session_log()->set_status(tensorflow::SessionLog::START);
  write_record(e.SerializeAsString());
}

std::vector<Scalar> summary_scalars(const MetricsRow& row) {
  std::vector<Scalar> out;
  for (const Column& c : kColumns)
    if (row.kind == c.kind) out.emplace_back(c.tag, c.value(row));
  return out;
}

SummaryWriter::SummaryWriter(const std::string& run_dir, const SummaryOptions& opts)
    : events_(run_dir), every_(opts.every),
      last_bucket_(opts.every > 0 ? opts.start_step / opts.every : 0) {
  events_.write_session_start(opts.start_step + 1);
}

void SummaryWriter::write(const MetricsRow& row) {
  if (row.kind == "train" && every_ > 0) {
    if (row.global_step / every_ <= last_bucket_) return;
    last_bucket_ = row.global_step / every_;
  }
  events_.write_scalars(row.global_step, summary_scalars(row));
}

}  // namespace dtrain
