// tests/preload/odd_filesystem.cpp — an LD_PRELOAD library for tests/cli/test_odd_filesystems.sh
// that makes every file system look like the ones HPC sites mount:
//   flock()            fails with ENOLCK ("No locks available"), as on NFS without lockd — HDF5's
//                      file locking, which ignores only ENOSYS and only where built to, then
//                      refuses every open;
//   fsync(directory)   fails with EINVAL, as on file systems that cannot sync a directory (some
//                      FUSE and SMB mounts); fsync of a file works as usual;
//   link(), linkat()   fail with EPERM, as on file systems without hard links (vfat/exFAT, many
//                      SMB/CIFS and FUSE mounts).
#include <dlfcn.h>
#include <sys/stat.h>

#include <cerrno>

extern "C" int flock(int /*fd*/, int /*operation*/) {
  errno = ENOLCK;
  return -1;
}

extern "C" int fsync(int fd) {
  struct stat st {};
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EINVAL;
    return -1;
  }
  using Fsync = int (*)(int);
  static const auto real = reinterpret_cast<Fsync>(dlsym(RTLD_NEXT, "fsync"));
  return real(fd);
}

extern "C" int link(const char* /*from*/, const char* /*to*/) {
  errno = EPERM;
  return -1;
}

extern "C" int linkat(int /*fromfd*/, const char* /*from*/, int /*tofd*/, const char* /*to*/,
                      int /*flags*/) {
  errno = EPERM;
  return -1;
}
