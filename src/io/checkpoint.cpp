// dtrain/io/checkpoint.cpp — HDF5 checkpoints: temporary file + fsync + rename (the protocol of
// llm.c / TF's checkpoint manager), Fletcher32 checksums, keep-last-N pruning.
#include "dtrain/io/checkpoint.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>

#include <boost/crc.hpp>

#include "dtrain/core/error.hpp"
#include "dtrain/core/fault.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/io/hdf5.hpp"

namespace fs = std::filesystem;

namespace dtrain {

std::int64_t step_of_checkpoint_name(std::string_view name) {
  constexpr std::string_view prefix = "ckpt-", suffix = ".h5";
  constexpr std::size_t digits = 10;
  if (name.size() != prefix.size() + digits + suffix.size() || !name.starts_with(prefix) ||
      !name.ends_with(suffix))
    return -1;
  std::int64_t step = 0;
  for (char c : name.substr(prefix.size(), digits)) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

namespace {

void write_floats(hid_t loc, const std::string& name, const std::vector<float>& v,
                  std::vector<hsize_t> dims) {
  write_dataset_floats(loc, name, dims, v.data());
}

/// Creates `name` in `group`: a virtual float32 dataset of shape `vdims` over the hyperslab
/// [start, start + count) of the file's dataset `source` (of shape `sdims`). The two selections
/// hold as many elements in the same row-major order, so the view reads the source's bytes as a
/// tensor of its own shape.
void write_view(hid_t group, const std::string& name, const std::vector<hsize_t>& vdims,
                const std::string& source, const std::vector<hsize_t>& sdims,
                const std::vector<hsize_t>& start, const std::vector<hsize_t>& count) {
  const std::string what = "named tensor '" + name + "'";
  H5Dataspace vspace(
      DT_CHECK_HDF5(H5Screate_simple(static_cast<int>(vdims.size()), vdims.data(), nullptr), what));
  H5Dataspace sspace(
      DT_CHECK_HDF5(H5Screate_simple(static_cast<int>(sdims.size()), sdims.data(), nullptr), what));
  DT_CHECK_HDF5(H5Sselect_hyperslab(sspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                    count.data(), nullptr),
                what);
  H5PropList dcpl(DT_CHECK_HDF5(H5Pcreate(H5P_DATASET_CREATE), what));
  DT_CHECK_HDF5(H5Pset_virtual(dcpl.get(), vspace.get(), ".", source.c_str(), sspace.get()), what);
  H5Dataset d(DT_CHECK_HDF5(H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, vspace.get(),
                                       H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                            what));
}

/// Checks that `tensors` cover [0, total) in order (offsets ascending, no gap, dims matching);
/// InputError naming `what` otherwise.
void check_cover(const std::vector<CheckpointTensor>& tensors, std::size_t total,
                 const std::string& what) {
  std::size_t at = 0;
  for (const CheckpointTensor& t : tensors) {
    std::int64_t n = 1;
    for (std::int64_t d : t.dims) n *= d;
    DT_REQUIRE(t.offset == at && static_cast<std::size_t>(n) == t.count && t.count > 0,
               what + ": tensor '" + t.name + "' does not continue the buffer at float " +
                   std::to_string(at) + " with its shape's count");
    at += t.count;
  }
  DT_REQUIRE(at == total, what + ": the named tensors cover " + std::to_string(at) + " of " +
                              std::to_string(total) + " floats");
}

/// Format 2's named tensors: /tensors/<name> over /params, /buffers/<name> over /model_state
/// (rows × S), and the root attributes param_names, buffer_names.
void write_named_tensors(hid_t root, const CheckpointState& s, hsize_t rows) {
  const hsize_t P = s.params.size(), S = s.model_state.size() / rows;
  std::vector<std::string> names;
  H5Group tg = create_group(root, "tensors");
  for (const CheckpointTensor& t : s.param_tensors) {
    write_view(tg.get(), t.name, {t.dims.begin(), t.dims.end()}, "/params", {P}, {t.offset},
               {t.count});
    names.push_back(t.name);
  }
  write_attr_strings(root, "param_names", names);
  names.clear();
  H5Group bg = create_group(root, "buffers");
  for (const CheckpointTensor& t : s.buffer_tensors) {
    write_view(bg.get(), t.name, {rows, t.count}, "/model_state", {rows, S}, {0, t.offset},
               {rows, t.count});
    names.push_back(t.name);
  }
  write_attr_strings(root, "buffer_names", names);
}

/// Reads format 2's name lists and the named datasets' shapes (the buffers' without the row
/// dimension) into s.param_tensors / s.buffer_tensors, checking they cover the flat buffers.
void read_named_tensors(hid_t root, CheckpointState& s, const std::string& where) {
  const auto read = [&](const char* list, const char* group, bool rows) {
    std::vector<CheckpointTensor> out;
    std::size_t at = 0;
    for (const std::string& name : read_attr_strings(root, list, where)) {
      H5Dataset d = open_dataset(root, std::string(group) + "/" + name, where);
      std::vector<hsize_t> dims = dataset_dims(d.get());
      if (rows) {
        DT_REQUIRE(!dims.empty() && dims[0] == static_cast<hsize_t>(s.state_rows),
                   where + ": buffer '" + name + "' has " +
                       (dims.empty() ? std::string("no rows") : std::to_string(dims[0]) + " rows") +
                       ", /model_state " + std::to_string(s.state_rows));
        dims.erase(dims.begin());
      }
      CheckpointTensor t{name, {dims.begin(), dims.end()}, at, 1};
      for (hsize_t x : dims) t.count *= x;
      at += t.count;
      out.push_back(std::move(t));
    }
    return out;
  };
  s.param_tensors = read("param_names", "tensors", false);
  s.buffer_tensors = read("buffer_names", "buffers", true);
  check_cover(s.param_tensors, s.params.size(), where + " /tensors");
  if (!s.buffer_tensors.empty())
    check_cover(s.buffer_tensors, s.model_state.size() / s.state_rows, where + " /buffers");
}

/// CRC-32 (Boost.CRC, the zlib polynomial) of everything Fletcher32 does not cover: the root
/// attributes and the shapes of the datasets (the named tensors' too), as write_checkpoint_file()
/// writes them (`rows`: /model_state's row count; the buffers' names are stored only with the
/// parameters'). Stored as the attribute metadata_crc32; a file without it (written before it was
/// recorded) is read unchecked.
std::uint32_t metadata_crc32(const CheckpointState& s, int rows) {
  std::ostringstream t;
  std::uint64_t wall = 0;
  static_assert(sizeof wall == sizeof s.wall_seconds);
  std::memcpy(&wall, &s.wall_seconds, sizeof wall);
  t << s.format_version << ' ' << s.global_step << ' ' << s.epoch << ' ' << s.step_in_epoch << ' '
    << static_cast<std::int64_t>(s.seed) << ' ' << s.num_workers << ' ' << s.batch_size << ' '
    << s.steps_per_epoch << ' ' << wall << '\n'
    << s.mode << '\n'
    << s.model_signature << '\n'
    << s.config << '\n'
    << s.params.size() << ' ' << s.m.size() << ' ' << s.v.size() << ' ' << rows << ' '
    << s.model_state.size() << ' ' << s.worker_steps_in_epoch.size() << '\n';
  const auto names = [&t](const std::vector<CheckpointTensor>& list) {
    for (const CheckpointTensor& x : list) {
      t << x.name;
      for (std::int64_t d : x.dims) t << ' ' << d;
      t << '\n';
    }
    t << '\n';
  };
  names(s.param_tensors);
  if (!s.param_tensors.empty()) names(s.buffer_tensors);
  else t << '\n';
  const std::string text = t.str();
  boost::crc_32_type crc;
  crc.process_bytes(text.data(), text.size());
  return crc.checksum();
}

/// The attributes and datasets of a checkpoint agree with each other (the checksums cover the
/// datasets' bytes, not whether a file was assembled right): the position is one a run reaches,
/// and the optimizer state has one value per parameter. Throws InputError naming `where`.
void check_consistent(const CheckpointState& s, const std::string& where) {
  const auto n = [](auto v) { return std::to_string(v); };
  DT_REQUIRE(s.global_step >= 0 && s.epoch >= 0 && s.step_in_epoch >= 0 && s.num_workers >= 1 &&
                 s.batch_size >= 0 && s.steps_per_epoch >= 0 &&
                 (s.steps_per_epoch == 0 || s.step_in_epoch <= s.steps_per_epoch),
             where + ": an impossible position (global_step " + n(s.global_step) + ", epoch " +
                 n(s.epoch) + ", step_in_epoch " + n(s.step_in_epoch) + " of " +
                 n(s.steps_per_epoch) + ", num_workers " + n(s.num_workers) + ", batch_size " +
                 n(s.batch_size) + "): the file was not written by dtrain as it stands");
  const auto& steps = s.worker_steps_in_epoch;
  DT_REQUIRE(steps.empty() || (steps.size() == static_cast<std::size_t>(s.num_workers) &&
                               std::all_of(steps.begin(), steps.end(),
                                           [&](std::int64_t k) {
                                             return k >= 0 && (s.steps_per_epoch == 0 ||
                                                               k <= s.steps_per_epoch);
                                           })),
             where + ": /worker_steps_in_epoch holds " + n(steps.size()) + " positions for " +
                 n(s.num_workers) +
                 " workers, or one outside the epoch: the file was not written by dtrain as it "
                 "stands");
  const std::size_t P = s.params.size();
  for (auto [name, v] : {std::pair{"optimizer/m", &s.m}, std::pair{"optimizer/v", &s.v}})
    DT_REQUIRE(v->empty() || v->size() == P, where + ": /" + name + " holds " + n(v->size()) +
                                                 " values for " + n(P) +
                                                 " parameters (one each, or none)");
}

/// Writes the whole checkpoint `s` into the new HDF5 file `tmp` (created, truncating a stale one),
/// every dataset with a Fletcher32 checksum, and flushes it. Throws LibraryError on a failed write.
void write_checkpoint_file(const std::string& tmp, const CheckpointState& s) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  H5File f = create_file(tmp);
  const hid_t root = f.get();
  const hsize_t P = s.params.size();
  write_floats(root, "params", s.params, {P});
  if (fault_fires(FaultKind::kill_in_checkpoint_write, s.global_step)) {
    // Test-only (DTRAIN_FAULT): crash with part of the temporary file on disk.
    flush_file(root, tmp);
    ::kill(::getpid(), SIGKILL);
  }
  H5Group opt = create_group(root, "optimizer");
  write_floats(opt.get(), "m", s.m, {static_cast<hsize_t>(s.m.size())});
  write_floats(opt.get(), "v", s.v, {static_cast<hsize_t>(s.v.size())});
  const hsize_t rows = static_cast<hsize_t>(std::max(s.state_rows, 1));
  write_floats(root, "model_state", s.model_state,
               {rows, static_cast<hsize_t>(s.model_state.size() / rows)});
  if (!s.param_tensors.empty()) {
    check_cover(s.param_tensors, s.params.size(), tmp + " parameters");
    if (!s.buffer_tensors.empty())
      check_cover(s.buffer_tensors, s.model_state.size() / rows, tmp + " batchnorm buffers");
    write_named_tensors(root, s, rows);
  }
  if (!s.worker_steps_in_epoch.empty())
    write_dataset_int64s(root, "worker_steps_in_epoch",
                         {static_cast<hsize_t>(s.worker_steps_in_epoch.size())},
                         s.worker_steps_in_epoch.data());
  write_attr_int(root, "format_version", s.format_version);
  write_attr_int(root, "global_step", s.global_step);
  write_attr_int(root, "epoch", s.epoch);
  write_attr_int(root, "step_in_epoch", s.step_in_epoch);
  write_attr_int(root, "seed", static_cast<std::int64_t>(s.seed));
  write_attr_int(root, "num_workers", s.num_workers);
  write_attr_int(root, "batch_size", s.batch_size);
  write_attr_int(root, "steps_per_epoch", s.steps_per_epoch);
  write_attr_string(root, "mode", s.mode);
  write_attr_string(root, "model_signature", s.model_signature);
  write_attr_string(root, "config", s.config);
  write_attr_double(root, "wall_seconds", s.wall_seconds);
  write_attr_int(root, "metadata_crc32", metadata_crc32(s, static_cast<int>(rows)));
  flush_file(root, tmp);
}

}  // namespace

std::vector<float> mean_of_rows(const float* rows, int row_count, std::size_t S) {
  std::vector<double> sum(S, 0.0);
  for (int r = 0; r < row_count; ++r)
    for (std::size_t i = 0; i < S; ++i) sum[i] += rows[static_cast<std::size_t>(r) * S + i];
  std::vector<float> mean(S);
  for (std::size_t i = 0; i < S; ++i) mean[i] = static_cast<float>(sum[i] / row_count);
  return mean;
}

std::string checkpoint_path(const std::string& run_dir, std::int64_t global_step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%010lld.h5", static_cast<long long>(global_step));
  return (fs::path(run_dir) / name).string();
}

void write_checkpoint(const std::string& run_dir, const CheckpointState& s, int keep) {
  const std::string final_path = checkpoint_path(run_dir, s.global_step);
  const std::string tmp = final_path + ".tmp";
  try {
    write_checkpoint_file(tmp, s);
    fsync_path(tmp);
    replace_file(tmp, final_path);
  } catch (...) {
    // A write that failed (disk full, quota, I/O error) leaves no partial file taking space.
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  fsync_path(run_dir);

  // Keep the newest `keep` up to this one. A file of a later step is none of this run's (one that
  // --resume skipped as corrupt, when it could not be set aside): neither counted nor removed.
  std::size_t kept = 0;
  for (const std::string& path : list_checkpoints(run_dir)) {
    if (step_of_checkpoint_name(fs::path(path).filename().string()) > s.global_step) continue;
    if (++kept <= static_cast<std::size_t>(keep)) continue;
    std::error_code ec;
    fs::remove(path, ec);
  }
}

CheckpointState read_checkpoint(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(hdf5_mutex());
  const std::string where = "checkpoint '" + path + "'";
  try {
    H5File f = open_file_read(path);
    const hid_t root = f.get();
    DT_REQUIRE(has_attribute(root, "format_version"),
               where + ": not a dtrain checkpoint (no format_version attribute)");
    CheckpointState s;
    s.format_version = static_cast<int>(read_attr_int(root, "format_version", where));
    DT_REQUIRE(s.format_version <= kCheckpointFormatVersion,
               where + ": format version " + std::to_string(s.format_version) +
                   " is newer than this dtrain understands (" +
                   std::to_string(kCheckpointFormatVersion) + "); use a newer dtrain");
    s.global_step = read_attr_int(root, "global_step", where);
    s.epoch = read_attr_int(root, "epoch", where);
    s.step_in_epoch = read_attr_int(root, "step_in_epoch", where);
    s.seed = static_cast<std::uint64_t>(read_attr_int(root, "seed", where));
    s.num_workers = static_cast<int>(read_attr_int(root, "num_workers", where));
    for (auto [name, v] :
         {std::pair{"batch_size", &s.batch_size}, std::pair{"steps_per_epoch", &s.steps_per_epoch}})
      if (has_attribute(root, name)) *v = read_attr_int(root, name, where);
    s.mode = read_attr_string(root, "mode", where);
    s.model_signature = read_attr_string(root, "model_signature", where);
    s.config = read_attr_string(root, "config", where);
    s.wall_seconds = read_attr_double(root, "wall_seconds", where);
    s.params = read_dataset_floats(root, "params", where);
    s.m = read_dataset_floats(root, "optimizer/m", where);
    s.v = read_dataset_floats(root, "optimizer/v", where);
    std::vector<hsize_t> dims;
    s.model_state = read_dataset_floats(root, "model_state", where, &dims);
    s.state_rows = dims.empty() ? 1 : static_cast<int>(dims[0]);
    // Every writer stores at least one row (write_checkpoint): none would average to NaN.
    DT_REQUIRE(s.state_rows >= 1, where + ": model_state has no rows (dims " +
                                      std::to_string(dims.empty() ? 0 : dims[0]) + " × …)");
    if (has_link(root, "worker_steps_in_epoch"))
      s.worker_steps_in_epoch = read_dataset_int64s(root, "worker_steps_in_epoch", where);
    if (s.format_version >= 2 && has_attribute(root, "param_names"))
      read_named_tensors(root, s, where);
    check_consistent(s, where);  // names the part that disagrees, where one does
    if (has_attribute(root, "metadata_crc32")) {
      const auto stored = static_cast<std::uint32_t>(read_attr_int(root, "metadata_crc32", where));
      const std::uint32_t computed = metadata_crc32(s, s.state_rows);
      DT_REQUIRE(stored == computed,
                 where + ": its attributes or dataset shapes do not match their CRC-32 (stored " +
                     std::to_string(stored) + ", computed " + std::to_string(computed) +
                     "): the file's metadata is corrupt");
    }
    return s;
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(where + " is corrupt or truncated: " + without_error_prefix(e.what()));
  } catch (const std::exception& e) {  // e.g. std::bad_alloc from a shape no writer made
    throw InputError(where + " is corrupt: " + e.what());
  }
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::int64_t step = step_of_checkpoint_name(e.path().filename().string());
    if (step >= 0 && e.is_regular_file()) found.emplace_back(step, e.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::vector<std::string> partial_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".tmp") && step_of_checkpoint_name(name.substr(0, name.size() - 4)) >= 0 &&
        e.is_regular_file())
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<CheckpointState> load_latest_checkpoint(const std::string& run_dir) {
  for (const auto& path : list_checkpoints(run_dir)) {
    try {
      CheckpointState s = read_checkpoint(path);
      const std::int64_t named = step_of_checkpoint_name(fs::path(path).filename().string());
      DT_REQUIRE(s.global_step == named, "checkpoint '" + path + "' holds global_step " +
                                             std::to_string(s.global_step) +
                                             ", not the step its name says");
      return s;
    } catch (const InputError& e) {
      log_warn("CORRUPT CHECKPOINT SKIPPED: " + without_error_prefix(e.what()) +
               " — falling back to the previous checkpoint");
    }
  }
  return std::nullopt;
}

void check_checkpoint_compatible(const CheckpointState& s, const std::string& path,
                                 const std::string& model_signature, const std::string& mode,
                                 std::size_t param_count, const std::string& optimizer) {
  const std::string where = "checkpoint '" + path + "'";
  if (s.model_signature != model_signature) {
    std::istringstream a(s.model_signature), b(model_signature);
    std::string la, lb;
    int line = 0;
    while (true) {
      const bool ga = static_cast<bool>(std::getline(a, la));
      const bool gb = static_cast<bool>(std::getline(b, lb));
      if (!ga || !gb || la != lb) {
        throw InputError(where + " was written by another model: at line " + std::to_string(line) +
                         " it has '" + (ga ? la : "<end>") + "' where this job's model has '" +
                         (gb ? lb : "<end>") + "'");
      }
      ++line;
    }
  }
  DT_REQUIRE(s.mode == mode, where + " was written in --mode " + s.mode +
                                 ", this run uses --mode " + mode +
                                 " (start a new --run-dir or use the same mode)");
  DT_REQUIRE(s.params.size() == param_count, where + ": holds " + std::to_string(s.params.size()) +
                                                 " parameters, the model has " +
                                                 std::to_string(param_count));
  DT_REQUIRE(s.m.empty() || s.m.size() == param_count, where + ": optimizer state size mismatch");
  if (!optimizer.empty()) {
    const std::optional<std::string> written = config_value(s, "optimizer");
    DT_REQUIRE(!written || *written == optimizer,
               where + " was written with --optimizer " + written.value_or("") +
                   ", this run uses --optimizer " + optimizer +
                   " (its optimizer state does not carry over: resume with --optimizer " +
                   written.value_or("") + ", or start a new --run-dir)");
  }
}

std::optional<std::string> config_value(const CheckpointState& s, const std::string& key) {
  std::istringstream ini(s.config);
  const std::string prefix = key + " = ";
  for (std::string line; std::getline(ini, line);)
    if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  return std::nullopt;
}

std::vector<std::string> run_outputs(const std::string& run_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "results.json" || name == "metrics.csv" || name == "config.ini" ||
        name == "timeline.json" || name.rfind("events.out.tfevents.", 0) == 0)
      found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

namespace {
void require_writable(const std::string& run_dir) {
  DT_REQUIRE(::access(run_dir.c_str(), W_OK | X_OK) == 0,
             "option --run-dir: '" + run_dir + "' is not writable");
}
}  // namespace

bool check_existing_run_dir(const std::string& run_dir) {
  std::error_code ec;
  if (!fs::exists(run_dir, ec)) return false;
  DT_REQUIRE(fs::is_directory(run_dir, ec),
             "option --run-dir: '" + run_dir + "' exists and is not a directory");
  require_writable(run_dir);
  return true;
}

void prepare_run_dir(const std::string& run_dir) {
  if (check_existing_run_dir(run_dir)) return;
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  DT_REQUIRE(!ec, "option --run-dir: cannot create '" + run_dir + "': " + ec.message());
  require_writable(run_dir);
}

}  // namespace dtrain
