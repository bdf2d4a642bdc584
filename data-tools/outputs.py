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


def remove_if_exists(path):
    """Removes the file `path` if there is one (a temporary on the clean-up path)."""
    if os.path.exists(path):
        os.remove(path)


def run_tool(prog, body, error_type):
    """Runs body() (which returns the exit code) the way every writing tool ends: SIGTERM/SIGHUP
    unwind through its `finally` blocks (exit_cleanly_on_signals); an error_type exception prints
    `PROG: error: MESSAGE` on stderr and returns 1; Ctrl-C prints that nothing was written and
    returns 130 (128 + SIGINT). argparse's own usage errors (SystemExit 2) pass through."""
    exit_cleanly_on_signals()
    try:
        return body()
    except error_type as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; no output written", file=sys.stderr)
        return 130
