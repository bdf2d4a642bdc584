// tests/preload/no_space.cpp — an LD_PRELOAD library for tests/cli/test_faults_disk_full.sh that
// makes a file system run out of space for some files, as a full disk or an exhausted quota does:
// a write (write, writev, pwrite) to a file whose path contains $DTRAIN_TEST_NO_SPACE_MATCH fails
// with ENOSPC ("No space left on device") once it would take the file past
// $DTRAIN_TEST_NO_SPACE_BYTES bytes (default 0).
// Every other file, and every process without the variable, writes as usual.
#include <dlfcn.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

/// True when fd's file is one that has no space for [offset, offset + count).
bool no_space(int fd, off_t offset, size_t count) {
  const char* match = std::getenv("DTRAIN_TEST_NO_SPACE_MATCH");
  if (match == nullptr || *match == '\0' || count == 0) return false;
  char link[64];
  char path[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  if (std::strstr(path, match) == nullptr) return false;
  const char* limit = std::getenv("DTRAIN_TEST_NO_SPACE_BYTES");
  const long long room = limit != nullptr ? std::atoll(limit) : 0;
  return static_cast<long long>(offset) + static_cast<long long>(count) > room;
}

template <typename F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" ssize_t write(int fd, const void* buf, size_t count) {
  using Write = ssize_t (*)(int, const void*, size_t);
  static const auto next = real<Write>("write");
  if (no_space(fd, lseek(fd, 0, SEEK_CUR), count)) {
    errno = ENOSPC;
    return -1;
  }
  return next(fd, buf, count);
}

extern "C" ssize_t pwrite(int fd, const void* buf, size_t count, off_t offset) {
  using Pwrite = ssize_t (*)(int, const void*, size_t, off_t);
  static const auto next = real<Pwrite>("pwrite");
  if (no_space(fd, offset, count)) {
    errno = ENOSPC;
    return -1;
  }
  return next(fd, buf, count, offset);
}

extern "C" ssize_t pwrite64(int fd, const void* buf, size_t count, off_t offset) {
  using Pwrite = ssize_t (*)(int, const void*, size_t, off_t);
  static const auto next = real<Pwrite>("pwrite64");
  if (no_space(fd, offset, count)) {
    errno = ENOSPC;
    return -1;
  }
  return next(fd, buf, count, offset);
}

// libstdc++'s filebuf writes a large block and its buffer with one writev.
extern "C" ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  using Writev = ssize_t (*)(int, const struct iovec*, int);
  static const auto next = real<Writev>("writev");
  size_t count = 0;
  for (int i = 0; i < iovcnt; ++i) count += iov[i].iov_len;
  if (no_space(fd, lseek(fd, 0, SEEK_CUR), count)) {
    errno = ENOSPC;
    return -1;
  }
  return next(fd, iov, iovcnt);
}
