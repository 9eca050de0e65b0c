"""The work this process does in its own threads once a transaction has committed: the inline
executor's steps and its short delayed hints, webhook attempts, approval notifications.

Each piece is counted from the moment it is handed over (queued, or waiting on its timer)
until it is done, so that a process can wait for its work to settle before it exits
(`manage.py run_entity`: exiting with work queued ends in "cannot schedule new futures after
interpreter shutdown"), and so that a test can stop the work it started before its database
is emptied (tests/conftest.py). Every piece is a hint the database can redo: a step, a
delivery or a run whose hint is dropped while the work stops is found again by the sweepers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

_changed = threading.Condition()
_unfinished = 0  # handed over and not done: queued, running, or waiting on a timer
_timers: set[threading.Timer] = set()  # waiting to fire
_stopping = 0  # stops in progress: new work is dropped meanwhile


def _taken(what: str) -> bool:
    global _unfinished
    with _changed:
        if _stopping:
            log.debug("dropped %s: this process is stopping its background work", what)
            return False
        _unfinished += 1
        return True


def _done(_: Future | None = None) -> None:
    global _unfinished
    with _changed:
        _unfinished -= 1
        _changed.notify_all()


def submit(pool: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any) -> bool:
    """Run `fn(*args)` on `pool`, counted until it is done; False when it was dropped."""
    what = f"{getattr(fn, '__name__', fn)}{args!r}"
    if not _taken(what):
        return False
    try:
        future = pool.submit(fn, *args)
    except RuntimeError:
        # The interpreter is exiting (its pools take nothing more): the sweepers redo it.
        _done()
        log.warning("dropped %s: the process is exiting", what)
        return False
    future.add_done_callback(_done)
    return True


def later(delay_s: float, fn: Callable[..., Any], /, *args: Any) -> bool:
    """Run `fn(*args)` in `delay_s` seconds in a daemon timer thread (a pending hint must not
    keep a server from exiting), counted until it is done; False when it was dropped."""
    if not _taken(f"{getattr(fn, '__name__', fn)}{args!r} in {delay_s:g} s"):
        return False

    def fire() -> None:
        with _changed:
            if timer not in _timers:
                return  # cancelled by a stop, which counted it done
            _timers.discard(timer)
        try:
            fn(*args)
        finally:
            _done()

    timer = threading.Timer(delay_s, fire)
    timer.daemon = True
    with _changed:
        _timers.add(timer)
    timer.start()
    return True


def settle(timeout: float) -> bool:
    """Wait until nothing is queued, running or waiting on a timer (work may hand over more
    work meanwhile: a step hints the next); False when some is left after `timeout` s."""
    with _changed:
        return _changed.wait_for(lambda: _unfinished == 0, timeout)


def quiesce(timeout: float) -> bool:
    """Stop the background work: drop new work and the hints waiting on a timer, and wait for
    what runs to end; new work is taken again afterwards. False when some still runs after
    `timeout` s."""
    global _stopping, _unfinished
    with _changed:
        _stopping += 1
        waiting = list(_timers)
        _timers.clear()
        _unfinished -= len(waiting)
        _changed.notify_all()
    for timer in waiting:
        timer.cancel()
    try:
        with _changed:
            return _changed.wait_for(lambda: _unfinished == 0, timeout)
    finally:
        with _changed:
            _stopping -= 1


def unfinished() -> int:
    """How many pieces of work are queued, running or waiting on a timer."""
    with _changed:
        return _unfinished
