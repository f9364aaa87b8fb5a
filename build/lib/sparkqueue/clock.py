"""The clock protocol: one source of time for every ttl/ttr/delay/lease rule.

Times are passed into queries as literals, never taken from Spark's
SQL clock, so tests move a fake clock instead of sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "system_clock"]


class Clock(Protocol):
    """A zero-argument callable returning epoch seconds."""

    def __call__(self) -> float: ...


def system_clock() -> float:
    """Wall-clock epoch seconds (``time.time``)."""
    return time.time()


class FakeClock:
    """A settable clock for tests and simulations.

    Examples
    --------
    >>> clock = FakeClock(1000.0)
    >>> clock.advance(5)
    >>> clock()
    1005.0
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        self.now += float(seconds)
