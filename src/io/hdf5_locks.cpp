// src/io/hdf5_locks.cpp — HDF5's file locks where the file system has them (hdf5_locks.hpp).
#include "hdf5_locks.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "dtrain/core/files.hpp"
#include "dtrain/core/log.hpp"
#include "input_fail.hpp"

namespace dtrain::detail {
namespace {

/// The errno of flock(fd, op | LOCK_NB) (the lock released again), 0 when it was granted.
int try_lock(int fd, int op) {
  if (::flock(fd, op | LOCK_NB) == 0) {
    ::flock(fd, LOCK_UN);
    return 0;
  }
  return errno;
}

}  // namespace

H5PropList file_access(const std::string& path, bool create) {
  const int fd = create ? ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)
                        : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return H5PropList{};
  const int err = try_lock(fd, create ? LOCK_EX : LOCK_SH);
  ::close(fd);
  if (err == 0) return H5PropList{};
  if (err == EWOULDBLOCK)
    DT_INPUT_FAIL(path + ": another process holds a lock on this HDF5 file (a program still " +
                  (create ? "using" : "writing") + " it?); try again when it has finished");
  if (!flock_unsupported(err)) return H5PropList{};  // HDF5's own attempt reports it
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    log_warn("the file system of " + path + " takes no file locks (flock: " + std::strerror(err) +
             "): dtrain opens its HDF5 files there without them, as HDF5_USE_FILE_LOCKING=FALSE "
             "would; let no other program write a file while dtrain reads it");
  H5PropList fapl(DT_CHECK_HDF5(H5Pcreate(H5P_FILE_ACCESS), "a file access property list"));
  DT_CHECK_HDF5(H5Pset_file_locking(fapl.get(), false, true), "file locking of " + path);
  return fapl;
}

}  // namespace dtrain::detail
