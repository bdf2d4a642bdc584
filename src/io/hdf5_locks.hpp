// src/io/hdf5_locks.hpp — private to src/io: HDF5's file locks where the file system has them.
//
// HDF5 (1.10 and later) takes a flock() lock on every file it opens — shared to read, exclusive to
// write — and fails the open when the lock cannot be taken. On file systems without locks (NFS
// without lockd: ENOLCK; some Lustre and GPFS mounts: ENOSYS or EOPNOTSUPP) every open then
// fails, and the first checkpoint of a run that trained for hours with it. HDF5 ignores only
// ENOSYS, and only where it was built to. So dtrain tries the lock itself first and opens the file
// without locks where the file system refuses them — what HDF5_USE_FILE_LOCKING=FALSE does for
// every file — warning once per process; a file another process holds locked (a program still
// writing it) is an InputError naming it.
#pragma once

#include <string>

#include "dtrain/io/hdf5.hpp"

namespace dtrain::detail {

/// The file access property list to open (`create` false: an existing file, read) or create
/// (`create` true: creates or truncates the file first) `path` with: empty (HDF5's default, locks
/// on) where flock(LOCK_NB) on the file succeeds, or could not be tried (the file does not open:
/// HDF5 then reports why); one with H5Pset_file_locking(false) where the file system has no
/// locks (flock fails with ENOLCK, ENOSYS or EOPNOTSUPP; the first such file is named in a
/// warning). Throws InputError naming `path` when another process holds a conflicting lock on it
/// (EWOULDBLOCK), LibraryError when an H5P call fails. Call with hdf5_mutex() held.
H5PropList file_access(const std::string& path, bool create);

}  // namespace dtrain::detail
