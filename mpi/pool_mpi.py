"""The MPI master (`MPIPool`, rank 0) and the worker loop (`serve`, ranks 1..N−1) over mpi4py.

Protocol (pickled messages; one tag per direction, so MPI's non-overtaking rule keeps each pair in order):
    master → worker (TAG_CTRL):   ("init", fn, args) | ("task", (seq, index), fn, payload) | ("stop",)
    worker → master (TAG_RESULT): ("ready"|"initerr", msg) | ("ok"|"err", (seq, index), result|error) | ("bye", why)

Unlike the authors' fixed one-solution-per-worker packets with blocking Send/Recv in rank order (§8), tasks are
handed out one at a time to whichever rank is idle, so uneven episode lengths do not idle ranks, and the master
never blocks on one rank: it polls with `Iprobe`, sleeping between polls (`mpi.pool.Backoff`: from 1 ms up to
20 ms as a wait grows; MPICH's blocking calls busy-wait and would steal a core from a worker). Idle workers
wait for the master the same way. Tasks and results go out with `isend` and are completed by `Test` in those
polling loops: MPICH's blocking `send` of a message over its eager size (~8 KB pickled: a task of 16 members'
params, a result of 32 members) spins at 100 % of a core until the receiver posts its `recv`, that is until the
other side's next poll; the receiver pulls the data without the sender's help.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from mpi4py import MPI
from wm.mpi.pool import PROCESS, Backoff, Pool, StopFlag, TaskFailed, close_context, format_error, set_stop_check

TAG_CTRL, TAG_RESULT = 11, 12


class MPIPool(Pool):
    """Rank 0's view of ranks 1..N−1: dynamic dispatch, retries, timeouts with re-dispatch, clean shutdown."""

    def __init__(
        self,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple = (),
        *,
        timeout: float = 600.0,
        retries: int = 2,
        log: Any = None,
        stop: StopFlag | None = None,
        grace: float = 30.0,
    ):
        self.comm = MPI.COMM_WORLD
        self.timeout, self.retries, self.log, self.stop, self.grace = float(timeout), int(retries), log, stop, float(grace)
        self.ranks = list(range(1, self.comm.Get_size()))
        self.size = len(self.ranks)
        self.live = set(self.ranks)
        self.idle = set(self.ranks)
        self.running: dict[int, tuple[int, int, float]] = {}  # rank -> (seq, index, start time)
        self.suspect: set[int] = set()  # ranks whose task timed out (still busy with it)
        self._seq = 0
        self._closed = False
        self._sends: list[Any] = []  # isend requests not yet known complete
        self._init(initializer, initargs)
        self._info("MPI pool: %d worker ranks ready", self.size)

    def _init(self, initializer: Callable[..., Any] | None, initargs: tuple) -> None:
        """Send the initializer to every live rank and wait for each one's answer; a failure closes the pool."""
        errors = []
        for r in sorted(self.live):
            self._send(("init", initializer, initargs), r)
        waiting, backoff = set(self.live), Backoff()
        while waiting:
            got = self._poll()
            if got is None:
                if self.stop is not None and self.stop.is_set():
                    self.close()
                    raise KeyboardInterrupt
                backoff.sleep()
                continue
            backoff.reset()
            r, msg = got
            if msg[0] == "bye":  # the rank got a signal and left
                self.live.discard(r)
                self.idle.discard(r)
                waiting.discard(r)
                continue
            if msg[0] not in ("ready", "initerr"):
                continue  # a late result of an earlier map's timed-out task
            waiting.discard(r)
            if msg[0] == "initerr":
                errors.append(f"rank {r}: {msg[1]}")
        if errors:
            self.close()
            raise RuntimeError("worker initialisation failed: " + "; ".join(errors))

    def reinit(self, initializer: Callable[..., Any] | None, initargs: tuple = ()) -> None:
        """Give every rank a new context (its old one closed first): one MPI job, a second kind of evaluation.

        A rank still busy with a timed-out task is waited for (up to the timeout), then left out of the pool."""
        deadline, backoff = time.monotonic() + self.timeout, Backoff()
        while self.running and time.monotonic() < deadline:
            got = self._poll()
            if got is None:
                backoff.sleep()
                continue
            backoff.reset()
            r, msg = got
            self.running.pop(r, None)
            self.suspect.discard(r)
            if msg[0] == "bye":
                self.live.discard(r)
        for r in self.running:  # still busy: its late answer must not be read as the new context's
            self.live.discard(r)
        self.running.clear()
        if not self.live:
            raise RuntimeError("every worker rank has exited")
        self.idle = set(self.live)
        self._init(initializer, initargs)
        self._info("MPI pool: %d worker ranks ready with a new context", len(self.live))

    # -- plumbing
    def _send(self, msg: Any, rank: int) -> None:
        self._sends.append(self.comm.isend(msg, dest=rank, tag=TAG_CTRL))

    def _poll(self) -> tuple[int, Any] | None:
        self._sends = [q for q in self._sends if not q.Test()]
        return _poll(self.comm)

    def _info(self, msg: str, *a: Any) -> None:
        if self.log is not None:
            self.log.info(msg, *a)

    def _warn(self, msg: str, *a: Any) -> None:
        if self.log is not None:
            self.log.warning(msg, *a)

    def _error(self, msg: str, *a: Any) -> None:
        if self.log is not None:
            self.log.error(msg, *a)

    # -- the map
    def map(
        self, fn: Callable[[Any, Any], Any], payloads: Sequence[Any], on_result: Callable[[int, Any], Any] | None = None
    ) -> list[Any]:
        self._seq += 1
        seq, n = self._seq, len(payloads)
        results: list[Any] = [None] * n
        done = [False] * n
        attempts = [0] * n
        pending = collections.deque(range(n))
        remaining = n
        backoff = Backoff()
        while remaining:
            if self.stop is not None and self.stop.is_set():
                raise KeyboardInterrupt
            for r in sorted(self.idle):  # hand the next task to every idle rank
                while pending and done[pending[0]]:
                    pending.popleft()
                if not pending:
                    break
                i = pending.popleft()
                self._send(("task", (seq, i), fn, payloads[i]), r)
                self.idle.discard(r)
                self.running[r] = (seq, i, time.monotonic())
                backoff.reset()
            got = self._poll()
            if got is None:
                self._check_timeouts(seq, done, pending)
                if not self.live:
                    raise RuntimeError("every worker rank has exited")
                backoff.sleep()
                continue
            backoff.reset()
            r, msg = got
            kind = msg[0]
            if kind == "bye":  # the rank got a signal and left
                self._warn("rank %d exited (%s)", r, msg[1])
                self.live.discard(r)
                self.idle.discard(r)
                self.suspect.discard(r)
                job = self.running.pop(r, None)
                if job is not None and job[0] == seq and not done[job[1]] and not self._copies(seq, job[1]):
                    pending.appendleft(job[1])
                continue
            self.running.pop(r, None)
            self.suspect.discard(r)
            if r in self.live:
                self.idle.add(r)
            (s, i), value = msg[1], msg[2]
            if s != seq or done[i]:
                continue  # a late copy of a task that finished elsewhere (or in an earlier map)
            if kind == "ok":
                results[i], done[i] = value, True
                remaining -= 1
                if on_result is not None:
                    on_result(i, value)
                continue
            attempts[i] += 1
            if attempts[i] <= self.retries:
                self._warn(
                    "task %d raised on rank %d (attempt %d/%d): %s; retrying", i, r, attempts[i], self.retries + 1, value
                )
                if i not in pending and not self._copies(seq, i):
                    pending.appendleft(i)
            else:
                self._error(
                    "task %d failed on rank %d after %d attempts: %s; its members get the worst fitness",
                    i,
                    r,
                    attempts[i],
                    value,
                )
                results[i], done[i] = TaskFailed(i, r, value, attempts[i]), True
                remaining -= 1
                if on_result is not None:
                    on_result(i, results[i])
        return results

    def _copies(self, seq: int, i: int) -> bool:
        return any(s == seq and j == i for s, j, _ in self.running.values())

    def _check_timeouts(self, seq: int, done: list[bool], pending: collections.deque) -> None:
        now = time.monotonic()
        for r, (s, i, t0) in list(self.running.items()):
            if r in self.suspect or now - t0 <= self.timeout:
                continue
            self.suspect.add(r)  # it stays busy; its late result is discarded if another copy won
            if s == seq and not done[i] and i not in pending:
                self._warn("task %d on rank %d exceeded the %.0f s timeout; re-dispatched to another rank", i, r, self.timeout)
                pending.appendleft(i)

    # -- shutdown
    def close(self) -> None:
        """Send STOP to every rank and wait (up to `grace` s) for each goodbye; abort the job if one never comes."""
        if self._closed:
            return
        self._closed = True
        stop_workers(self.comm, self.ranks, self.live, self.grace, self.log, self._sends)


def _poll(comm: Any) -> tuple[int, Any] | None:
    """The next worker → master message, `(rank, message)`, or None when none is waiting (never blocks)."""
    st = MPI.Status()
    if not comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_RESULT, status=st):
        return None
    r = st.Get_source()
    return r, comm.recv(source=r, tag=TAG_RESULT)


def settle(reqs: list[Any], deadline: float) -> bool:
    """Wait, without spinning, for send requests to complete (until `deadline`); True when they all did."""
    backoff = Backoff()
    while True:
        reqs[:] = [q for q in reqs if not q.Test()]
        if not reqs or time.monotonic() > deadline:
            return not reqs
        backoff.sleep()


def stop_workers(
    comm: Any, ranks: Sequence[int], live: set[int], grace: float, log: Any = None, sends: list[Any] | None = None
) -> None:
    """Send STOP to `ranks` and wait (up to `grace` s) for the goodbye of each `live` one; abort the job if one
    never comes. Results still arriving from tasks in flight are dropped; `sends` (requests of earlier messages
    to the workers) are completed too. Marks the workers released."""
    PROCESS.workers_released = True
    reqs = [*(sends or []), *(comm.isend(("stop",), dest=r, tag=TAG_CTRL) for r in ranks)]
    waiting, backoff = set(live), Backoff()
    deadline = time.monotonic() + grace
    while waiting and time.monotonic() < deadline:
        got = _poll(comm)
        if got is None:
            backoff.sleep()
            continue
        backoff.reset()
        if got[1][0] == "bye":
            waiting.discard(got[0])
    if waiting:
        if log is not None:
            log.error("ranks %s did not stop within %.0f s; aborting the MPI job", sorted(waiting), grace)
        comm.Abort(3)
    settle(reqs, deadline + 1.0)  # every rank said goodbye after taking its messages: nothing is left unmatched


def release_workers(grace: float = 30.0) -> None:
    """On rank 0: tell every worker to exit if no pool did (the stage refused to start, or was already DONE)."""
    comm = MPI.COMM_WORLD
    if PROCESS.workers_released or comm.Get_size() < 2 or comm.Get_rank() != 0:
        return
    ranks = list(range(1, comm.Get_size()))
    stop_workers(comm, ranks, set(ranks), grace)


def serve(comm: Any = None) -> int:
    """Worker loop of ranks 1..N−1: run the initializer, then tasks, until STOP or a signal. Returns an exit code.

    While a task runs, `mpi.should_stop()` is true once a signal arrived or any message from the master is
    waiting (the master only writes to a busy rank to stop it), so rollouts can end between env steps.
    """
    comm = comm or MPI.COMM_WORLD
    # If rank 0 fails before it makes a pool (the CLI refusing the run dir, say), no message ever comes and MPI
    # cannot tell us it died: give up after this long without the init message.
    init_deadline = time.monotonic() + float(os.environ.get("WM_MPI_INIT_TIMEOUT", "300"))
    flag = StopFlag()
    with flag:
        set_stop_check(lambda: flag.is_set() or comm.Iprobe(source=0, tag=TAG_CTRL))
        ctx: Any = None
        ready = False
        why = "stop"
        backoff = Backoff()  # the wait for the next message starts when the last one has been handled
        sends: list[Any] = []  # results in flight (isend: see the module docstring)

        def post(msg: Any) -> None:
            sends.append(comm.isend(msg, dest=0, tag=TAG_RESULT))

        try:
            while True:
                sends[:] = [q for q in sends if not q.Test()]
                if flag.is_set():
                    why = f"signal {flag.signum}"
                    break
                if not comm.Iprobe(source=0, tag=TAG_CTRL):
                    if not ready and init_deadline and time.monotonic() > init_deadline:
                        print(
                            f"rank {comm.Get_rank()}: no work from rank 0 in time (did it stop before starting?); exiting",
                            file=sys.stderr,
                            flush=True,
                        )
                        return 1
                    backoff.sleep()
                    continue
                msg = comm.recv(source=0, tag=TAG_CTRL)
                if msg[0] == "stop":
                    break
                if msg[0] == "init":
                    init_deadline = 0.0
                    close_context(ctx)  # a new context (`MPIPool.reinit`): the old one's envs go first
                    ctx = None
                    try:
                        ctx, ready = (msg[1](*msg[2]) if msg[1] is not None else None), True
                        post(("ready", None))
                    except Exception as e:  # noqa: BLE001 — reported to the master, which refuses to start
                        post(("initerr", format_error(e)))
                    backoff.reset()
                    continue
                _, key, fn, payload = msg
                try:
                    post(("ok", key, fn(ctx, payload)))
                except KeyboardInterrupt:
                    why = "interrupted"
                    break
                except Exception as e:  # noqa: BLE001 — the master retries or gives the task up
                    post(("err", key, format_error(e)))
                backoff.reset()
        finally:
            close_context(ctx)  # close envs (and ViZDoom's processes) before saying goodbye
        post(("bye", why))
        deadline = time.monotonic() + 30.0
        if why != "stop":  # wait (bounded) for the master's STOP so it is not left unmatched
            backoff = Backoff()
            while time.monotonic() < deadline:
                sends[:] = [q for q in sends if not q.Test()]
                if comm.Iprobe(source=0, tag=TAG_CTRL) and comm.recv(source=0, tag=TAG_CTRL)[0] == "stop":
                    break
                backoff.sleep()
        settle(sends, deadline)  # the master takes every message before it lets the job end
    return 0
