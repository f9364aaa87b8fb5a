"""utube and utubettl: sub-queues (``utube``) taken in per-sub-queue windows.

A sub-queue is every task put with the same ``utube`` value; tasks put
without one share a single sub-queue. Within a sub-queue tasks run strictly
in order and never two at once (window 1), or up to ``window`` at once from
its head; across sub-queues they run in parallel.

Which rows a take leases is decided here from one snapshot; that a chosen
sub-queue is still free when the take commits is re-checked by the core
inside the take's own transaction (``engine.ops.apply``), because another
consumer may have leased from it since.
"""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .base import ORDER, Driver

__all__ = ["UtubeDriver", "UtubeTtlDriver", "ORDER"]


class UtubeDriver(Driver):
    """Sub-queues: per take, up to ``window`` tasks from the head of each free sub-queue.

    A sub-queue is free when none of its tasks is taken with a live lease;
    delayed and buried tasks do not block it. Heads are ordered by
    ``(pri, task_id)`` overall and the lowest ``n`` are leased.
    """

    name: ClassVar[str] = "utube"
    uses_utube: ClassVar[bool] = True
    sub_queue_heads: ClassVar[bool] = True

    def choose(self, live: DataFrame, n: int, window: int) -> DataFrame:
        # One pass over each sub-queue's rows: whether any is taken (busy) and its
        # ready rows' ranks, ready first. A join of the busy sub-queues would
        # broadcast them in a Spark job of its own, before the choice's.
        queue = Window.partitionBy("utube")
        ready_first = queue.orderBy(F.col("eff") != "ready", *ORDER)
        return (live.withColumn("_busy", F.max(F.col("eff") == "taken").over(queue))
                .withColumn("_rank", F.row_number().over(ready_first))
                .where((F.col("eff") == "ready") & ~F.col("_busy") & (F.col("_rank") <= window))
                .drop("_busy", "_rank").orderBy(*ORDER).limit(n))


class UtubeTtlDriver(UtubeDriver):
    """utube with priorities inside each sub-queue, ttl, ttr, delays and touch."""

    name: ClassVar[str] = "utubettl"
    uses_ttl: ClassVar[bool] = True
    uses_pri: ClassVar[bool] = True
