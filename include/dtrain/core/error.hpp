// dtrain/core/error.hpp — typed exceptions and the check macros used by every module.
//
// Every error message names what went wrong, where (file:line), and — once main() has called
// set_error_context() — the MPI rank, role and host, in the style of LBANN's "error on rank R".
// Callers throw; only main() catches, prints once per rank and calls MPI_Abort so that no peer
// hangs.
#pragma once

#include <stdexcept>
#include <string>

namespace dtrain {

/// Base of every dtrain exception. what() is the full, user-facing message.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Bad user input: a job file, option, dataset or checkpoint that does not meet expectations.
/// Exit code 2 (see exit_code()).
class InputError : public Error {
 public:
  explicit InputError(const std::string& msg) : Error(msg) {}
};

/// A failed library call (MPI, HDF5, oneDNN, CUDA, cuDNN, cuBLAS, NCCL). Exit code 3.
class LibraryError : public Error {
 public:
  explicit LibraryError(const std::string& msg) : Error(msg) {}
};

/// Training cannot continue (non-finite loss, watchdog timeout, peer died). Exit code 4.
class RuntimeFault : public Error {
 public:
  explicit RuntimeFault(const std::string& msg) : Error(msg) {}
};

/// The one error family of every deadline in dtrain (MPI waits, the gradient buckets, the batch
/// reader, set-up agreement): what() is "<prefix>timed out after S s waiting in: OPERATION (CAUSE;
/// see --timeout)", where OPERATION names the wait and its peers (e.g. "worker 1 pushing gradients
/// with ps 0 (rank 3)"). A RuntimeFault: exit code 4.
class TimeoutError : public RuntimeFault {
 public:
  /// seconds: the deadline that passed; operation: what was waited for, naming the peer(s);
  /// cause: the likely reason, for the reader.
  TimeoutError(double seconds, const std::string& operation,
               const std::string& cause = "a peer rank is stuck or died");
  [[nodiscard]] double seconds() const noexcept { return seconds_; }
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 private:
  double seconds_;
  std::string operation_;
};

/// Process exit codes, documented in the README ("What happens when things go wrong").
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,  ///< unexpected exception
  kExitInput = 2,     ///< InputError
  kExitLibrary = 3,   ///< LibraryError
  kExitFault = 4,     ///< RuntimeFault
  kExitSignalled =
      75,  ///< stopped by SIGTERM/SIGUSR1/SIGINT after a checkpoint (EX_TEMPFAIL: requeue)
};

/// Maps an exception to its exit code (InputError → 2, LibraryError → 3, RuntimeFault → 4, else 1).
int exit_code(const std::exception& e) noexcept;

/// Sets the "rank R (role, host)" prefix that error_prefix() adds to messages. Thread-safe to read.
void set_error_context(const std::string& context);

/// Returns "[rank R role host] " or "" before set_error_context() was called.
std::string error_prefix();

/// Formats "<prefix>what (file:line)". Used by the DT_* macros.
std::string format_error(const std::string& what, const char* file, int line);
/// `msg` without the error_prefix() it starts with (unchanged otherwise): for an error rethrown
/// with more context, so that the message names the rank once.
std::string without_error_prefix(const std::string& msg);
/// `msg` with the rank tag in front: unchanged when it starts with one already ("[rank "), else
/// error_prefix() + msg (msg itself before set_error_context()). log_error() prints every message
/// through it, so each error reaching main() names its rank whether or not its throw site did.
std::string with_error_prefix(const std::string& msg);

}  // namespace dtrain

/// Throws dtrain::InputError with a formatted message when cond is false.
#define DT_REQUIRE(cond, msg)                                                                   \
  do {                                                                                          \
    if (!(cond)) throw ::dtrain::InputError(::dtrain::format_error((msg), __FILE__, __LINE__)); \
  } while (0)

/// Throws dtrain::Error for a broken internal invariant.
#define DT_ASSERT(cond, msg)                                                              \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::dtrain::Error(                                                              \
          ::dtrain::format_error(std::string("internal: ") + (msg), __FILE__, __LINE__)); \
  } while (0)
