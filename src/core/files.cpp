// dtrain/core/files.cpp — atomic replacement of output files, and new files that never replace
// one (core/files.hpp).
#include "dtrain/core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

/// fsync_path(tmp), the temporary file a writer is about to publish; removes it when that fails.
void sync_or_remove(const std::string& tmp) {
  try {
    fsync_path(tmp);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

}  // namespace

void replace_file(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::rename(from, to, ec);
  if (ec)
    throw LibraryError(format_error("cannot rename '" + from + "' to '" + to + "': " + ec.message(),
                                    __FILE__, __LINE__));
}

std::string errno_reason() {
  return errno != 0 ? std::string(": ") + std::strerror(errno) : std::string();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out)
      throw LibraryError(
          format_error("cannot write '" + tmp + "'" + errno_reason(), __FILE__, __LINE__));
  }
  // On the file to rename, not only the directory: after a crash XFS (common on HPC nodes) can
  // leave a renamed, never-synced file empty where ext4's rename heuristics would not.
  sync_or_remove(tmp);
  replace_file(tmp, path);
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw LibraryError("cannot open '" + path + "' to fsync it" + errno_reason());
  struct stat st {};
  const bool directory = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc == 0) return;
  // A directory's fsync makes the renames in it durable. Where the file system cannot sync a
  // directory (EINVAL: some FUSE and SMB mounts) they are as durable as it makes them: no reason
  // to end a run whose file is complete, synced and in place.
  if (directory && (err == EINVAL || err == ENOTSUP || err == EOPNOTSUPP)) return;
  throw LibraryError("fsync of '" + path + "' failed: " + std::strerror(err));
}

void require_new_file(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  DT_REQUIRE(!fs::exists(path) && !fs::is_symlink(path),
             "option " + option + ": '" + path +
                 "' already exists; dtrain never overwrites a file "
                 "(remove it or choose another " +
                 option + ")");
  const fs::path dir =
      fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  DT_REQUIRE(fs::is_directory(dir) && ::access(dir.c_str(), W_OK | X_OK) == 0,
             "option " + option + ": '" + path + "': its directory '" + dir.string() +
                 "' does not exist or is not writable");
}

void publish_new_file(const std::string& tmp, const std::string& path) {
  sync_or_remove(tmp);
  std::error_code ec;
  std::filesystem::create_hard_link(tmp, path, ec);  // EEXIST rather than replace a file
  std::error_code ignored;
  std::filesystem::remove(tmp, ignored);
  if (ec)
    throw LibraryError("cannot link '" + tmp + "' to '" + path + "': " + ec.message() +
                       " (nothing was overwritten)");
}

void create_new_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  try {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw LibraryError("cannot create '" + tmp + "'" + errno_reason());
    write(out);
    out.flush();
    if (!out) throw LibraryError("writing '" + tmp + "' failed (disk full?)" + errno_reason());
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  publish_new_file(tmp, path);
}

}  // namespace dtrain
