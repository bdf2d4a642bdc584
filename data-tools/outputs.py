"""data-tools/outputs.py — the output checks every writing tool shares (convert_idx, images_to_h5,
plot_metrics, scaling_report, make_model_jobs): an output is refused before anything is read or
written when it exists (unless --force), is a directory, or cannot become a file; it is then
written under a hidden temporary name beside it and renamed, and SIGTERM/SIGHUP exit through the
code that removes that temporary — so a failed run never replaces or half-writes what is there."""
import os
import sys


def output_problem(out, force):
    """What keeps `out` from being written, as one message naming it, or None. Creates nothing.
    `force`: an existing file may be replaced."""
    if os.path.isdir(out):
        return f"cannot write {out}: it is a directory"
    if os.path.exists(out) and not force:
        return f"{out}: exists; not overwriting (use --force)"
    parent = os.path.dirname(out) or "."
    while not os.path.exists(parent):  # the nearest existing ancestor must be a writable directory
        parent = os.path.dirname(parent) or "."
    if not os.path.isdir(parent):
        return f"cannot write {out}: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot write {out}: {parent} is not writable"
    return None


def check_output(out, force, fail):
    """Returns when `out` may be written (output_problem); otherwise raises fail(message) where
    fail is an exception class, or calls fail(message), which exits."""
    problem = output_problem(out, force)
    if problem is None:
        return
    if isinstance(fail, type) and issubclass(fail, BaseException):
        raise fail(problem)
    fail(problem)


def temp_name(out):
    """The hidden temporary file beside `out` that is written first and renamed to `out`."""
    return os.path.join(os.path.dirname(os.path.abspath(out)),
                        f".{os.path.basename(out)}.tmp-{os.getpid()}")


def _exit_on_signal(signo, _frame):
    raise SystemExit(128 + signo)  # unwinds through the finally blocks that remove temporaries


def exit_cleanly_on_signals():
    """SIGTERM and SIGHUP (a killed job, a closed terminal) end the tool with exit code 128 + N
    through SystemExit, so that its `finally` blocks remove the temporary files it was writing."""
    import signal
    for signo in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signo, _exit_on_signal)


def ignore_sigint_in_worker():
    """A worker process's initializer (a process pool's): SIGTERM and SIGHUP end it at once (it
    was forked with the parent's handlers, which would turn them into SystemExit somewhere inside
    the pool's machinery), and Ctrl-C's SIGINT is the parent's to handle."""
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


_failed_hdf5 = []  # objects of HDF5 files whose write or close failed: never touched again


def hdf5_write_failed(out, e, objects=()):
    """The message for an HDF5 write or close of `out` that raised e (h5py raises RuntimeError or
    OSError, e.g. for a full disk: `cannot write OUT: No space left on device`). `objects` (the
    file and its datasets) are kept alive and never closed again: HDF5 cannot close such a file,
    and closing it again (when they are freed, or at exit) prints tracebacks or crashes, so
    run_tool then ends the process with os._exit once the temporaries are removed."""
    import re
    _failed_hdf5.append(list(objects))
    m = re.search(r"errno = (\d+)", str(e))
    if m:
        reason = os.strerror(int(m.group(1)))
    else:
        reason = getattr(e, "strerror", None) or (str(e).splitlines() or [type(e).__name__])[0]
    return f"cannot write {out}: {reason}"


def missing_folders(folder):
    """The folders that os.makedirs(folder) would create: `folder` and those of its ancestors that
    do not exist, innermost first (remove_new_folders removes them again after a failed run)."""
    missing, d = [], os.path.abspath(folder)
    while not os.path.exists(d):
        missing.append(d)
        d = os.path.dirname(d)
    return missing


def remove_new_folders(folders):
    """Removes the folders of missing_folders (innermost first) that are still empty: a failed run
    leaves no folder it created."""
    for d in folders:
        try:
            os.rmdir(d)
        except OSError:
            break


def remove_if_exists(path):
    """Removes the file `path` if there is one (a temporary on the clean-up path)."""
    if os.path.exists(path):
        os.remove(path)


def run_tool(prog, body, error_type):
    """Runs body() (which returns the exit code) the way every writing tool ends: SIGTERM/SIGHUP
    unwind through its `finally` blocks (exit_cleanly_on_signals); an error_type exception prints
    `PROG: error: MESSAGE` on stderr and returns 1; Ctrl-C prints that nothing was written and
    returns 130 (128 + SIGINT). argparse's own usage errors (SystemExit 2) pass through. After an
    HDF5 file failed to be written (hdf5_write_failed) the process ends with os._exit(code)."""
    exit_cleanly_on_signals()
    try:
        code = body()
    except error_type as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; no output written", file=sys.stderr)
        code = 130
    if _failed_hdf5:  # an HDF5 file that could not be closed (hdf5_write_failed): no clean-up of
        sys.stdout.flush()  # it by HDF5 at exit, which would crash
        sys.stderr.flush()
        os._exit(code)
    return code
