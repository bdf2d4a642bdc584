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
#pragma once
#include <functional>
#include <ostream>
#include <string>

namespace dtrain {

/// Renames `from` over `to` (replacing it atomically). Throws LibraryError (a failed system
/// call: exit code 3) naming both paths and the system's reason when the rename fails (e.g. they
/// lie on different file systems).
void replace_file(const std::string& from, const std::string& to);

/// Writes `text` to `path` whole: into `path`.tmp, fsync_path() of it, then replace_file() over
/// `path`. Throws LibraryError naming the file when it cannot be written or synced (a full disk, a
/// missing directory); `path` is then left as it was.
void write_file_atomically(const std::string& path, const std::string& text);

/// ": <strerror(errno)>" when errno is set, else "": the system's reason after a failed stream
/// operation (set errno = 0 before it).
std::string errno_reason();

/// fsync(2) of the file or directory `path`. Throws LibraryError naming it and the system's reason
/// when it cannot be opened or the fsync fails — except a directory whose file system does not sync
/// directories (EINVAL, ENOTSUP: some FUSE and SMB mounts), which returns.
void fsync_path(const std::string& path);

/// Checks that `path` can be created without replacing anything: it does not exist (nor is a
/// dangling link) and its directory exists and takes new files. Throws InputError
/// "option <option>: '<path>' already exists; dtrain never overwrites a file ..." or "...: its
/// directory '<dir>' does not exist or is not writable".
void require_new_file(const std::string& path, const std::string& option);

/// Makes the complete file `tmp` appear as `path`: fsync_path(tmp), a hard link `tmp` → `path`
/// (fails rather than replace a file), `tmp` removed whatever happens. Throws LibraryError naming
/// both paths when the link fails (`path` exists: nothing was overwritten).
void publish_new_file(const std::string& tmp, const std::string& path);

/// Creates `path` from the bytes `write` puts into the stream it is given (binary), whole or not
/// at all: into `path`.tmp, then publish_new_file(). Throws LibraryError when the stream fails
/// (a full disk) and passes on what `write` throws; the temporary file is removed then.
void create_new_file(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace dtrain
