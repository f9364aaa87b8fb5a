"""fifo, fifottl and limfifottl: one queue per tube, lowest (pri, id) first."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql import DataFrame

from .base import ORDER, Driver

__all__ = ["FifoDriver", "FifoTtlDriver", "LimFifoTtlDriver"]


class FifoDriver(Driver):
    """Strict first-in first-out: the lowest task ids first (urgent tasks ahead)."""

    name: ClassVar[str] = "fifo"
    head_only: ClassVar[bool] = True

    def choose(self, live: DataFrame, n: int, window: int) -> DataFrame:
        return (live.where("eff = 'ready'")
                .orderBy(*ORDER).limit(n))


class FifoTtlDriver(FifoDriver):
    """fifo with priorities, ttl, ttr, delays and touch."""

    name: ClassVar[str] = "fifottl"
    uses_ttl: ClassVar[bool] = True
    uses_pri: ClassVar[bool] = True


class LimFifoTtlDriver(FifoTtlDriver):
    """fifottl whose live tasks are bounded by ``capacity`` (0 or None: unbounded)."""

    name: ClassVar[str] = "limfifottl"
    uses_capacity: ClassVar[bool] = True
