"""Waiting in tests without sleeping a fixed time.

Where something signals (a line on a pipe, an event, a process's exit), a test waits on that. What
is left are states another process changes without telling anyone: the host's process table, a
container engine's list, a checkpoint directory another process writes. ``until`` (async) and
``wait_until`` (blocking) return as soon as such a condition holds, checking it at intervals that
grow from 10 ms to 200 ms, and give up at a deadline. ``MovableClock`` replaces the clock a class
reads (``EnvPool(clock=...)``), so a test moves time instead of waiting for it to pass.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable

import anyio

FIRST_INTERVAL_S, LAST_INTERVAL_S = 0.01, 0.2


async def until(condition: Callable[[], bool | Awaitable[bool]], within_s: float) -> bool:
    """Whether ``condition()`` (plain or async) holds within ``within_s``; returns once it does."""
    interval = FIRST_INTERVAL_S
    with anyio.move_on_after(within_s):
        while True:
            held = condition()
            if inspect.isawaitable(held):
                held = await held
            if held:
                return True
            await anyio.sleep(interval)  # nothing to wait on: the next check, not a guess at a duration
            interval = min(2 * interval, LAST_INTERVAL_S)
    return False


def wait_until(condition: Callable[[], bool], within_s: float) -> bool:
    """``until`` for blocking code: whether ``condition()`` holds within ``within_s``."""
    deadline, interval = time.monotonic() + within_s, FIRST_INTERVAL_S
    while not condition():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(interval, left))
        interval = min(2 * interval, LAST_INTERVAL_S)
    return True


class MovableClock:
    """``time.monotonic`` plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset_s

    def advance(self, seconds: float) -> None:
        self.offset_s += seconds
