// dtrain/core/files.hpp — the run directory's outputs written whole or not at all: a file is
// written beside its final name (<name>.tmp) and renamed over it (rename(2) is atomic within a
// file system, POSIX), so a reader — or a job killed half-way — sees the old file or the new
// one, never a torn one. Used for results.json, timeline.json and checkpoints (io/checkpoint.hpp,
// which also fsyncs).
//
// What a user names with --out (`dtrain predict`, `dtrain export`) is never replaced: it is
// written beside its name (<name>.tmp), fsynced, and then hard-linked to its name — link(2) fails
// with EEXIST instead of replacing a file that appeared meanwhile — so it appears complete or not
// at all, and only where nothing was.
//
// One run at a time writes a run directory: its chief holds a FileLock (flock(2)) on a file in it
// for the run's lifetime; the kernel releases it when the process ends, however it ends.
#pragma once
#include <functional>
#include <optional>
#include <ostream>
#include <string>

namespace dtrain {

/// Renames `from` over `to` (replacing it atomically). Throws LibraryError (a failed system
/// call: exit code 3) naming both paths and the system's reason when the rename fails (e.g. they
/// lie on different file systems).
void replace_file(const std::string& from, const std::string& to);

/// Writes `text` to `path` whole: into `path`.tmp, fsync_path() of it, then replace_file() over
/// `path`. Throws LibraryError naming the file when it cannot be written or synced (a full disk, a
/// missing directory); `path` is then left as it was, and `path`.tmp removed.
void write_file_atomically(const std::string& path, const std::string& text);

/// ": <strerror(errno)>" when errno is set, else "": the system's reason after a failed stream
/// operation (set errno = 0 before it).
std::string errno_reason();

/// fsync(2) of the file or directory `path`. Throws LibraryError naming it and the system's reason
/// when it cannot be opened or the fsync fails — except a directory whose file system does not sync
/// directories (EINVAL, ENOTSUP: some FUSE and SMB mounts), which returns.
void fsync_path(const std::string& path);

/// Whether anything is at `path`: a file, a folder, or a link (even a dangling one, which
/// std::filesystem::exists does not see).
bool path_taken(const std::string& path);

/// The first of `dir`/`stem``ext`, `dir`/`stem`-2`ext`, `dir`/`stem`-3`ext`, ... that is not
/// path_taken(): a new file beside earlier ones of the same kind, none replaced.
std::string first_free_path(const std::string& dir, const std::string& stem,
                            const std::string& ext);

/// Checks that `path` can be created without replacing anything: neither it nor its temporary file
/// `path`.tmp exists (nor is a dangling link) and its directory exists and takes new files. Throws
/// InputError "option <option>: '<path>' already exists; dtrain never overwrites a file ..." or
/// "...: its directory '<dir>' does not exist or is not writable".
void require_new_file(const std::string& path, const std::string& option);

/// Creates `path` as a new empty file for `final_path`'s writer, never opening one that exists
/// (O_CREAT | O_EXCL: not a file, nor the target of a link). Throws InputError when `path` exists
/// (naming it and `final_path`: an unfinished earlier writer's temporary file, or a concurrent
/// one's), LibraryError naming it and the system's reason when it cannot be created.
void claim_new_file(const std::string& path, const std::string& final_path);

/// Makes the complete file `tmp` appear as `path`, never over a file: fsync_path(tmp), a hard
/// link `tmp` → `path` (fails rather than replace a file) — on a file system without hard links
/// (vfat/exFAT, many SMB and FUSE mounts) a rename with RENAME_NOREPLACE, or where that flag is
/// not taken either, a rename after checking that `path` is free — and `tmp` removed whatever
/// happens. Throws InputError naming `path` when it exists (nothing was written there),
/// LibraryError naming both paths and the system's reason for any other failure.
void publish_new_file(const std::string& tmp, const std::string& path);

/// Creates `path` from the bytes `write` puts into the stream it is given (binary), whole or not
/// at all: into `path`.tmp (claim_new_file(): an existing one is an InputError, left as it is),
/// then publish_new_file(). Throws LibraryError when the stream fails (a full disk) and passes on
/// what `write` throws; the temporary file is removed then.
void create_new_file(const std::string& path, const std::function<void(std::ostream&)>& write);

/// Whether flock(2) failing with `err` means that the file system takes no locks: ENOLCK (NFS
/// without lockd), ENOSYS or EOPNOTSUPP (Lustre without `-o flock`, some GPFS mounts).
bool flock_unsupported(int err);

/// An exclusive advisory lock (flock LOCK_EX, never waiting) on the file `path`, created when
/// missing and not removed when released (a removed lock file would let two processes lock two
/// files; discard() is the exception), held until this object is destroyed or the process ends.
/// Move-only.
class FileLock {
 public:
  enum class State {
    held,         ///< this object holds the lock; `note` is the file's content
    busy,         ///< another process holds it; holder() is its note
    unsupported,  ///< the file system takes no locks (flock_unsupported()): nothing is held
  };
  /// Tries once. Throws LibraryError naming `path` and the system's reason when the file cannot
  /// be opened or created, or flock fails otherwise.
  FileLock(const std::string& path, const std::string& note);
  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

  [[nodiscard]] State state() const { return state_; }
  /// busy: the holder's note ("" when it has not written one yet); else "".
  [[nodiscard]] const std::string& holder() const { return holder_; }
  /// unsupported: flock's errno; else 0.
  [[nodiscard]] int error() const { return error_; }
  /// Lets go of the lock, removing the lock file first when this object created it (a set-up
  /// that failed leaves nothing behind). Idempotent; never throws.
  void discard() noexcept;

 private:
  std::string path_;
  bool created_ = false;  ///< this object made the file
  int fd_ = -1;
  State state_ = State::unsupported;
  std::string holder_;
  int error_ = 0;
};

/// Whether another process holds a FileLock on `path`, found without holding it: a shared flock
/// tried once (never waiting) and let go at once; nothing is created or written. Returns the
/// holder's note ("" when it has written none yet), or nullopt where no one holds it, the file is
/// absent or cannot be opened for reading, or the file system takes no locks. Never throws.
std::optional<std::string> lock_holder(const std::string& path);

}  // namespace dtrain
