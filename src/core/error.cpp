// dtrain/core/error.cpp — error context and formatting.
#include "dtrain/core/error.hpp"

#include <mutex>
#include <sstream>

namespace dtrain {
namespace {
std::mutex g_mu;
std::string g_context;

std::string timeout_message(double seconds, const std::string& operation,
                            const std::string& cause) {
  std::ostringstream os;
  os << error_prefix() << "timed out after " << seconds << " s waiting in: " << operation << " ("
     << cause << "; see --timeout)";
  return os.str();
}
}  // namespace

TimeoutError::TimeoutError(double seconds, const std::string& operation, const std::string& cause)
    : RuntimeFault(timeout_message(seconds, operation, cause)), seconds_(seconds),
      operation_(operation) {}

int exit_code(const std::exception& e) noexcept {
  if (dynamic_cast<const InputError*>(&e)) return kExitInput;
  if (dynamic_cast<const LibraryError*>(&e)) return kExitLibrary;
  if (dynamic_cast<const RuntimeFault*>(&e)) return kExitFault;
  return kExitInternal;
}

void set_error_context(const std::string& context) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_context = context;
}

std::string error_prefix() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_context.empty() ? std::string() : "[" + g_context + "] ";
}

std::string format_error(const std::string& what, const char* file, int line) {
  return error_prefix() + what + " (" + file + ":" + std::to_string(line) + ")";
}

std::string without_error_prefix(const std::string& msg) {
  const std::string prefix = error_prefix();
  return !prefix.empty() && msg.rfind(prefix, 0) == 0 ? msg.substr(prefix.size()) : msg;
}

std::string with_error_prefix(const std::string& msg) {
  return msg.rfind("[rank ", 0) == 0 ? msg : error_prefix() + msg;
}

}  // namespace dtrain
