// dtrain/core/files.cpp — atomic replacement of output files, and new files that never replace
// one (core/files.hpp).
#include "dtrain/core/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>  // renameat2
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

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

/// Why an existing `<path>.tmp` stops a writer of `path`, for the error message.
std::string temporary_file_note(const std::string& path) {
  return ": the temporary file of an earlier dtrain writing '" + path +
         "' that did not finish, or of one writing it now; dtrain never overwrites a file "
         "(remove it once no dtrain writes '" +
         path + "')";
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
    if (!out) {
      const std::string reason = errno_reason();
      if (out.is_open()) {  // ours: a part written (a full disk) takes no space once it failed
        out.close();
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
      }
      throw LibraryError(format_error("cannot write '" + tmp + "'" + reason, __FILE__, __LINE__));
    }
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

std::string first_free_path(const std::string& dir, const std::string& stem,
                            const std::string& ext) {
  std::string path = (std::filesystem::path(dir) / (stem + ext)).string();
  for (int k = 2; path_taken(path); ++k)
    path = (std::filesystem::path(dir) / (stem + "-" + std::to_string(k) + ext)).string();
  return path;
}

bool path_taken(const std::string& path) {
  std::error_code ec;  // symlink_status: a link counts, even one that leads nowhere
  return std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found;
}

void require_new_file(const std::string& path, const std::string& option) {
  namespace fs = std::filesystem;
  DT_REQUIRE(!path_taken(path), "option " + option + ": '" + path +
                                    "' already exists; dtrain never overwrites a file "
                                    "(remove it or choose another " +
                                    option + ")");
  const std::string tmp = path + ".tmp";
  DT_REQUIRE(!path_taken(tmp),
             "option " + option + ": '" + tmp + "' already exists" + temporary_file_note(path));
  const fs::path dir =
      fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  DT_REQUIRE(fs::is_directory(dir) && ::access(dir.c_str(), W_OK | X_OK) == 0,
             "option " + option + ": '" + path + "': its directory '" + dir.string() +
                 "' does not exist or is not writable");
}

namespace {

/// Whether link() failed because the file system has no hard links (vfat/exFAT, many SMB/CIFS
/// and FUSE mounts: EPERM, EOPNOTSUPP, ENOSYS), not because of the paths.
bool links_unsupported(int err) { return err == EPERM || err == EOPNOTSUPP || err == ENOSYS; }

/// Renames `tmp` to `path` unless `path` exists: renameat2(RENAME_NOREPLACE), or where the file
/// system does not take that flag (EINVAL), a rename after a check that `path` is free (a writer
/// racing for the same name in between would be overwritten: no worse than such a file system
/// allows). Returns 0 or the errno.
int rename_no_replace(const std::string& tmp, const std::string& path) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return errno;
  if (path_taken(path)) return EEXIST;
  return ::rename(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
}

}  // namespace

void publish_new_file(const std::string& tmp, const std::string& path) {
  sync_or_remove(tmp);
  // A hard link fails rather than replace a file (EEXIST).
  int err = ::link(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
  if (err != 0 && links_unsupported(err)) err = rename_no_replace(tmp, path);
  std::error_code ignored;
  std::filesystem::remove(tmp, ignored);  // after a rename: nothing there
  if (err == EEXIST)
    throw InputError("'" + path + "' already exists; dtrain never overwrites a file (nothing " +
                     "was written there; remove it or choose another name)");
  if (err != 0)
    throw LibraryError("cannot publish '" + tmp + "' as '" + path + "': " + std::strerror(err) +
                       " (nothing was overwritten)");
}

void claim_new_file(const std::string& path, const std::string& final_path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::close(fd);
    return;
  }
  if (errno == EEXIST)
    throw InputError("'" + path + "' already exists" + temporary_file_note(final_path));
  throw LibraryError("cannot create '" + path + "'" + errno_reason());
}

void create_new_file(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  // Outside the try: a file already there is not this writer's to remove.
  claim_new_file(tmp, path);
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

bool flock_unsupported(int err) { return err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP; }

FileLock::FileLock(const std::string& path, const std::string& note) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  created_ = fd_ >= 0;
  if (fd_ < 0 && errno == EEXIST) fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw LibraryError("cannot open the lock file '" + path + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) {
    state_ = State::held;
    // The note for whoever finds the lock taken; a failed write only leaves it unnamed.
    if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, note.data(), note.size(), 0);
    return;
  }
  const int err = errno;
  const bool busy = err == EWOULDBLOCK;
  if (busy) {
    state_ = State::busy;
    char buf[512];
    const ssize_t n = ::pread(fd_, buf, sizeof buf, 0);
    if (n > 0) holder_.assign(buf, static_cast<std::size_t>(n));
  }
  // Not held, and no one holds it: a file made for nothing goes again.
  if (created_ && !busy) ::unlink(path.c_str());
  ::close(fd_);
  fd_ = -1;
  if (!busy && !flock_unsupported(err))
    throw LibraryError("cannot lock '" + path + "': flock: " + std::strerror(err));
  if (!busy) error_ = err;  // State::unsupported
}

FileLock::FileLock(FileLock&& other) noexcept
    : path_(std::move(other.path_)), created_(other.created_), fd_(std::exchange(other.fd_, -1)),
      state_(other.state_), holder_(std::move(other.holder_)), error_(other.error_) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    created_ = other.created_;
    fd_ = std::exchange(other.fd_, -1);
    state_ = other.state_;
    holder_ = std::move(other.holder_);
    error_ = other.error_;
  }
  return *this;
}

void FileLock::discard() noexcept {
  if (fd_ < 0) return;
  if (created_) ::unlink(path_.c_str());  // while still held: no one else has it meanwhile
  ::close(fd_);
  fd_ = -1;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

std::optional<std::string> lock_holder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> holder;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    char buf[512];
    const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
    holder.emplace(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  }
  ::close(fd);  // lets go of the shared lock where it was taken
  return holder;
}

}  // namespace dtrain
