// dtrain/core/fault.cpp — DTRAIN_FAULT parsing and the one-shot trigger (test-only; see fault.hpp).
#include "dtrain/core/fault.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {
namespace {
FaultSpec g_spec;
int g_rank = 0;
bool g_init = false;
std::atomic<bool> g_fired{false};

std::int64_t to_int(const std::string& s, const std::string& value) {
  std::size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (s.empty() || used != s.size() || v < 0)
    throw InputError("environment DTRAIN_FAULT='" + value +
                     "': expected KIND[@STEP][:RANK] with non-negative integers");
  return v;
}
}  // namespace

FaultSpec parse_fault_spec(const std::string& value) {
  FaultSpec f;
  if (value.empty()) return f;
  std::string kind = value, step, rank;
  if (const auto colon = kind.find(':'); colon != std::string::npos) {
    rank = kind.substr(colon + 1);
    kind = kind.substr(0, colon);
    f.rank = static_cast<int>(to_int(rank, value));
  }
  if (const auto at = kind.find('@'); at != std::string::npos) {
    step = kind.substr(at + 1);
    kind = kind.substr(0, at);
    f.step = to_int(step, value);
  }
  if (kind.rfind("slow*", 0) == 0) {
    std::size_t used = 0;
    try {
      f.factor = std::stod(kind.substr(5), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != kind.size() - 5 || !(f.factor >= 1))
      throw InputError("environment DTRAIN_FAULT='" + value +
                       "': expected slow*F[:RANK] with a factor F >= 1");
    f.kind = FaultKind::slow;
  } else if (kind.rfind("slow+", 0) == 0) {
    f.delay_s = static_cast<double>(to_int(kind.substr(5), value)) / 1000.0;
    f.kind = FaultKind::slow;
  } else if (kind == "kill-in-checkpoint-write") f.kind = FaultKind::kill_in_checkpoint_write;
  else if (kind == "nan-gradient") f.kind = FaultKind::nan_gradient;
  else if (kind == "hang") f.kind = FaultKind::hang;
  else if (kind == "hang-reader") f.kind = FaultKind::hang_reader;
  else if (kind == "hang-ps-snapshot") f.kind = FaultKind::hang_ps_snapshot;
  else if (kind == "slow-eval") f.kind = FaultKind::slow_eval;
  else if (kind == "no-shared-memory") f.kind = FaultKind::no_shared_memory;
  else
    throw InputError(
        "environment DTRAIN_FAULT='" + value + "': unknown fault '" + kind +
        "' (kill-in-checkpoint-write | nan-gradient | hang | hang-reader | hang-ps-snapshot | "
        "slow*F | slow+MS | slow-eval | no-shared-memory)");
  return f;
}

void init_fault_injection(int world_rank) {
  if (g_init) return;
  g_init = true;
  g_rank = world_rank;
  const char* v = std::getenv("DTRAIN_FAULT");
  g_spec = parse_fault_spec(v ? v : "");
}

bool fault_active(FaultKind kind) {
  return kind != FaultKind::none && g_spec.kind == kind &&
         (g_spec.rank < 0 || g_spec.rank == g_rank);
}

double fault_slowdown() { return fault_active(FaultKind::slow) ? g_spec.factor : 1; }

double fault_delay() { return fault_active(FaultKind::slow) ? g_spec.delay_s : 0; }

bool fault_fires(FaultKind kind, std::int64_t global_step) {
  if (!fault_active(kind) || global_step < g_spec.step) return false;
  return !g_fired.exchange(true);
}

void hang_forever(const std::string& what) {
  log_warn("DTRAIN_FAULT: " + what + " hangs forever");
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace dtrain
