// tests/common/file_size_limit.hpp — a disk that fills up part-way, for the tests of write
// failures: while a FileSizeLimit lives, this process's files cannot grow past `bytes` (a write
// past it fails with EFBIG, "File too large"; SIGXFSZ is ignored so that it does not end the
// process). The old limit and signal handler come back when it goes.
#pragma once

#include <sys/resource.h>

#include <csignal>

namespace dtrain::testing {

class FileSizeLimit {
 public:
  /// Lowers RLIMIT_FSIZE's soft limit to `bytes`; set() says whether that worked.
  explicit FileSizeLimit(rlim_t bytes) : handler_(std::signal(SIGXFSZ, SIG_IGN)) {
    if (::getrlimit(RLIMIT_FSIZE, &old_) != 0) return;
    rlimit small = old_;
    small.rlim_cur = bytes;
    set_ = ::setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    if (set_) ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  /// Whether the limit is in force (getrlimit and setrlimit succeeded).
  [[nodiscard]] bool set() const { return set_; }

 private:
  rlimit old_{};
  void (*handler_)(int);
  bool set_ = false;
};

}  // namespace dtrain::testing
