// dtrain/core/files.hpp — the run directory's outputs written whole or not at all: a file is
// written beside its final name (<name>.tmp) and renamed over it (rename(2) is atomic within a
// file system, POSIX), so a reader — or a job killed half-way — sees the old file or the new
// one, never a torn one. Used for results.json, timeline.json and checkpoints (io/checkpoint.hpp,
// which also fsyncs).
#pragma once
#include <string>

namespace dtrain {

/// Renames `from` over `to` (replacing it atomically). Throws LibraryError (a failed system
/// call: exit code 3) naming both paths and the system's reason when the rename fails (e.g. they
/// lie on different file systems).
void replace_file(const std::string& from, const std::string& to);

/// Writes `text` to `path` whole: into `path`.tmp, then replace_file() over `path`. Throws
/// LibraryError naming the file when it cannot be written (a full disk, a missing directory);
/// `path` is then left as it was.
void write_file_atomically(const std::string& path, const std::string& text);

/// ": <strerror(errno)>" when errno is set, else "": the system's reason after a failed stream
/// operation (set errno = 0 before it).
std::string errno_reason();

}  // namespace dtrain
