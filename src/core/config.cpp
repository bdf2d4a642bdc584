// dtrain/core/config.cpp — parse_config(): the command line, the INI job file and --help through
// the one options table of config_options.cpp. Job-file sections are dropped from key names
// ("[optimizer] lr" is "--lr"); the command line wins over the job file; validate_config()
// (config_checks.cpp) checks the result.
#include "dtrain/core/config.hpp"

#include <boost/program_options.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "config_table.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/version.hpp"

namespace po = boost::program_options;

namespace dtrain {

using config_detail::build_table;
using config_detail::Table;

namespace {

/// Reads the job file, dropping "section." from keys. Unknown keys are errors naming the file.
po::parsed_options parse_job_file(const std::string& path, const po::options_description& desc) {
  namespace fs = std::filesystem;
  DT_REQUIRE(fs::exists(path), "job file '" + path + "' does not exist");
  DT_REQUIRE(fs::is_regular_file(path), "job file '" + path + "' is not a regular file");
  std::ifstream file(path, std::ios::binary);
  DT_REQUIRE(file.good(), "job file '" + path + "' cannot be read");
  std::stringstream in;
  in << file.rdbuf();
  // A UTF-8 byte-order mark (some Windows editors write one) is not part of the first line.
  if (in.str().rfind("\xEF\xBB\xBF", 0) == 0) in.seekg(3);
  // A line "= 5" has no key: Boost would take the empty name as a prefix of every option.
  std::istringstream lines(in.str());
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    const std::size_t first = line.find_first_not_of(" \t\r");
    DT_REQUIRE(first == std::string::npos || line[first] != '=',
               "job file '" + path + "' line " + std::to_string(n) + ": '" + line +
                   "' has no key before '=' (expected key = value)");
  }
  po::parsed_options parsed(&desc);
  try {
    parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw InputError("job file '" + path + "': " + e.what());
  }
  for (auto& o : parsed.options) {
    const std::string full = o.string_key;
    const auto dot = full.rfind('.');
    o.string_key = dot == std::string::npos ? full : full.substr(dot + 1);
    if (!desc.find_nothrow(o.string_key, false) || o.string_key == "config" ||
        o.string_key == "help")
      throw InputError("job file '" + path + "': unknown key '" + full +
                       "' (see dtrain --help for the valid keys)");
    o.unregistered = false;
  }
  return parsed;
}

/// The command line's options (argv without the subcommand) into vm. Throws InputError for an
/// unknown option, a bad value or a word that is no option's value.
void store_command_line(const std::vector<const char*>& args, const po::options_description& cli,
                        po::variables_map& vm) {
  try {
    const po::parsed_options parsed =
        po::command_line_parser(static_cast<int>(args.size()), args.data())
            .options(cli)
            // No guessing: a prefix such as --batch is an unknown option, not --batch-size.
            .style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing)
            .run();
    // A word that is no option's value (a misspelt subcommand, a stray token) would be dropped.
    for (const po::option& o : parsed.options)
      if (o.position_key >= 0)
        throw InputError(
            "command line: unexpected argument '" +
            (o.value.empty() ? o.string_key : o.value.front()) +
            "' (usage: dtrain [train | predict | export | plan] --option value ...; see "
            "dtrain --help)");
    po::store(parsed, vm);
  } catch (const po::error& e) {
    throw InputError(std::string("command line: ") + e.what() + " (see dtrain --help)");
  }
}

/// The job file's options into vm, under the command line's: a key the command line gives keeps
/// its command-line value (po::store keeps the first), and a data source the command line names
/// replaces the job file's — --synthetic there drops the job file's --train-data and --test-data,
/// --train-data or --test-data there drops its --synthetic. Every value of the file is parsed,
/// an overridden one too (a bad value is an error, not hidden by the override). Returns the keys
/// whose value the file supplied.
std::set<std::string> store_job_file(const std::string& path, const po::options_description& desc,
                                     po::variables_map& vm) {
  auto on_command_line = [&](const char* key) {
    return vm.count(key) && !vm[key].defaulted() && !vm[key].as<std::string>().empty();
  };
  std::vector<std::string> replaced;
  if (on_command_line("synthetic")) replaced = {"train-data", "test-data"};
  if (on_command_line("train-data") || on_command_line("test-data"))
    replaced.push_back("synthetic");
  try {
    po::parsed_options job = parse_job_file(path, desc);
    std::erase_if(job.options, [&](const po::option& o) {
      return std::find(replaced.begin(), replaced.end(), o.string_key) != replaced.end();
    });
    po::variables_map all;  // parses (validates) every value; notify() is not called on it
    po::store(job, all);
    std::set<std::string> supplied;
    for (const po::option& o : job.options)
      if (!vm.count(o.string_key) || vm[o.string_key].defaulted()) supplied.insert(o.string_key);
    po::store(job, vm);
    return supplied;
  } catch (const po::error& e) {
    throw InputError("job file '" + path + "': " + e.what());
  }
}

/// validate_config(), an error about an option whose value the job file `path` supplied naming
/// the file: "job file 'J': option --lr: ...".
void validate_naming_job_file(const Config& c, const std::string& path,
                              const std::set<std::string>& from_file) {
  try {
    validate_config(c);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    const std::string lead = "option --";
    if (path.empty() || msg.rfind(lead, 0) != 0) throw;
    const std::size_t end =
        msg.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", lead.size());
    if (!from_file.count(msg.substr(lead.size(), end - lead.size()))) throw;
    throw InputError("job file '" + path + "': " + msg);
  }
}

/// The options outside the table: --help, --version and --config (into c.config_file).
po::options_description general_options(Config& c) {
  po::options_description general("General");
  general.add_options()("help,h", "print this help and exit")(
      "version", "print dtrain's version (git describe at build time) and exit")(
      "config", po::value<std::string>(&c.config_file), "INI job file (see jobs/)");
  return general;
}

/// The job file's values that the command line overrides are checked too (docs/training.md):
/// the configuration with the file's value for every key it gives and the command line's for
/// the rest passes check_each_value(), or the error names the file. A bad value then fails for
/// everyone who runs the file, not only for those who do not override it.
void check_overridden_values(const std::vector<const char*>& args, const std::string& path) {
  Config f;
  Table table;
  build_table(table, f);
  const po::options_description desc = table.all();
  po::options_description cli;
  cli.add(general_options(f)).add(desc);
  po::variables_map vm;
  try {
    po::store(parse_job_file(path, desc), vm);  // first: the file's values win
    store_command_line(args, cli, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError("job file '" + path + "': " + e.what());
  }
  try {
    check_each_value(f);
  } catch (const InputError& e) {
    throw InputError("job file '" + path + "': " + e.what() +
                     " (the command line overrides it, but the file's value must be valid too)");
  }
}

/// `dtrain export` reads the model and its tensors from --checkpoint and writes --out: any other
/// option given on the command line would be silently ignored (--precision bf16 for --dtype
/// bf16 wrote float32), so it is refused. --config, --layer, --data and --init-from get
/// check_subcommand()'s own message.
void refuse_options_export_ignores(const po::variables_map& vm) {
  static const std::set<std::string> used = {"checkpoint", "out",  "format",    "dtype", "config",
                                             "layer",      "data", "init-from", "help",  "version"};
  for (const auto& [name, value] : vm) {
    if (value.defaulted() || used.count(name)) continue;
    throw InputError("option --" + name +
                     ": not used by dtrain export, which takes --checkpoint, "
                     "--format, --out and, for safetensors, --dtype f32|bf16" +
                     (name == "precision" ? " (did you mean --dtype bf16?)" : ""));
  }
}

std::string help_text(const po::options_description& cli) {
  std::ostringstream os;
  os << "usage: mpirun -np N dtrain [train] --config JOB.ini [--option value ...]\n"
        "       mpirun -np N dtrain predict [--config JOB.ini] --checkpoint CKPT.h5 --data X.h5 "
        "--out P.h5\n"
        "         (every rank scores a contiguous share of X with the checkpoint's parameters and "
        "the\n          batchnorm statistics evaluation used; no parameter servers; without "
        "--config, the\n          model the checkpoint carries)\n"
        "       dtrain export --checkpoint CKPT.h5 --format safetensors --out M.safetensors "
        "[--dtype bf16]\n"
        "       dtrain export --checkpoint CKPT.h5 --format onnx --out M.onnx\n"
        "       dtrain plan --config JOB.ini --nodes N --workers-per-node G --network SPEC "
        "[--mode M --num-ps K] [--out PLAN.json]\n\n"
     << cli;
  return os.str();
}

}  // namespace

ParseResult parse_config(int argc, const char* const* argv) {
  ParseResult r;
  Config& c = r.config;
  Table table;
  build_table(table, c);
  po::options_description desc = table.all();
  po::options_description cli;
  cli.add(general_options(c)).add(desc);

  // The subcommand: `dtrain predict ...`, `dtrain train ...`, or `dtrain --option ...` (train).
  std::vector<const char*> args(argv, argv + argc);
  if (argc > 1 && find_enum(argv[1], c.command)) args.erase(args.begin() + 1);
  po::variables_map vm;
  store_command_line(args, cli, vm);
  if (vm.count("help") || vm.count("version")) {
    r.help = true;
    r.help_text =
        vm.count("help") ? help_text(cli) : std::string("dtrain ") + dtrain_version() + "\n";
    return r;
  }
  if (c.command == Subcommand::export_tensors) refuse_options_export_ignores(vm);
  c.plan_mode_given = vm.count("mode") && !vm["mode"].defaulted();
  c.plan_num_ps_given = vm.count("num-ps") && !vm["num-ps"].defaulted();
  std::set<std::string> from_file;
  if (vm.count("config")) from_file = store_job_file(vm["config"].as<std::string>(), desc, vm);
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(std::string("options: ") + e.what());
  }
  validate_naming_job_file(c, c.config_file, from_file);
  if (!c.config_file.empty() && c.command != Subcommand::export_tensors)
    check_overridden_values(args, c.config_file);
  c.effective_ini = "# effective dtrain configuration\n" + table.effective_ini();
  return r;
}

int gradients_per_step(const Config& c, int workers) {
  if (exchange_kind(c) == ExchangeKind::ps_async) return 1;
  // --allreduce none sums nothing: each worker's step is its own gradient.
  if (exchange_kind(c) == ExchangeKind::allreduce && c.allreduce == AllreduceOption::none) return 1;
  if (exchange_kind(c) == ExchangeKind::ps_sync && c.replicas_to_aggregate > 0)
    return std::min(c.replicas_to_aggregate, workers);
  return workers;
}

Config effective_for_workers(const Config& c, int workers) {
  Config e = c;
  if (c.lr_scaling == LrScaling::linear) {
    const auto k = static_cast<float>(gradients_per_step(c, workers));
    e.lr *= k;
    e.lr_min *= k;
  }
  if (exchange_kind(c) == ExchangeKind::ps_async && c.async_schedule == AsyncSchedule::sync_steps) {
    e.warmup_steps *= workers;
    e.lr_step_size *= workers;
    e.lr_decay_steps *= workers;
  }
  return e;
}

StepRange parse_step_range(const std::string& spec) {
  if (spec.empty()) return {};
  StepRange r;
  const char* p = spec.data();
  const char* end = p + spec.size();
  const auto [mid, e1] = std::from_chars(p, end, r.begin);
  const bool ok = e1 == std::errc() && mid != p && mid != end && *mid == ':';
  const auto [last, e2] = ok ? std::from_chars(mid + 1, end, r.end)
                             : std::from_chars_result{mid, std::errc::invalid_argument};
  if (!ok || e2 != std::errc() || last != end || last == mid + 1 || r.begin < 0 || r.end <= r.begin)
    throw InputError("option --profile-steps '" + spec +
                     "': expected A:B, global steps with 0 <= A < B (e.g. 50:60)");
  return r;
}

namespace {

/// A decimal number or a fraction A/B; nullopt when `text` is neither.
std::optional<double> parse_fraction(std::string_view text) {
  const char* p = text.data();
  const char* end = p + text.size();
  double num = 0, den = 1;
  auto [q, e1] = std::from_chars(p, end, num);
  if (e1 != std::errc() || q == p) return std::nullopt;
  if (q != end && *q == '/') {
    const char* d = q + 1;
    auto [r, e2] = std::from_chars(d, end, den);
    if (e2 != std::errc() || r == d) return std::nullopt;
    q = r;
  }
  if (q != end || den == 0) return std::nullopt;
  return num / den;
}

}  // namespace

std::pair<double, double> parse_min_max(const std::string& opt, const std::string& spec) {
  const std::size_t comma = spec.find(',');
  std::optional<double> lo, hi;
  if (comma != std::string::npos) {
    lo = parse_fraction(std::string_view(spec).substr(0, comma));
    hi = parse_fraction(std::string_view(spec).substr(comma + 1));
  }
  if (!lo || !hi || !std::isfinite(*lo) || !std::isfinite(*hi) || !(*lo > 0) || *lo > *hi)
    throw InputError("option --" + opt + " '" + spec +
                     "': expected MIN,MAX, two numbers or fractions A/B with 0 < MIN <= MAX "
                     "(e.g. 0.35,1 or 3/4,4/3)");
  return {*lo, *hi};
}

ExchangeKind exchange_kind(const Config& c) {
  if (c.mode == Mode::sync) return c.num_ps > 0 ? ExchangeKind::ps_sync : ExchangeKind::allreduce;
  return c.max_staleness >= 0 ? ExchangeKind::ps_bounded : ExchangeKind::ps_async;
}

std::string cuda_graph_off_reason(const Config& c, int workers) {
  if (c.cuda_graph == CudaGraphOption::off) return "--cuda-graph off";
  if (c.micro_batches > 1)
    return "--micro-batches " + std::to_string(c.micro_batches) + " (a step of several passes)";
  if (c.pipeline_stages > 1) return "--pipeline-stages " + std::to_string(c.pipeline_stages);
  if (c.debug_sync) return "--debug-sync (the host waits for the device after every layer)";
  const bool nccl = c.allreduce == AllreduceOption::nccl ||
                    (c.allreduce == AllreduceOption::automatic && !c.allow_gpu_sharing);
  if (workers > 1 && exchange_kind(c) == ExchangeKind::allreduce && nccl && c.overlap)
    return "NCCL sums gradient buckets while backward runs (--overlap true, " +
           std::to_string(workers) + " workers)";
  return "";
}

bool steps_aggregate_workers(const Config& c) { return exchange_kind(c) != ExchangeKind::ps_async; }

}  // namespace dtrain
