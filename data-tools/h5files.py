"""data-tools/h5files.py — h5py.File with HDF5's file locks where the file system has them, and
without where it has none, as dtrain opens its own files (src/io/hdf5_locks.hpp).

HDF5 takes a flock() lock on every file it opens and refuses the open when the lock fails; on a
file system without locks (NFS without lockd: ENOLCK; some Lustre and GPFS mounts: ENOSYS,
EOPNOTSUPP) every open then fails. open_h5 tries the lock first and, where the file system refuses
it, opens the file with locking=False (what HDF5_USE_FILE_LOCKING=FALSE does), warning once on
stderr. Needs h5py ≥ 3.5 on HDF5 ≥ 1.10.7 (Debian 12: 3.7 on 1.10.8)."""
import errno
import fcntl
import os
import sys

import h5py

NO_LOCKS = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP)
_warned = []


def lock_errno(path, create):
    """The errno of a non-blocking flock of `path` (shared to read; exclusive after creating or
    truncating it when `create`), released at once; 0 when granted or when the file does not
    open (h5py then says why)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC if create else os.O_RDONLY
    try:
        fd = os.open(path, flags | os.O_CLOEXEC, 0o666)
    except OSError:
        return 0
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if create else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def open_h5(path, mode="r"):
    """h5py.File(path, mode) for mode "r" or "w"; without file locks where the file system of
    `path` has none (warned once per process)."""
    err = lock_errno(path, mode == "w")
    if err not in NO_LOCKS:
        return h5py.File(path, mode)
    if not _warned:
        _warned.append(path)
        print(f"warning: the file system of {path} takes no file locks (flock: {os.strerror(err)}):"
              " opening HDF5 files there without them (as HDF5_USE_FILE_LOCKING=FALSE)",
              file=sys.stderr)
    return h5py.File(path, mode, locking=False)
