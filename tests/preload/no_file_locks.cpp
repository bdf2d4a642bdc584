// tests/preload/no_file_locks.cpp — an LD_PRELOAD library for tests/cli/test_file_locks.sh: every
// flock() fails with ENOLCK ("No locks available"), as on an NFS mount without lockd, so that
// HDF5's file locking (which ignores only ENOSYS, and only where built to) fails as it does there.
#include <cerrno>

extern "C" int flock(int /*fd*/, int /*operation*/) {
  errno = ENOLCK;
  return -1;
}
