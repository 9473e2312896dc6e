"""The one local process pool (suites and sweeps) and what every worker process sets up.

:func:`run_pool` runs ``fn(*args)`` for each task in at most ``parallel`` worker processes,
one task at a time per worker, each worker on its own pipe, so that:

- every worker dies with the driver, also when the driver is SIGKILLed (:func:`worker_setup`:
  the kernel's parent-death signal plus a watchdog thread);
- a worker that dies (killed, out of memory) fails only its own task, reported as an
  :class:`Outcome` with the signal that killed it; a new worker takes the remaining tasks;
- Ctrl-C in the driver cancels the queued tasks at once and asks the running ones to stop at
  their next checkpoint (``STOP_SIGNAL`` to the workers, which :func:`rnnlab.backends.run_one`
  turns into a stop after the trainer's next checkpoint write); a second Ctrl-C stops them now.
  The pool then raises :class:`Interrupted`, and the same command continues the work.

The serial path (one run at a time in this process) gets the same Ctrl-C behaviour through
:func:`interruptible`.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_ready
from pathlib import Path

#: driver -> worker: stop at the next checkpoint (Ctrl-C's first press)
STOP_SIGNAL = getattr(signal, "SIGUSR1", None)
#: driver -> worker, and a run's checkpoint watcher -> its own process: stop now
NOW_SIGNAL = getattr(signal, "SIGUSR2", None)

_state = {"stop": False, "busy": False}


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped the work: queued runs were cancelled, running ones stopped at a checkpoint."""


def stop_requested() -> bool:
    """Whether this process was asked to stop at the next checkpoint (Ctrl-C, or the driver)."""
    return _state["stop"]


def request_stop() -> None:
    _state["stop"] = True


def _raise_now(signum, frame) -> None:
    if _state["busy"]:  # only while a task runs: never inside the pool's own pipe traffic
        raise KeyboardInterrupt(f"stopped by signal {signum}")


def _on_stop_signal(signum, frame) -> None:
    request_stop()


# --------------------------------------------------------------------------- worker processes


def worker_setup(driver_pid: int) -> None:
    """Make this worker process die with the driver, even when the driver is SIGKILLed: the
    kernel's parent-death signal on Linux, plus a watchdog thread anywhere (the parent changed
    or the driver is gone), so no orphan keeps training into a run directory or hangs on a
    pipe. Ctrl-C at the terminal reaches the whole process group: the worker ignores it and
    waits for the driver's ``STOP_SIGNAL`` / ``NOW_SIGNAL`` instead."""
    from ..rundir import pid_alive

    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if STOP_SIGNAL is not None:
        signal.signal(STOP_SIGNAL, _on_stop_signal)
        signal.signal(NOW_SIGNAL, _raise_now)
    _state.update(stop=False, busy=False)

    def watch() -> None:
        while True:
            if os.getppid() != parent or not pid_alive(driver_pid):
                os._exit(70)
            time.sleep(0.5)

    if os.getppid() != parent or not pid_alive(driver_pid):  # the driver died while we started
        os._exit(70)
    threading.Thread(target=watch, name="rnnlab-driver-watch", daemon=True).start()


def one_line(e: BaseException) -> str:
    """An exception as one line: its type and its message with the line breaks removed."""
    return f"{type(e).__name__}: " + " ".join(line.strip() for line in str(e).splitlines())


def _serve(conn, driver_pid: int) -> None:
    """A worker's loop: receive ``(index, fn, args)``, run it, send back ``(index, ok, value)``;
    an exception goes back as itself when it pickles, else as its one-line text."""
    worker_setup(driver_pid)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, fn, args = msg
        _state["busy"] = True
        try:
            reply = (index, True, fn(*args))
        except BaseException as e:  # noqa: BLE001 - everything is reported to the driver
            reply = (index, False, e)
        finally:
            _state["busy"] = False
        try:
            pickle.dumps(reply)
        except Exception:  # noqa: BLE001 - an unpicklable value or exception: its text
            reply = (index, False, RuntimeError(one_line(reply[2]) if not reply[1] else "unpicklable result"))
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


@dataclass
class Outcome:
    """How one task ended: ``state`` is ``done`` (``value`` is fn's return value), ``error``
    (``error`` is the exception fn raised), ``died`` (the worker process died: ``error`` says
    how) or ``cancelled`` (Ctrl-C before it started)."""

    index: int
    state: str
    value: object = None
    error: BaseException | str | None = None


class _Worker:
    def __init__(self, ctx, driver_pid: int):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_serve, args=(child, driver_pid), daemon=True, name="rnnlab-worker")
        self.proc.start()
        child.close()
        self.task: int | None = None

    def give(self, index: int, fn, args: tuple) -> None:
        self.task = index
        self.conn.send((index, fn, args))

    def signal(self, signum) -> None:
        if signum is not None and self.proc.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signum)

    def death(self) -> str:
        self.proc.join(timeout=5)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        return f"the worker process (pid {self.proc.pid}) died ({how}) before it reported"

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(None)
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


# --------------------------------------------------------------------------- Ctrl-C


@contextlib.contextmanager
def interruptible(on_first, on_second=None):
    """While inside: Ctrl-C calls ``on_first()`` (cancel, ask for a stop at the next
    checkpoint) instead of raising; a second Ctrl-C calls ``on_second()`` (default: raise
    KeyboardInterrupt now). ``NOW_SIGNAL`` raises KeyboardInterrupt while a run is busy here
    (a run's checkpoint watcher). Only in the main thread; elsewhere nothing changes. The stop
    request is cleared on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = [0]

    def on_sigint(signum, frame) -> None:
        presses[0] += 1
        if presses[0] == 1:
            on_first()
        elif on_second is not None:
            on_second()
        else:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, on_sigint)
    old_now = signal.signal(NOW_SIGNAL, _raise_now) if NOW_SIGNAL is not None else None
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if NOW_SIGNAL is not None:
            signal.signal(NOW_SIGNAL, old_now)
        _state.update(stop=False, busy=False)


@contextlib.contextmanager
def busy():
    """Mark this process as running a task (``NOW_SIGNAL`` may interrupt it)."""
    _state["busy"] = True
    try:
        yield
    finally:
        _state["busy"] = False


class CheckpointStop:
    """Stop a run right after its next checkpoint once a stop was requested.

    :meth:`hook` wraps a trainer ``on_eval`` hook: at an evaluation after the stop request it
    starts a watcher that sends ``NOW_SIGNAL`` to this process as soon as ``checkpoint`` has
    been replaced (the trainer writes its checkpoint right after the evaluation), which raises
    KeyboardInterrupt in the trainer; the run then resumes exactly from that checkpoint.
    :meth:`disarm` ends the watcher (the run ended another way first)."""

    def __init__(self, checkpoint: Path, total_steps: int):
        self.checkpoint, self.total_steps = Path(checkpoint), total_steps
        self.fired = threading.Event()
        self._done = threading.Event()
        self._armed = False

    def hook(self, on_eval=None):
        def hook(step: int, metrics: dict) -> bool:
            stop = bool(on_eval(step, metrics)) if on_eval is not None else False
            if stop_requested() and not stop and step < self.total_steps and not self._armed:
                self._arm()
            return stop

        return hook

    def _stamp(self):
        try:
            st = self.checkpoint.stat()
            return st.st_ino, st.st_mtime_ns, st.st_size
        except OSError:
            return None

    def _arm(self) -> None:
        self._armed = True
        before = self._stamp()
        if NOW_SIGNAL is None:  # no user signals here: stop at the next evaluation instead
            return

        def watch() -> None:
            while not self._done.is_set():
                if self._stamp() != before:
                    self.fired.set()
                    os.kill(os.getpid(), NOW_SIGNAL)
                    return
                time.sleep(0.005)

        threading.Thread(target=watch, name="rnnlab-stop-at-checkpoint", daemon=True).start()

    def disarm(self) -> None:
        self._done.set()


# --------------------------------------------------------------------------- the pool


def _collect(worker: _Worker) -> Outcome | None:
    """The outcome of ``worker``'s task if it has one (a reply, or its death), else None."""
    if worker.conn.poll():
        try:
            index, ok, value = worker.conn.recv()
        except (EOFError, OSError):
            return Outcome(worker.task, "died", error=worker.death())
        return Outcome(index, "done", value=value) if ok else Outcome(index, "error", error=value)
    if not worker.proc.is_alive():
        return Outcome(worker.task, "died", error=worker.death())
    return None


def run_pool(fn, tasks: list[tuple], parallel: int, on_outcome, tick=None, tick_every: float = 0.5, log=print) -> None:
    """Run ``fn(*args)`` for every ``args`` in ``tasks`` in at most ``parallel`` worker
    processes; ``on_outcome(Outcome)`` is called as each task ends (in completion order),
    ``tick()`` about every ``tick_every`` seconds while tasks run. Ctrl-C: see the module
    docstring; raises :class:`Interrupted` after the running tasks have stopped."""
    ctx = mp.get_context()
    queue = deque(range(len(tasks)))
    workers: list[_Worker] = []
    flags = {"stop": False, "now": False, "logged": False}
    with interruptible(lambda: flags.update(stop=True), lambda: flags.update(now=True)):
        try:
            while queue or any(w.task is not None for w in workers):
                if flags["stop"] and not flags["logged"]:
                    _stop_everything(queue, workers, on_outcome, log)
                    flags["logged"] = True
                if flags["now"]:
                    for w in workers:
                        if w.task is not None:
                            w.signal(NOW_SIGNAL)
                    flags["now"] = False
                _fill(workers, queue, fn, tasks, parallel, ctx)
                _step(workers, on_outcome, tick_every)
                if tick is not None:
                    tick()
        finally:
            for w in workers:
                w.close()
    if flags["stop"]:
        raise Interrupted("interrupted")


def _fill(workers: list[_Worker], queue: deque, fn, tasks: list[tuple], parallel: int, ctx) -> None:
    for w in [w for w in workers if w.task is None and not w.proc.is_alive()]:
        workers.remove(w)
        w.close()
    while queue:
        idle = next((w for w in workers if w.task is None), None)
        if idle is None and len(workers) >= parallel:
            return
        if idle is None:
            idle = _Worker(ctx, os.getpid())
            workers.append(idle)
        index = queue.popleft()
        try:
            idle.give(index, fn, tasks[index])
        except (BrokenPipeError, OSError):  # died while idle: the next round replaces it
            queue.appendleft(index)
            idle.task = None
            workers.remove(idle)
            idle.close()


def _step(workers: list[_Worker], on_outcome, timeout: float) -> None:
    running = [w for w in workers if w.task is not None]
    if not running:
        return
    wait_ready([w.conn for w in running] + [w.proc.sentinel for w in running], timeout=timeout)
    for w in running:
        outcome = _collect(w)
        if outcome is None:
            continue
        w.task = None
        if outcome.state == "died":
            workers.remove(w)
            w.close()
        on_outcome(outcome)


def _stop_everything(queue: deque, workers: list[_Worker], on_outcome, log) -> None:
    cancelled = list(queue)
    queue.clear()
    running = [w for w in workers if w.task is not None]
    for w in running:
        w.signal(STOP_SIGNAL)
    log(
        f"interrupted: {len(cancelled)} queued task(s) cancelled; {len(running)} running task(s) stop at "
        f"their next checkpoint (Ctrl-C again to stop them now)"
    )
    for index in cancelled:
        on_outcome(Outcome(index, "cancelled", error="cancelled by Ctrl-C before it started"))
