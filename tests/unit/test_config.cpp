// tests/unit/test_config.cpp — parse_config (command line + INI job file through one options table)
// and learning_rate(): sections are dropped from job-file keys, the command line overrides the
// file, repeated `layer =` lines, --help, and every rejected input raising InputError that names
// the option (and the file); then the warm-up, step and cosine schedules at their end points.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/train/trainer.hpp"

namespace fs = std::filesystem;

namespace dtrain {
namespace {

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dtrain_config_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_ini(const std::string& text, const std::string& name = "job.ini") {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }

  static ParseResult parse(std::vector<std::string> args) {
    args.insert(args.begin(), "dtrain");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return parse_config(static_cast<int>(argv.size()), argv.data());
  }

  /// Parses and returns the InputError message (fails the test when nothing is thrown).
  static std::string error_of(const std::vector<std::string>& args) {
    try {
      parse(args);
    } catch (const InputError& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an InputError: " << e.what();
      return e.what();
    }
    ADD_FAILURE() << "accepted";
    return "";
  }

  /// The minimal valid command line, plus `extra`.
  static std::vector<std::string> base(std::initializer_list<std::string> extra = {}) {
    std::vector<std::string> a = {"--train-data", "train.h5", "--layer", "dense"};
    a.insert(a.end(), extra);
    return a;
  }

  fs::path dir_;
};

#define EXPECT_MENTIONS(msg, word)               \
  EXPECT_NE((msg).find(word), std::string::npos) \
      << "message does not mention '" << (word) << "': " << (msg)

TEST_F(ConfigTest, DefaultsFromTheCommandLine) {
  const Config c = parse(base()).config;
  EXPECT_EQ(c.train_data, "train.h5");
  EXPECT_EQ(c.layers, (std::vector<std::string>{"dense"}));
  EXPECT_EQ(c.mode, Mode::async);
  EXPECT_EQ(c.num_ps, 1);
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_FLOAT_EQ(c.lr, 0.05f);
  EXPECT_NE(c.effective_ini.find("batch-size = 64"), std::string::npos) << c.effective_ini;
}

TEST_F(ConfigTest, LinearLrScalingMultipliesSyncLearningRateByWorkers) {
  const Config sync = parse(base({"--mode", "sync", "--num-ps", "0", "--lr", "0.02", "--lr-min",
                                  "0.001", "--lr-scaling", "linear"}))
                          .config;
  const Config e = effective_for_workers(sync, 3);
  EXPECT_FLOAT_EQ(e.lr, 0.06f);
  EXPECT_FLOAT_EQ(e.lr_min, 0.003f);
  // Async pushes apply --lr to one worker's batch: never scaled; nor is sync without the option.
  const Config async = parse(base({"--lr", "0.02", "--lr-scaling", "linear"})).config;
  EXPECT_FLOAT_EQ(effective_for_workers(async, 3).lr, 0.02f);
  const Config plain = parse(base({"--mode", "sync", "--num-ps", "0", "--lr", "0.02"})).config;
  EXPECT_FLOAT_EQ(effective_for_workers(plain, 3).lr, 0.02f);
  EXPECT_MENTIONS(error_of(base({"--lr-scaling", "sqrt"})), "lr-scaling");
  // Sync through the ps averages R = --replicas-to-aggregate gradients a step (backups beyond):
  // scaled by R, not by the workers; SSP's steps average every worker's push.
  const Config backups = parse(base({"--mode", "sync", "--num-ps", "1", "--lr", "0.02",
                                     "--replicas-to-aggregate", "2", "--lr-scaling", "linear"}))
                             .config;
  EXPECT_EQ(gradients_per_step(backups, 3), 2);
  Config none;  // --allreduce none: each worker applies its own gradient, no sum
  none.mode = Mode::sync;
  none.num_ps = 0;
  none.allreduce = AllreduceOption::none;
  EXPECT_EQ(gradients_per_step(none, 4), 1);
  EXPECT_FLOAT_EQ(effective_for_workers(backups, 3).lr, 0.04f);
  EXPECT_FLOAT_EQ(effective_for_workers(backups, 1).lr, 0.02f);  // R capped at the workers
  const Config ssp = parse(base({"--num-ps", "1", "--max-staleness", "1", "--lr", "0.02",
                                 "--lr-scaling", "linear"}))
                         .config;
  EXPECT_FLOAT_EQ(effective_for_workers(ssp, 3).lr, 0.06f);
}

TEST_F(ConfigTest, OptionsOfOneModeAreRefusedInAnother) {
  // Each option only one mode reads is refused, naming it, where the run would ignore it.
  const std::vector<std::string> sync = {"--mode", "sync", "--num-ps", "1"};
  const std::vector<std::string> ssp = {"--num-ps", "1", "--max-staleness", "2"};
  const std::vector<std::string> async = {"--num-ps", "1"};
  auto with = [&](std::vector<std::string> mode, std::initializer_list<std::string> extra) {
    std::vector<std::string> a = base(extra);
    a.insert(a.end(), mode.begin(), mode.end());
    return a;
  };
  for (const auto& [opt, value] :
       {std::pair{"stale-lr", "inverse"}, std::pair{"async-momentum", "as-given"},
        std::pair{"async-schedule", "pushes"}}) {
    const std::string flag = std::string("--") + opt;
    EXPECT_NO_THROW((void)parse(with(async, {flag, value}))) << opt;
    EXPECT_MENTIONS(error_of(with(sync, {flag, value})), "option " + flag + ": applies to async");
    EXPECT_MENTIONS(error_of(with(ssp, {flag, value})), "this run is SSP");
  }
  // `dtrain plan` prices every mode from one job: an async job's rules do not bar --mode sync.
  std::vector<std::string> plan = {"plan"};
  const std::vector<std::string> planned =
      with(sync, {"--async-momentum", "as-given", "--stale-lr", "inverse"});
  plan.insert(plan.end(), planned.begin(), planned.end());
  EXPECT_NO_THROW((void)parse(plan));
  // Their defaults are every mode's: a sync run takes them.
  EXPECT_NO_THROW((void)parse(with(sync, {"--stale-lr", "constant", "--async-momentum", "dana"})));
  EXPECT_MENTIONS(error_of(with(ssp, {"--delay-compensation", "1"})), "--delay-compensation");
  EXPECT_MENTIONS(error_of(with(sync, {"--max-staleness", "1"})), "--max-staleness");
  EXPECT_MENTIONS(error_of(with(async, {"--replicas-to-aggregate", "1"})),
                  "--replicas-to-aggregate");
  const std::vector<std::string> allreduce = {"--mode", "sync", "--num-ps", "0"};
  EXPECT_MENTIONS(error_of(with(allreduce, {"--ps-threads", "2"})), "option --ps-threads: sets");
  EXPECT_MENTIONS(error_of(with(allreduce, {"--ps-chunk-kb", "4"})), "this run has none");
  EXPECT_NO_THROW((void)parse(with(sync, {"--ps-threads", "2", "--ps-chunk-kb", "4"})));
  EXPECT_MENTIONS(error_of(with(allreduce, {"--pipeline-stages", "2", "--skip-nonfinite", "true"})),
                  "option --skip-nonfinite: not with --pipeline-stages 2");
  // --bucket-mb: 0 is one bucket; a positive size below one float would round to it.
  EXPECT_MENTIONS(error_of(with(allreduce, {"--bucket-mb", "0.0000001"})), "less than one float");
  EXPECT_NO_THROW((void)parse(with(allreduce, {"--bucket-mb", "0.000004"})));
  // The sync allreduce's settings where gradients go to parameter servers (every ps mode, and
  // --num-ps auto, which is one): refused, not ignored. Their defaults, and `dtrain plan`, pass.
  for (const auto& [opt, value] : {std::pair{"allreduce", "mpi"}, std::pair{"bucket-mb", "5"},
                                   std::pair{"bucket-link", "hdr-ib"}}) {
    const std::string flag = std::string("--") + opt;
    EXPECT_NO_THROW((void)parse(with(allreduce, {flag, value}))) << opt;
    for (const auto& mode : {sync, ssp, async, std::vector<std::string>{"--num-ps", "auto"}}) {
      const std::string msg = error_of(with(mode, {flag, value}));
      EXPECT_MENTIONS(msg, "option " + flag + ": sets the sync allreduce");
      EXPECT_MENTIONS(msg, "parameter servers");
    }
  }
  EXPECT_NO_THROW((void)parse(
      with(async, {"--allreduce", "auto", "--bucket-mb", "25", "--bucket-link", "off"})));
  // --allreduce none sums nothing: the wire, buckets and link of a sum are refused with it, not
  // ignored (results.json recorded a --wire-dtype no value took); their defaults pass, a saved
  // config.ini's (every option at its default) too, and so do they without none.
  const std::vector<std::string> none = {"--mode", "sync", "--num-ps", "0", "--allreduce", "none"};
  for (const auto& [opt, value] : {std::pair{"wire-dtype", "bf16"}, std::pair{"bucket-mb", "1"},
                                   std::pair{"bucket-link", "hdr-ib"}}) {
    const std::string flag = std::string("--") + opt;
    const std::string msg = error_of(with(none, {flag, value}));
    EXPECT_MENTIONS(msg, "option " + flag + ": sets how the sync allreduce sends");
    EXPECT_MENTIONS(msg, "--allreduce none sums nothing");
    EXPECT_NO_THROW((void)parse(with(allreduce, {flag, value}))) << opt;
  }
  EXPECT_NO_THROW((void)parse(
      with(none, {"--wire-dtype", "fp32", "--bucket-mb", "25", "--bucket-link", "off"})));
  const std::string saved = write_ini("[cluster]\nwire-dtype = fp32\nbucket-mb = 25\n"
                                      "bucket-link = off\n",
                                      "saved.ini");
  EXPECT_NO_THROW((void)parse(with(none, {"--config", saved})));
  const std::string wired = write_ini("[cluster]\nwire-dtype = bf16\n", "wired.ini");
  EXPECT_MENTIONS(error_of(with(none, {"--config", wired})),
                  "job file '" + wired + "': option --wire-dtype");
  std::vector<std::string> plan_ps = {"plan"};
  const std::vector<std::string> priced = with(async, {"--bucket-mb", "50"});
  plan_ps.insert(plan_ps.end(), priced.begin(), priced.end());
  EXPECT_NO_THROW((void)parse(plan_ps));
}

TEST_F(ConfigTest, JobFileSectionsAreStripped) {
  const std::string ini = write_ini(
      "[data]\ntrain-data = /data/t.h5\ntest-data = /data/e.h5\n"
      "[model]\nlayer = conv filters=8 kernel=3 pad=1\nlayer = relu\nlayer = flatten\nlayer = "
      "dense\n"
      "[train]\nmode = sync\nepochs = 7\nbatch-size = 32\nseed = 99\n"
      "[optimizer]\noptimizer = adam\nlr = 0.1\nlr-schedule = cosine\nwarmup-steps = 5\n"
      "[cluster]\nnum-ps = 0\n[checkpoint]\nrun-dir = /tmp/somewhere\nkeep-checkpoints = 2\n");
  const ParseResult r = parse({"--config", ini});
  ASSERT_FALSE(r.help);
  const Config& c = r.config;
  EXPECT_EQ(c.config_file, ini);
  EXPECT_EQ(c.train_data, "/data/t.h5");
  EXPECT_EQ(c.test_data, "/data/e.h5");
  EXPECT_EQ(c.layers, (std::vector<std::string>{"conv filters=8 kernel=3 pad=1", "relu", "flatten",
                                                "dense"}));
  EXPECT_EQ(c.mode, Mode::sync);
  EXPECT_EQ(c.epochs, 7);
  EXPECT_EQ(c.batch_size, 32);
  EXPECT_EQ(c.seed, 99u);
  EXPECT_EQ(c.optimizer, OptimizerKind::adam);
  EXPECT_FLOAT_EQ(c.lr, 0.1f);
  EXPECT_EQ(c.lr_schedule, LrSchedule::cosine);
  EXPECT_EQ(c.warmup_steps, 5);
  EXPECT_EQ(c.num_ps, 0);
  EXPECT_EQ(c.run_dir, "/tmp/somewhere");
  EXPECT_EQ(c.keep_checkpoints, 2);
}

TEST_F(ConfigTest, CommandLineOverridesTheJobFile) {
  const std::string ini = write_ini(
      "[data]\ntrain-data = file.h5\n[model]\nlayer = dense\n[train]\nepochs = 3\nbatch-size = 16\n"
      "[optimizer]\nlr = 0.1\n");
  const Config c = parse({"--config", ini, "--epochs", "9", "--lr", "0.25"}).config;
  EXPECT_EQ(c.epochs, 9);
  EXPECT_FLOAT_EQ(c.lr, 0.25f);
  EXPECT_EQ(c.batch_size, 16);  // not overridden: from the file
  EXPECT_EQ(c.train_data, "file.h5");
}

TEST_F(ConfigTest, RepeatedLayerOptionsOnTheCommandLine) {
  const Config c = parse({"--train-data", "t.h5", "--layer", "flatten", "--layer", "dense units=5",
                          "--layer", "relu", "--layer", "dense"})
                       .config;
  EXPECT_EQ(c.layers, (std::vector<std::string>{"flatten", "dense units=5", "relu", "dense"}));
}

TEST_F(ConfigTest, HelpListsOptionsWithDefaults) {
  const ParseResult r = parse({"--help"});
  ASSERT_TRUE(r.help);
  for (const char* opt : {"--train-data", "--mode", "--num-ps", "--batch-size", "--lr", "--resume",
                          "--run-dir", "--timeout", "--config"})
    EXPECT_MENTIONS(r.help_text, opt);
  EXPECT_MENTIONS(r.help_text, "(=64)");     // batch-size default
  EXPECT_MENTIONS(r.help_text, "(=async)");  // mode default
  EXPECT_TRUE(parse({"-h"}).help);
}

TEST_F(ConfigTest, UnknownKeyInJobFileNamesFileAndKey) {
  const std::string ini = write_ini("[train]\nepochs = 2\nlearning-speed = 3\n", "bad_key.ini");
  const std::string msg = error_of(base({"--config", ini}));
  EXPECT_MENTIONS(msg, "bad_key.ini");
  EXPECT_MENTIONS(msg, "learning-speed");
  // A key that is only a section prefix ("train.") names no option: an InputError, not Boost's
  // "ambiguous option" escaping as an internal error.
  const std::string empty = write_ini("[train]\nepochs = 2\ntrain. = 3\n", "empty_key.ini");
  EXPECT_MENTIONS(error_of(base({"--config", empty})), "empty_key.ini");
  // A line with no key: named by its line, not Boost's list of every option it would prefix.
  const std::string nokey = write_ini("[train]\n  = 5\n", "no_key.ini");
  const std::string msg2 = error_of(base({"--config", nokey}));
  EXPECT_MENTIONS(msg2, "job file '" + nokey + "' line 2: '  = 5' has no key before '='");
  EXPECT_EQ(msg2.find("ambiguous"), std::string::npos) << msg2;
}

TEST_F(ConfigTest, APipelineProfileNeedsPipelineStages) {
  // With one stage it was ignored without a word.
  EXPECT_MENTIONS(error_of(base({"--pipeline-profile", "p.json"})),
                  "option --pipeline-profile: cuts pipeline stages by measured time, but "
                  "--pipeline-stages is 1");
  EXPECT_EQ(parse(base({"--pipeline-profile", "p.json", "--pipeline-stages", "2"}))
                .config.pipeline_profile,
            "p.json");
}

TEST_F(ConfigTest, AnOptionPrefixIsNotGuessed) {
  // --batch was taken for --batch-size (and --lr-s for --lr-schedule): a typo went unnoticed.
  for (const char* opt : {"--batch", "--lr-sched"}) {
    SCOPED_TRACE(opt);
    EXPECT_MENTIONS(error_of(base({opt, "8"})), opt);
  }
  EXPECT_EQ(parse(base({"--batch-size", "8"})).config.batch_size, 8);
}

TEST_F(ConfigTest, AJobFileValueIsCheckedAndNamedEvenWhenOverridden) {
  // A value that does not parse is an error though the command line gives the key (it was hidden).
  const std::string fast = write_ini("[optimizer]\nlr = fast\n", "fast.ini");
  const std::string msg = error_of(base({"--config", fast, "--lr", "0.1"}));
  EXPECT_MENTIONS(msg, "job file '" + fast + "'");
  EXPECT_MENTIONS(msg, "fast");
  // A value out of range names the job file that set it, and only that one.
  const std::string neg = write_ini("[optimizer]\nlr = -1\n", "neg.ini");
  EXPECT_MENTIONS(error_of(base({"--config", neg})),
                  "job file '" + neg + "': option --lr: must be a finite number > 0, got -1");
  const std::string cli = error_of(base({"--config", neg, "--lr", "-2"}));
  EXPECT_EQ(cli.find("job file"), std::string::npos) << cli;  // the command line's value
  EXPECT_MENTIONS(cli, "option --lr: must be a finite number > 0, got -2");
  // Overridden, it is still the file's error: the file fails for whoever runs it as it is.
  EXPECT_MENTIONS(error_of(base({"--config", neg, "--lr", "0.1"})),
                  "job file '" + neg + "': option --lr: must be a finite number > 0, got -1");
  const std::string keep = write_ini("[checkpoint]\nkeep-checkpoints = 0\n", "keep.ini");
  EXPECT_MENTIONS(error_of(base({"--config", keep, "--keep-checkpoints", "2"})),
                  "job file '" + keep + "': option --keep-checkpoints");
  // Only each value alone: a file whose values agree among themselves is not held to the
  // command line's other values (its --lr-min 0.05 is above the command line's --lr 0.01).
  const std::string sched =
      write_ini("[optimizer]\nlr-schedule = cosine\nlr-min = 0.05\n", "sched.ini");
  EXPECT_FLOAT_EQ(
      parse(base({"--config", sched, "--lr", "0.01", "--lr-min", "0.001"})).config.lr_min, 0.001f);
  const std::string good = write_ini("[optimizer]\nlr = 0.5\n", "good.ini");
  EXPECT_EQ(parse(base({"--config", good, "--lr", "0.1"})).config.lr, 0.1f);  // overridden
}

TEST_F(ConfigTest, MissingJobFileIsNamed) {
  const std::string msg = error_of(base({"--config", (dir_ / "nope.ini").string()}));
  EXPECT_MENTIONS(msg, "nope.ini");
}

TEST_F(ConfigTest, UnknownCommandLineOption) {
  const std::string msg = error_of(base({"--fast-mode", "1"}));
  EXPECT_MENTIONS(msg, "fast-mode");
}

TEST_F(ConfigTest, BadNumberInJobFile) {
  const std::string ini = write_ini("[train]\nepochs = abc\n", "bad_num.ini");
  const std::string msg = error_of(base({"--config", ini}));
  EXPECT_MENTIONS(msg, "epochs");
  EXPECT_MENTIONS(msg, "abc");
  EXPECT_MENTIONS(msg, "bad_num.ini");
}

TEST_F(ConfigTest, BadNumberOnTheCommandLine) {
  const std::string msg = error_of(base({"--epochs", "abc"}));
  EXPECT_MENTIONS(msg, "epochs");
  EXPECT_MENTIONS(msg, "abc");
  EXPECT_MENTIONS(error_of(base({"--lr", "fast"})), "lr");
}

TEST_F(ConfigTest, NonPositiveSizes) {
  struct Case {
    const char* opt;
    const char* value;
  };
  for (const Case& k :
       {Case{"--epochs", "0"}, Case{"--epochs", "-3"}, Case{"--batch-size", "0"},
        Case{"--batch-size", "-1"}, Case{"--lr", "0"}, Case{"--lr", "-0.1"},
        Case{"--max-steps", "-5"}, Case{"--keep-checkpoints", "0"}, Case{"--timeout", "0"},
        Case{"--num-ps", "-1"}, Case{"--global-batch-size", "-64"}, Case{"--log-every", "0"}}) {
    SCOPED_TRACE(std::string(k.opt) + " " + k.value);
    const std::string msg = error_of(base({k.opt, k.value}));
    EXPECT_MENTIONS(msg, k.opt);
  }
}

TEST_F(ConfigTest, InfiniteValuesAreRefusedLikeNaN) {
  for (const char* opt : {"--lr", "--momentum", "--weight-decay", "--lr-min", "--timeout"}) {
    SCOPED_TRACE(opt);
    const std::string msg = error_of(base({opt, "inf"}));
    EXPECT_MENTIONS(msg, opt);
    EXPECT_MENTIONS(msg, "finite");
  }
}

TEST_F(ConfigTest, ATimeoutBeyondThirtyDaysIsRefusedNotWrapped) {
  // 1e10 s overflowed the nanosecond deadline of a wait: an abort or an instant false timeout.
  for (const char* v : {"1e10", "2592001"}) {
    SCOPED_TRACE(v);
    EXPECT_MENTIONS(error_of(base({"--timeout", v})),
                    "option --timeout: must be at most 2592000 seconds (30 days)");
  }
  EXPECT_EQ(parse(base({"--timeout", "2592000"})).config.timeout, 2592000.0);
}

TEST_F(ConfigTest, MomentumBelowOneAndLrMinAtMostLr) {
  EXPECT_MENTIONS(error_of(base({"--momentum", "1.5"})), "option --momentum: must be in [0, 1)");
  EXPECT_MENTIONS(error_of(base({"--momentum", "1"})), "--momentum");
  EXPECT_EQ(parse(base({"--momentum", "0.99"})).config.momentum, 0.99f);
  const std::string msg =
      error_of(base({"--lr", "0.5", "--lr-schedule", "cosine", "--lr-min", "1"}));
  EXPECT_MENTIONS(msg, "option --lr-min");
  EXPECT_MENTIONS(msg, "must not exceed");
  // Only the cosine schedule decays to --lr-min.
  EXPECT_EQ(parse(base({"--lr", "0.5", "--lr-min", "1"})).config.lr_min, 1.0f);
}

TEST_F(ConfigTest, ANegativeSeedIsRefusedNotWrapped) {
  EXPECT_MENTIONS(error_of(base({"--seed", "-1"})), "option --seed: must be an integer from 0");
  EXPECT_EQ(parse(base({"--seed", "9223372036854775807"})).config.seed, 9223372036854775807ull);
}

TEST_F(ConfigTest, StrayArgumentsAndPredictOptionsInTrainingAreRefused) {
  std::vector<std::string> typo = base();
  typo.insert(typo.begin(), "predcit");  // a misspelt subcommand must not start a training run
  EXPECT_MENTIONS(error_of(typo), "unexpected argument 'predcit'");
  EXPECT_MENTIONS(error_of(base({"extra_token"})), "unexpected argument 'extra_token'");
  for (const char* opt : {"--checkpoint", "--data", "--out"}) {
    SCOPED_TRACE(opt);
    const std::string msg = error_of(base({opt, "x.h5"}));
    EXPECT_MENTIONS(msg, std::string("option ") + opt + " 'x.h5'");
    EXPECT_MENTIONS(msg, "dtrain predict");
  }
}

TEST_F(ConfigTest, AJobFileWithAUtf8ByteOrderMarkReads) {
  const std::string ini =
      write_ini("\xEF\xBB\xBF[data]\ntrain-data = t.h5\n[model]\nlayer = dense\n");
  const ParseResult r = parse({"--config", ini});
  EXPECT_EQ(r.config.train_data, "t.h5");
}

TEST_F(ConfigTest, UnknownEnumValues) {
  std::string msg = error_of(base({"--mode", "fast"}));
  EXPECT_MENTIONS(msg, "--mode");
  EXPECT_MENTIONS(msg, "fast");
  msg = error_of(base({"--optimizer", "rmsprop"}));
  EXPECT_MENTIONS(msg, "--optimizer");
  EXPECT_MENTIONS(msg, "rmsprop");
  EXPECT_MENTIONS(error_of(base({"--lr-schedule", "linear"})), "--lr-schedule");
  EXPECT_MENTIONS(error_of(base({"--device", "tpu"})), "--device");
  msg = error_of(base({"--layout", "chw"}));
  EXPECT_MENTIONS(msg, "--layout");
  EXPECT_MENTIONS(msg, "chw");
  EXPECT_EQ(parse(base({"--layout", "nhwc"})).config.layout, LayoutOption::nhwc);
  EXPECT_EQ(parse(base({})).config.layout, LayoutOption::automatic);
  msg = error_of(base({"--precision", "fp16"}));
  EXPECT_MENTIONS(msg, "--precision");
  EXPECT_MENTIONS(msg, "fp16");
  EXPECT_EQ(parse(base({"--precision", "bf16"})).config.precision, Precision::bf16);
  EXPECT_EQ(parse(base({})).config.precision, Precision::fp32);
  EXPECT_THROW((void)parse_enum<OptimizerKind>("rmsprop", "optimizer"), InputError);
  EXPECT_EQ(parse_enum<OptimizerKind>("adam", "optimizer"), OptimizerKind::adam);
}

/// Every name of E parses (parse_enum, and as `--KEY NAME` on the command line into `field`, in a
/// job file too) to its value and prints back as itself (to_string, the effective configuration);
/// an unknown name is an error naming the option, the value and every choice.
template <NamedEnum E>
void expect_enum_option(const std::string& key, E Config::*field, std::vector<std::string> extra,
                        const std::string& ini) {
  auto parse_with = [&](std::vector<std::string> args) {
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.begin(), "dtrain");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return parse_config(static_cast<int>(argv.size()), argv.data()).config;
  };
  for (const auto& [value, name] : EnumNames<E>::table) {
    SCOPED_TRACE(key + " " + std::string(name));
    EXPECT_EQ(parse_enum<E>(name, key), value);
    EXPECT_STREQ(to_string(value), name);
    const Config c = parse_with({"--" + key, std::string(name)});
    EXPECT_EQ(c.*field, value);
    EXPECT_MENTIONS(c.effective_ini, "\n" + key + " = " + std::string(name) + "\n");
    std::ofstream(ini) << key << " = " << name << "\n";
    EXPECT_EQ(parse_with({"--config", ini}).*field, value);
  }
  try {
    (void)parse_enum<E>("no-such", key);
    ADD_FAILURE() << key << ": no-such accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "option --" + key + ": invalid value 'no-such' (expected " + enum_choices<E>() + ")");
  }
  std::ofstream(ini) << key << " = no-such\n";
  try {
    (void)parse_with({"--config", ini});
    ADD_FAILURE() << key << ": no-such accepted in a job file";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_MENTIONS(msg, "job file '" + ini + "': option '" + key + "'");  // the file's key
    EXPECT_MENTIONS(msg, enum_choices<E>());
  }
}

TEST_F(ConfigTest, EnumOptionsParseOnceAndPrintBack) {
  const std::string ini = write_ini("");
  const std::vector<std::string> train = {"--train-data", "t.h5", "--layer", "dense"};
  std::vector<std::string> sync = train;
  sync.insert(sync.end(), {"--mode", "sync", "--num-ps", "0"});
  expect_enum_option("mode", &Config::mode,
                     {"--train-data", "t.h5", "--layer", "dense", "--num-ps", "1"}, ini);
  expect_enum_option("stale-lr", &Config::stale_lr, train, ini);
  expect_enum_option("async-momentum", &Config::async_momentum, train, ini);
  expect_enum_option("async-schedule", &Config::async_schedule, train, ini);
  expect_enum_option("on-bad-image", &Config::on_bad_image, train, ini);
  expect_enum_option("optimizer", &Config::optimizer, sync, ini);
  expect_enum_option("lr-schedule", &Config::lr_schedule, train, ini);
  expect_enum_option("lr-scaling", &Config::lr_scaling, train, ini);
  expect_enum_option("math", &Config::math, train, ini);
  expect_enum_option("layout", &Config::layout, train, ini);
  expect_enum_option("precision", &Config::precision, train, ini);
  expect_enum_option("fuse", &Config::fuse, train, ini);
  expect_enum_option("conv-api", &Config::conv_api, train, ini);
  expect_enum_option("schedule", &Config::schedule, train, ini);
  expect_enum_option("wire-dtype", &Config::wire_dtype, sync, ini);
  // --device and --allreduce constrain each other: cuda with mpi, cpu with auto.
  std::vector<std::string> mpi = sync;
  mpi.insert(mpi.end(), {"--allreduce", "mpi"});
  expect_enum_option("device", &Config::device, mpi, ini);
  std::vector<std::string> any_device = train;
  any_device.insert(any_device.end(), {"--device", "auto"});
  std::vector<std::string> sync_any_device = sync;  // none: sync allreduce only
  sync_any_device.insert(sync_any_device.end(), {"--device", "auto"});
  expect_enum_option("allreduce", &Config::allreduce, sync_any_device, ini);
  expect_enum_option("cuda-graph", &Config::cuda_graph, any_device, ini);  // on: not --device cpu
  // The export options, under `dtrain export`.
  const Config e =
      parse({"export", "--checkpoint", "c.h5", "--out", "m.st", "--dtype", "bf16"}).config;
  EXPECT_EQ(e.command, Subcommand::export_tensors);
  EXPECT_EQ(e.export_dtype, ExportDtype::bf16);
  EXPECT_EQ(e.export_format, ExportFormat::safetensors);
  EXPECT_MENTIONS(error_of({"export", "--checkpoint", "c.h5", "--out", "m.st", "--dtype", "f16"}),
                  "f32 | bf16");
  EXPECT_MENTIONS(error_of({"export", "--checkpoint", "c.h5", "--out", "m.st", "--format", "tf"}),
                  "(expected safetensors | onnx)");
  EXPECT_EQ(parse({"export", "--checkpoint", "c.h5", "--out", "m.onnx", "--format", "onnx"})
                .config.export_format,
            ExportFormat::onnx);
  EXPECT_MENTIONS(error_of({"export", "--checkpoint", "c.h5", "--out", "m.onnx", "--format", "onnx",
                            "--dtype", "bf16"}),
                  "applies to --format safetensors");
  // export takes its model and tensors from the checkpoint: other options are refused, not
  // ignored (--precision bf16 wrote a float32 file); --format and --dtype are export's alone.
  const std::vector<std::string> exp = {"export", "--checkpoint", "c.h5", "--out", "m.st"};
  for (const auto& [opt, value] :
       {std::pair{"--precision", "bf16"}, std::pair{"--train-data", "t.h5"},
        std::pair{"--num-classes", "5"}, std::pair{"--run-dir", "r"}}) {
    std::vector<std::string> a = exp;
    a.insert(a.end(), {opt, value});
    const std::string msg = error_of(a);
    EXPECT_MENTIONS(msg, std::string("option ") + opt + ": not used by dtrain export");
  }
  std::vector<std::string> bf16 = exp;
  bf16.insert(bf16.end(), {"--precision", "bf16"});
  EXPECT_MENTIONS(error_of(bf16), "did you mean --dtype bf16?");
  EXPECT_MENTIONS(error_of(base({"--dtype", "bf16"})), "belong to `dtrain export`");
  EXPECT_MENTIONS(error_of(base({"--format", "onnx"})), "belong to `dtrain export`");
  EXPECT_EQ(parse({"predict", "--checkpoint", "c.h5", "--data", "x.h5", "--out", "p.h5",
                   "--train-data", "t.h5", "--layer", "dense"})
                .config.command,
            Subcommand::predict);
  EXPECT_EQ(parse(train).config.command, Subcommand::train);
}

TEST_F(ConfigTest, AsyncNeedsAParameterServer) {
  const std::string msg = error_of(base({"--mode", "async", "--num-ps", "0"}));
  EXPECT_MENTIONS(msg, "--num-ps");
  EXPECT_NO_THROW(parse(base({"--mode", "sync", "--num-ps", "0"})));
}

TEST_F(ConfigTest, MissingTrainDataAndLayers) {
  EXPECT_MENTIONS(error_of({"--layer", "dense"}), "--train-data");
  EXPECT_MENTIONS(error_of({"--train-data", "t.h5"}), "--layer");
}

TEST_F(ConfigTest, SyntheticDataReplacesTheTrainingSet) {
  // No --train-data needed; the spec and the epoch length are kept as given.
  Config c = parse({"--synthetic", "3x224x224:1000", "--layer", "dense"}).config;
  EXPECT_EQ(c.synthetic, "3x224x224:1000");
  EXPECT_EQ(c.synthetic_samples, 12800);
  EXPECT_TRUE(c.train_data.empty());
  EXPECT_MENTIONS(c.effective_ini, "synthetic = 3x224x224:1000");
  c = parse({"--synthetic", "1x28x28:10", "--synthetic-samples", "512", "--layer", "dense"}).config;
  EXPECT_EQ(c.synthetic_samples, 512);
  const DatasetInfo d = synthetic_dataset(c.synthetic, c.synthetic_samples);
  EXPECT_EQ(d.sample, (Shape{1, 1, 28, 28}));
  EXPECT_EQ(d.num_classes, 10);
  EXPECT_EQ(d.num_samples, 512);
  EXPECT_EQ(d.path, "synthetic 1x28x28:10");
  EXPECT_TRUE(d.mean.empty() && d.stddev.empty() && !d.is_uint8);
  // From a job file, and the smallest and largest accepted values.
  const std::string ini = write_ini("[data]\nsynthetic = 3x32x32:2\nsynthetic-samples = 64\n"
                                    "[model]\nlayer = dense\n");
  c = parse({"--config", ini}).config;
  EXPECT_EQ(c.synthetic, "3x32x32:2");
  EXPECT_EQ(c.synthetic_samples, 64);
  EXPECT_NO_THROW(parse({"--synthetic", "1x1x1:2", "--layer", "dense"}));
  EXPECT_NO_THROW(parse({"--synthetic", "1x65536x4:1000000", "--layer", "dense"}));
}

TEST_F(ConfigTest, BadSyntheticSpecsNameTheOptionAndTheFormat) {
  for (const char* spec :
       {"3x224x224", "3x224:1000", "224x224:1000", "3x224x224:", ":1000", "3x224x224:1000:5",
        "3x224x224x3:1000", "3*224*224:1000", "3x224x224,1000", "ax224x224:1000", "3x224x224:ten",
        "3x224x224:1000 ", " 3x224x224:1000", "3 x224x224:1000", "3x224x224:1000x",
        "3x224.5x224:1000", "3x224x224:99999999999", "x", "synthetic"}) {
    SCOPED_TRACE(spec);
    const std::string msg = error_of({"--synthetic", spec, "--layer", "dense"});
    EXPECT_MENTIONS(msg, "--synthetic");
    EXPECT_MENTIONS(msg, std::string("'") + spec + "'");
    EXPECT_MENTIONS(msg, "CxHxW:classes");
  }
  // Well-formed but out of range: non-positive or huge sizes, fewer than 2 classes, a sample of
  // 2^31 floats or more.
  for (const char* spec : {"0x28x28:10", "1x0x28:10", "1x28x0:10", "-1x28x28:10", "1x-28x28:10",
                           "1x28x28:1", "1x28x28:0", "1x28x28:-3", "1x65537x28:10",
                           "1x28x28:1000001", "3x65536x65536:10", "2x32768x32768:10"}) {
    SCOPED_TRACE(spec);
    const std::string msg = error_of({"--synthetic", spec, "--layer", "dense"});
    EXPECT_MENTIONS(msg, "--synthetic");
    EXPECT_MENTIONS(msg, std::string("'") + spec + "'");
    EXPECT_MENTIONS(msg, "CxHxW:classes");
  }
  EXPECT_MENTIONS(error_of({"--synthetic", "1x28x28:1", "--layer", "dense"}), "classes");
  EXPECT_MENTIONS(error_of({"--synthetic", "1x65537x28:10", "--layer", "dense"}), "65536");
  EXPECT_MENTIONS(error_of({"--synthetic", "2x32768x32768:10", "--layer", "dense"}), "too large");
  // In a job file too.
  const std::string ini = write_ini("[data]\nsynthetic = 3x224x224\n[model]\nlayer = dense\n");
  EXPECT_MENTIONS(error_of({"--config", ini}), "--synthetic");
  // --synthetic-samples is checked when synthetic data is on (and ignored otherwise).
  for (const char* n : {"0", "-5"}) {
    SCOPED_TRACE(n);
    EXPECT_MENTIONS(
        error_of({"--synthetic", "1x28x28:10", "--synthetic-samples", n, "--layer", "dense"}),
        "--synthetic-samples");
  }
  EXPECT_MENTIONS(
      error_of({"--synthetic", "1x28x28:10", "--synthetic-samples", "many", "--layer", "dense"}),
      "synthetic-samples");
  EXPECT_NO_THROW(parse(base({"--synthetic-samples", "0"})));
}

TEST_F(ConfigTest, CudaGraphOnNeedsGpuWorkersAndACapturableStep) {
  EXPECT_EQ(parse(base()).config.cuda_graph, CudaGraphOption::automatic);
  // auto and off are accepted on CPU workers (nothing to capture there).
  EXPECT_EQ(parse(base({"--cuda-graph", "off"})).config.cuda_graph, CudaGraphOption::off);
  std::string msg = error_of(base({"--cuda-graph", "on"}));  // --device cpu by default
  EXPECT_MENTIONS(msg, "option --cuda-graph");
  EXPECT_MENTIONS(msg, "--device cuda");
  EXPECT_EQ(parse(base({"--cuda-graph", "on", "--device", "cuda", "--mode", "sync", "--num-ps", "0",
                        "--allreduce", "mpi"}))
                .config.cuda_graph,
            CudaGraphOption::on);
  msg = error_of(base(
      {"--cuda-graph", "on", "--device", "cuda", "--micro-batches", "2", "--batch-size", "8"}));
  EXPECT_MENTIONS(msg, "option --cuda-graph");
  EXPECT_MENTIONS(msg, "--micro-batches 2");
  msg = error_of(base({"--cuda-graph", "on", "--device", "cuda", "--debug-sync", "true"}));
  EXPECT_MENTIONS(msg, "--debug-sync");
  EXPECT_MENTIONS(error_of(base({"--cuda-graph", "maybe"})), "--cuda-graph");
}

TEST_F(ConfigTest, CudaGraphOffReasons) {
  Config c;
  c.device = DeviceOption::cuda;
  c.mode = Mode::sync;
  c.num_ps = 0;  // allreduce
  EXPECT_EQ(cuda_graph_off_reason(c, 1), "");
  // NCCL (auto picks it on GPUs) sums buckets during backward only with several workers.
  EXPECT_MENTIONS(cuda_graph_off_reason(c, 2), "NCCL");
  c.overlap = false;
  EXPECT_EQ(cuda_graph_off_reason(c, 2), "");
  c.overlap = true;
  c.allreduce = AllreduceOption::mpi;  // one sum after backward, through host memory
  EXPECT_EQ(cuda_graph_off_reason(c, 4), "");
  c.allreduce = AllreduceOption::automatic;
  c.allow_gpu_sharing = true;  // auto: MPI when ranks share a GPU
  EXPECT_EQ(cuda_graph_off_reason(c, 2), "");
  c.allow_gpu_sharing = false;
  c.mode = Mode::async;  // the ps exchange pushes after backward on GPUs
  c.num_ps = 1;
  EXPECT_EQ(cuda_graph_off_reason(c, 2), "");
  c.micro_batches = 4;
  EXPECT_MENTIONS(cuda_graph_off_reason(c, 1), "--micro-batches 4");
  c.micro_batches = 1;
  c.pipeline_stages = 2;
  EXPECT_MENTIONS(cuda_graph_off_reason(c, 1), "--pipeline-stages 2");
  c.pipeline_stages = 1;
  c.debug_sync = true;
  EXPECT_MENTIONS(cuda_graph_off_reason(c, 1), "--debug-sync");
  c.debug_sync = false;
  c.cuda_graph = CudaGraphOption::off;
  EXPECT_EQ(cuda_graph_off_reason(c, 1), "--cuda-graph off");
}

TEST_F(ConfigTest, LayoutAutoIsNhwcExceptFmaMathOnGpus) {
  Config c = parse(base({})).config;
  EXPECT_EQ(layout_of(c, Device::cpu), Layout::nhwc);
  EXPECT_EQ(layout_of(c, Device::cuda), Layout::nhwc);
  c = parse(base({"--math", "fp32"})).config;
  EXPECT_EQ(layout_of(c, Device::cpu), Layout::nhwc);
  EXPECT_EQ(layout_of(c, Device::cuda), Layout::nchw);  // FMA convolutions: NCHW is faster
  c = parse(base({"--math", "fp32", "--precision", "bf16"})).config;
  EXPECT_EQ(layout_of(c, Device::cuda), Layout::nhwc);  // bf16 runs on tensor cores anyway
  for (const Layout l : {Layout::nchw, Layout::nhwc}) {
    c = parse(base({"--layout", layout_name(l)})).config;
    EXPECT_EQ(layout_of(c, Device::cpu), l);
    EXPECT_EQ(layout_of(c, Device::cuda), l);
  }
}

TEST_F(ConfigTest, PipelineOptionsAreChecked) {
  EXPECT_MENTIONS(
      error_of(base({"--micro-batches", "3", "--batch-size", "32", "--dry-run", "true"})),
      "does not divide --batch-size 32");
  EXPECT_EQ(parse(base({"--pipeline-stages", "2"})).config.pipeline_stages, 2);  // ranks: trainer
  EXPECT_EQ(parse(base({"--micro-batches", "4", "--batch-size", "32"})).config.micro_batches, 4);
  EXPECT_MENTIONS(error_of(base({"--schedule", "zb", "--dry-run", "true"})), "schedule");
  EXPECT_MENTIONS(error_of(base({"--pipeline-stages", "0", "--dry-run", "true"})),
                  "pipeline-stages");
  const Config c = parse(base({"--pipeline-stages", "2", "--micro-batches", "4", "--batch-size",
                               "32", "--schedule", "gpipe", "--dry-run", "true"}))
                       .config;
  EXPECT_EQ(c.pipeline_stages, 2);
  EXPECT_EQ(c.micro_batches, 4);
  EXPECT_EQ(c.schedule, PipelineSchedule::gpipe);
}

TEST_F(ConfigTest, ProfileStepsIsAWindowOfGlobalSteps) {
  EXPECT_TRUE(parse_step_range("").empty());
  const StepRange r = parse_step_range("50:60");
  EXPECT_EQ(r.begin, 50);
  EXPECT_EQ(r.end, 60);
  EXPECT_FALSE(r.contains(49));
  EXPECT_TRUE(r.contains(50));
  EXPECT_TRUE(r.contains(59));
  EXPECT_FALSE(r.contains(60));
  EXPECT_TRUE(parse_step_range("0:1").contains(0));
  EXPECT_NO_THROW(parse(base({"--profile-steps", "5:7"})));
  for (const char* spec : {"5", "5:", ":7", "7:5", "5:5", "-1:3", "a:b", "5:7:9", "5-7", " 5:7",
                           "5:7 ", "5:99999999999999999999"}) {
    SCOPED_TRACE(spec);
    const std::string msg = error_of(base({"--profile-steps", spec}));
    EXPECT_MENTIONS(msg, "--profile-steps");
    EXPECT_MENTIONS(msg, std::string("'") + spec + "'");
    EXPECT_MENTIONS(msg, "A:B");
  }
}

TEST_F(ConfigTest, RandomResizedCropRangesAreMinMaxPairs) {
  EXPECT_EQ(parse_min_max("rrc-scale", "0.35,1"), (std::pair{0.35, 1.0}));
  EXPECT_EQ(parse_min_max("rrc-ratio", "3/4,4/3"), (std::pair{3.0 / 4.0, 4.0 / 3.0}));
  EXPECT_EQ(parse_min_max("rrc-ratio", "1,1"), (std::pair{1.0, 1.0}));
  const Config c = parse(base({"--random-resized-crop", "28", "--rrc-scale", "0.5,1", "--rrc-ratio",
                               "0.8,1.25"}))
                       .config;
  EXPECT_EQ(c.rrc_scale, "0.5,1");
  EXPECT_EQ(c.rrc_ratio, "0.8,1.25");
  for (const char* spec : {"0.5", "0.5,", ",1", "0,1", "-0.1,1", "0.6,0.5", "a,b", "1/0,1",
                           "0.5,1,2", " 0.5,1", "nan,1", "0.5/,1"}) {
    SCOPED_TRACE(spec);
    const std::string msg =
        error_of(base({"--random-resized-crop", "28", "--rrc-ratio", spec, "--dry-run", "true"}));
    EXPECT_MENTIONS(msg, "--rrc-ratio");
    EXPECT_MENTIONS(msg, std::string("'") + spec + "'");
    EXPECT_MENTIONS(msg, "MIN,MAX");
  }
  // The scale is a fraction of the image: at most 1. Either range without the crop is an error.
  EXPECT_MENTIONS(error_of(base({"--random-resized-crop", "28", "--rrc-scale", "0.5,1.5"})),
                  "<= 1");
  EXPECT_MENTIONS(error_of(base({"--rrc-scale", "0.5,1"})), "--random-resized-crop");
  EXPECT_MENTIONS(error_of(base({"--rrc-ratio", "1,1"})), "--random-resized-crop");
}

// A number too small for its type is refused, not read as 0: 1e-400 seconds between checkpoints
// would otherwise switch them off, and a float learning rate of 1e-50 would be 0. The text forms
// that were accepted still are (a leading '+', ".5", "5.").
TEST_F(ConfigTest, NumbersOutOfTheirTypesRangeAreRefused) {
  for (const auto& [opt, value] :
       std::vector<std::pair<std::string, std::string>>{{"--checkpoint-secs", "1e-400"},
                                                        {"--timeout", "1e999"},
                                                        {"--lr", "1e-50"},
                                                        {"--momentum", "1e39"}}) {
    const std::string msg = error_of(base({opt, value}));
    EXPECT_MENTIONS(msg, opt);
    EXPECT_MENTIONS(msg, "'" + value + "'");
    EXPECT_MENTIONS(msg, "out of the range");
  }
  const std::string ini = write_ini("[checkpoint]\ncheckpoint-secs = 1e-400\n");
  const std::string msg = error_of(base({"--config", ini}));
  EXPECT_MENTIONS(msg, ini);
  EXPECT_MENTIONS(msg, "checkpoint-secs");
  EXPECT_MENTIONS(msg, "out of the range");
  EXPECT_FLOAT_EQ(parse(base({"--lr", "+0.5"})).config.lr, 0.5f);
  EXPECT_FLOAT_EQ(parse(base({"--lr", ".25"})).config.lr, 0.25f);
  EXPECT_DOUBLE_EQ(parse(base({"--timeout", "5."})).config.timeout, 5.0);
  EXPECT_DOUBLE_EQ(parse(base({"--checkpoint-secs", "1e-300"})).config.checkpoint_secs, 1e-300);
  EXPECT_MENTIONS(error_of(base({"--lr", "0.5x"})), "'0.5x'");
}

TEST_F(ConfigTest, SyntheticAndDataFilesAreExclusive) {
  for (const auto& files :
       std::vector<std::vector<std::string>>{{"--train-data", "t.h5"},
                                             {"--test-data", "e.h5"},
                                             {"--train-data", "t.h5", "--test-data", "e.h5"}}) {
    std::vector<std::string> args = {"--synthetic", "1x28x28:10", "--layer", "dense"};
    args.insert(args.end(), files.begin(), files.end());
    SCOPED_TRACE(files.back());
    const std::string msg = error_of(args);
    EXPECT_MENTIONS(msg, "--synthetic");
    EXPECT_MENTIONS(msg, "exclusive");
    EXPECT_MENTIONS(msg, files.back());  // the file that is set
  }
  // Both in one job file: the same error, naming the file that is set.
  const std::string both = write_ini(
      "[data]\nsynthetic = 1x28x28:10\ntest-data = e.h5\n[model]\nlayer = dense\n", "both.ini");
  EXPECT_MENTIONS(error_of({"--config", both}), "exclusive");
  EXPECT_MENTIONS(error_of({"--config", both}), "e.h5");
}

TEST_F(ConfigTest, CommandLineDataSourceReplacesTheJobFiles) {
  // A synthetic job file: --train-data (or --test-data) on the command line trains on files.
  const std::string synth =
      write_ini("[data]\nsynthetic = 3x224x224:1000\n[model]\nlayer = dense\n", "synth.ini");
  Config c = parse({"--config", synth, "--train-data", "t.h5"}).config;
  EXPECT_TRUE(c.synthetic.empty());
  EXPECT_EQ(c.train_data, "t.h5");
  EXPECT_MENTIONS(c.effective_ini, "synthetic = \n");
  // --test-data alone drops the synthetic data too, and then the training set is missing.
  EXPECT_MENTIONS(error_of({"--config", synth, "--test-data", "e.h5"}), "--train-data");
  // The old spelling still works: --synthetic "" switches it off explicitly.
  c = parse({"--config", synth, "--synthetic", "", "--train-data", "t.h5"}).config;
  EXPECT_TRUE(c.synthetic.empty());
  EXPECT_EQ(c.train_data, "t.h5");
  // A job file with data files: --synthetic on the command line replaces both.
  const std::string files = write_ini(
      "[data]\ntrain-data = t.h5\ntest-data = e.h5\n[model]\nlayer = dense\n", "files.ini");
  c = parse({"--config", files, "--synthetic", "1x28x28:10"}).config;
  EXPECT_EQ(c.synthetic, "1x28x28:10");
  EXPECT_TRUE(c.train_data.empty() && c.test_data.empty());
  c = parse({"--config", files, "--synthetic", "1x28x28:10", "--train-data", "", "--test-data", ""})
          .config;
  EXPECT_EQ(c.synthetic, "1x28x28:10");
  EXPECT_TRUE(c.train_data.empty() && c.test_data.empty());
  // An empty --synthetic on the command line keeps the job file's files.
  c = parse({"--config", files, "--synthetic", ""}).config;
  EXPECT_EQ(c.train_data, "t.h5");
  EXPECT_EQ(c.test_data, "e.h5");
  // The job file's other keys stay; both on the command line are still an error.
  EXPECT_MENTIONS(error_of({"--config", files, "--synthetic", "1x28x28:10", "--test-data", "x.h5"}),
                  "exclusive");
}

TEST_F(ConfigTest, NeitherDataFilesNorSynthetic) {
  // Neither: the training set is missing, and the message offers both ways.
  const std::string msg = error_of({"--layer", "dense"});
  EXPECT_MENTIONS(msg, "--train-data");
  EXPECT_MENTIONS(msg, "--synthetic");
}

TEST_F(ConfigTest, HelpDocumentsSyntheticData) {
  const ParseResult r = parse({"--help"});
  EXPECT_MENTIONS(r.help_text, "--synthetic ");
  EXPECT_MENTIONS(r.help_text, "CxHxW:classes");
  EXPECT_MENTIONS(r.help_text, "--synthetic-samples");
  EXPECT_MENTIONS(r.help_text, "(=12800)");
}

TEST(LearningRate, WarmupIsLinearToTheBaseRate) {
  Config c;
  c.lr = 0.4f;
  c.warmup_steps = 4;
  EXPECT_FLOAT_EQ(learning_rate(c, 0, 100), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(c, 1, 100), 0.2f);
  EXPECT_FLOAT_EQ(learning_rate(c, 3, 100), 0.4f);
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 100), 0.4f);  // constant after warm-up
  EXPECT_FLOAT_EQ(learning_rate(c, 99, 100), 0.4f);
}

TEST(LearningRate, StepDecay) {
  Config c;
  c.lr = 1.0f;
  c.lr_schedule = LrSchedule::step;
  c.lr_step_size = 10;
  c.lr_gamma = 0.5f;
  EXPECT_FLOAT_EQ(learning_rate(c, 0, 100), 1.0f);
  EXPECT_FLOAT_EQ(learning_rate(c, 9, 100), 1.0f);
  EXPECT_FLOAT_EQ(learning_rate(c, 10, 100), 0.5f);
  EXPECT_FLOAT_EQ(learning_rate(c, 25, 100), 0.25f);
  c.warmup_steps = 5;  // the schedule is measured from the end of warm-up
  EXPECT_FLOAT_EQ(learning_rate(c, 14, 100), 1.0f);
  EXPECT_FLOAT_EQ(learning_rate(c, 15, 100), 0.5f);
}

TEST(LearningRate, CosineEndpoints) {
  Config c;
  c.lr = 0.2f;
  c.lr_min = 0.02f;
  c.lr_schedule = LrSchedule::cosine;
  EXPECT_FLOAT_EQ(learning_rate(c, 0, 100), 0.2f);
  EXPECT_NEAR(learning_rate(c, 50, 100), 0.11f, 1e-6);  // half way: the mean of lr and lr_min
  EXPECT_NEAR(learning_rate(c, 100, 100), 0.02f, 1e-7);
  EXPECT_NEAR(learning_rate(c, 500, 100), 0.02f, 1e-7);  // clamped after the end
  float prev = 1.0f;
  for (int s = 0; s <= 100; ++s) {
    const float lr = learning_rate(c, s, 100);
    EXPECT_LE(lr, prev) << "step " << s;
    prev = lr;
  }
  c.warmup_steps = 10;  // after warm-up the cosine spans total − warmup steps
  EXPECT_FLOAT_EQ(learning_rate(c, 9, 100), 0.2f);
  EXPECT_FLOAT_EQ(learning_rate(c, 10, 100), 0.2f);
  EXPECT_NEAR(learning_rate(c, 55, 100), 0.11f, 1e-6);
  EXPECT_NEAR(learning_rate(c, 100, 100), 0.02f, 1e-7);
  c.warmup_steps = 0;
  c.lr_decay_steps = 20;  // explicit length
  EXPECT_NEAR(learning_rate(c, 10, 100), 0.11f, 1e-6);
  EXPECT_NEAR(learning_rate(c, 20, 100), 0.02f, 1e-7);
}

TEST(LearningRate, PolynomialAfterWarmup) {
  Config c;
  c.lr = 0.8f;
  c.lr_min = 0.0f;
  c.lr_schedule = LrSchedule::poly;
  c.warmup_steps = 10;
  EXPECT_FLOAT_EQ(learning_rate(c, 4, 110), 0.4f);   // warm-up: 0.8·5/10
  EXPECT_FLOAT_EQ(learning_rate(c, 10, 110), 0.8f);  // t = 0: the peak
  // Power 2 over T = 110 − 10 = 100 steps: lr·(1 − t/100)².
  EXPECT_NEAR(learning_rate(c, 35, 110), 0.8f * 0.75f * 0.75f, 1e-7);  // t = 25
  EXPECT_NEAR(learning_rate(c, 60, 110), 0.2f, 1e-7);                  // t = 50
  EXPECT_NEAR(learning_rate(c, 110, 110), 0.0f, 1e-7);
  EXPECT_NEAR(learning_rate(c, 900, 110), 0.0f, 1e-7);  // clamped after the end
  c.lr_power = 1.0f;  // linear decay, down to lr_min, over an explicit length
  c.lr_min = 0.2f;
  c.lr_decay_steps = 40;
  EXPECT_NEAR(learning_rate(c, 20, 110), 0.65f, 1e-6);  // t = 10: 0.2 + 0.6·0.75
  EXPECT_NEAR(learning_rate(c, 50, 110), 0.2f, 1e-7);
}

TEST_F(ConfigTest, LayerwiseOptimizersInEveryMode) {
  const Config c = parse(base({"--optimizer", "lars", "--mode", "sync", "--num-ps", "0",
                               "--lars-eta", "0.002", "--lars-eps", "1e-9"}))
                       .config;
  EXPECT_FLOAT_EQ(c.lars_eta, 0.002f);
  EXPECT_FLOAT_EQ(c.lars_epsilon, 1e-9f);
  // Sync through a ps, async, SSP, and a pipeline's ps: each ps holds whole tensors
  // (ps/sharding.hpp; a pipeline's of its stage), on either device.
  for (const std::vector<std::string>& mode :
       {std::vector<std::string>{"--mode", "sync", "--num-ps", "1"},
        std::vector<std::string>{"--num-ps", "2"},
        std::vector<std::string>{"--max-staleness", "2", "--device", "cuda"},
        std::vector<std::string>{"--num-ps", "2", "--pipeline-stages", "2", "--layer", "dense"}}) {
    std::vector<std::string> args = base({"--optimizer", "lamb"});
    args.insert(args.end(), mode.begin(), mode.end());
    EXPECT_EQ(parse(args).config.optimizer, OptimizerKind::lamb) << mode[1];
  }
  EXPECT_EQ(parse(base({"--optimizer", "lars", "--pipeline-stages", "2", "--layer", "dense",
                        "--mode", "sync", "--num-ps", "0"}))
                .config.pipeline_stages,
            2);
  EXPECT_EQ(
      parse(base({"--optimizer", "lamb", "--mode", "sync", "--num-ps", "0", "--device", "cuda"}))
          .config.device,
      DeviceOption::cuda);
  EXPECT_MENTIONS(
      error_of(base({"--optimizer", "lars", "--mode", "sync", "--num-ps", "0", "--lars-eta", "0"})),
      "--lars-eta");
  EXPECT_MENTIONS(error_of(base({"--lr-schedule", "poly", "--lr-power", "-1"})), "--lr-power");
  EXPECT_MENTIONS(error_of(base({"--lr-schedule", "poly", "--lr", "0.1", "--lr-min", "0.2"})),
                  "--lr-min");
  EXPECT_EQ(c.optimizer, OptimizerKind::lars);
  EXPECT_EQ(
      parse(base({"--optimizer", "lamb", "--mode", "sync", "--num-ps", "0"})).config.optimizer,
      OptimizerKind::lamb);
}

}  // namespace
}  // namespace dtrain
