"""Ctrl-C around child processes, shared by the reference stages and the search workers.

A terminal's Ctrl-C goes to the whole process group. A child killed during its start-up
(interpreter, imports, unpickling its arguments) prints a traceback and can leave its parent
blocked on the pipe it writes the arguments to, so children are started with SIGINT blocked and
ignore it as their first step: Ctrl-C is the parent's to handle."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from multiprocessing import resource_tracker

HOLDS_SIGNALS = hasattr(signal, "pthread_sigmask")


@contextmanager
def interrupts_deferred():
    """Ctrl-C deferred while inside: SIGINT is blocked in this thread and, in the main thread,
    recorded instead of handled (another thread of the process, a BLAS worker or a progress line,
    may take the signal for the process); the handler in place gets it once when the block ends
    (Python's default: one KeyboardInterrupt). A
    process spawned inside inherits the blocked mask through exec. Without pthread_sigmask
    (Windows) SIGINT is ignored inside instead, in the main thread only."""
    # only the main thread may set handlers; an ignored SIGINT (nohup, `&`) stays ignored
    main = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) != signal.SIG_IGN
    caught: list[int] = []
    record = (lambda number, frame: caught.append(number)) if HOLDS_SIGNALS else signal.SIG_IGN
    handler = signal.signal(signal.SIGINT, record) if main else None
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if HOLDS_SIGNALS else None
    try:
        yield
    finally:
        if HOLDS_SIGNALS:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        if main:
            signal.signal(signal.SIGINT, signal.default_int_handler if handler is None else handler)
            if caught:
                signal.raise_signal(signal.SIGINT)  # to the handler just restored


@contextmanager
def spawning_quietly():
    """`interrupts_deferred` for starting processes. multiprocessing's resource tracker is started
    first: its own start unblocks SIGINT again, which would leave the children started after it
    (by the same Process.start) unprotected."""
    if HOLDS_SIGNALS:
        resource_tracker.ensure_running()
    with interrupts_deferred():
        yield


def ignore_interrupts() -> None:
    """A child's first step when spawned under `interrupts_deferred`: SIGINT ignored (a pending one
    is discarded), then unblocked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if HOLDS_SIGNALS:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
