// dtrain — the command-line entry point: MPI start-up, options, the subcommand (`train`, the
// default, `predict`, `export` or `plan`), one rank's role, error reporting.
// Errors in set-up are agreed on by every rank (one message, same exit code, clean MPI_Finalize);
// an error during training is printed by the rank that hit it, which then calls MPI_Abort so that
// no peer is left waiting. Every message starts with the rank tag ("[rank R ...]", log_error()).
#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/fault.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/plan/plan_command.hpp"
#include "dtrain/train/predict.hpp"
#include "dtrain/train/pretrained.hpp"
#include "dtrain/train/signals.hpp"
#include "dtrain/train/trainer.hpp"

int main(int argc, char** argv) {
  // Before MPI_Init starts its threads: every thread inherits the blocked stop signals.
  try {
    dtrain::route_stop_signals();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain: error: %s\n", e.what());
    return 1;
  }
  const int rank = dtrain::init_mpi(&argc, &argv);
  // The rank tag of every error until the job knows this rank's role (train/trainer.cpp,
  // train/predict.cpp): option and job-file errors name their rank too.
  dtrain::set_error_context("rank " + std::to_string(rank));
  int code = 0;
  try {
    dtrain::ParseResult parsed;
    dtrain::all_or_nothing(MPI_COMM_WORLD, [&] {
      dtrain::init_fault_injection(rank);  // DTRAIN_FAULT (test-only), read here and nowhere else
      parsed = dtrain::parse_config(argc, argv);
    });
    if (parsed.help) {
      if (rank == 0) std::cout << parsed.help_text;
    } else {
      using dtrain::Subcommand;
      const Subcommand command = parsed.config.command;
      code = command == Subcommand::predict          ? dtrain::run_predict(parsed.config)
             : command == Subcommand::export_tensors ? dtrain::run_export(parsed.config)
             : command == Subcommand::plan           ? dtrain::run_plan(parsed.config)
                                                     : dtrain::run_training(parsed.config);
    }
  } catch (const dtrain::ReportedError& e) {
    code = e.code();
  } catch (const std::exception& e) {
    dtrain::log_error(e.what());
    MPI_Abort(MPI_COMM_WORLD, dtrain::exit_code(e));
    return dtrain::exit_code(e);
  }
  MPI_Finalize();
  return code;
}
