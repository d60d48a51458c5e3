"""The one exception type users see: a clear, single-line problem statement (exit code 2, or 1 for a failed run)."""


class WMError(Exception):
    """A problem with the user's input or run directory; the CLI prints `error: <message>` and exits 2."""


class RunFailed(WMError):
    """A run that failed while it ran (a worker died, a stage of the pipeline failed, a stop by SIGTERM), not a
    refused input: the CLI prints the same one line and exits 1. What is on disk is kept, and a rerun resumes."""


class WriteError(RunFailed):
    """An OSError while writing a file of the run dir (a full disk, a read-only or forbidden folder).

    Raised by `wm.core.atomic.atomic_path` with one line naming the file and the errno: the write went to a temporary
    name, so the previous version of the file (if any) is intact, and a rerun resumes. A plain `WMError` subclass
    holding only its message, so it crosses process boundaries (spawned collect workers) unchanged.
    """


def describe_os_error(e: OSError, path: object = None) -> str:
    """`cannot write <path>: [Errno 28] No space left on device; <what to do>` for an OSError met while writing."""
    import errno as E

    where = path if path is not None else (e.filename if e.filename is not None else "a file of the run")
    what = f"[Errno {e.errno}] {e.strerror}" if e.errno is not None else (str(e) or type(e).__name__)
    if e.errno in (E.ENOSPC, E.EDQUOT):
        hint = "nothing was lost: free some space, then rerun the same command to resume"
    elif e.errno in (E.EROFS, E.EACCES, E.EPERM):
        hint = "nothing was lost: make the folder writable, then rerun the same command to resume"
    else:
        hint = "nothing was lost: rerun the same command to resume"
    return f"cannot write {where}: {what}; {hint}"
