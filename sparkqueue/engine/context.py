"""What the engine knows of one tube: a small context, never a Tube."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from .. import store as st
from .. import validate
from ..clock import Clock
from ..config import Config
from ..drivers.base import Driver
from ..errors import QueueError, StorageError
from .memory import Memory

__all__ = ["TubeContext"]

R = TypeVar("R")


@dataclass
class TubeContext:
    """One tube as the engine sees it: its name, type, driver and options; the
    root's store, the session, the Queue's clock, settings and owner; where its
    events go; and what this process has learned of it (kept between calls).

    ``emit(tasks, event)`` hands a committed change to the tube's
    ``on_task_change`` callback, and ``listening()`` says whether it has one
    (so that a change no one reads is not built); ``registered()`` lists the
    tubes of the root (an error for a missing table says whether the tube was
    dropped).
    """

    name: str
    type: str
    driver: Driver
    options: dict[str, Any]
    layout: st.Layout
    spark: SparkSession
    clock: Clock
    config: Config
    owner: str
    emit: Callable[[DataFrame, str], None]
    registered: Callable[[], list[str]]
    listening: Callable[[], bool] = lambda: True
    #: the newest inbox version known to be ingested (by this process or another)
    ingested_upto: int = -1
    #: per table path: (version read up to, call counts), see ``stats.logged_calls``
    stats_cache: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)
    #: the payload's schema, once known (only the first put sets it)
    schema: T.StructType | None = None
    #: which of the tube's shards this context's tables are (see :mod:`sparkqueue.shards`)
    shard: int = 0
    #: what the Queue's calls leave for its later calls (shared by its tubes' contexts)
    memory: Memory = field(default_factory=Memory)
    #: Delta conflicts this context's commits retried (what a sharded take routes by)
    conflicts: int = 0

    @property
    def shards(self) -> int:
        """How many shards the tube has (1: one inbox and one tasks table)."""
        return int(self.options.get("shards", 1))

    @property
    def key(self) -> str:
        """The name the store knows this context's tables by: the tube's, or its shard's."""
        return st.shard_key(self.name, self.shard)

    def capacity(self) -> int:
        """The live tasks this context's tables may hold (0: no bound): the tube's
        capacity, split evenly among its shards (the shares add up to it), so
        that no two shards spend the same room."""
        total, n = int(self.options.get("capacity") or 0), self.shards
        return total // n + (1 if self.shard < total % n else 0) if total else 0

    def task_id(self, row: int) -> int:
        """The task id of the ``row``-th task put to this context's inbox (0, 1, ...):
        rows of shard ``k`` of ``N`` get ``k``, ``k + N``, ``k + 2N``, ...; so ids
        are unique across a tube's shards and ordered within each, and an id
        names its shard (``id % N``). One shard: the row's own number."""
        return row * self.shards + self.shard

    def now(self) -> float:
        """The Queue's clock: every ttl, ttr, delay and lease is reckoned from it."""
        return float(self.clock())

    def deadline(self, at_least: float = 0.0) -> float:
        """When a call stops retrying conflicts (monotonic seconds)."""
        return time.monotonic() + max(self.config.conflict_timeout, at_least)

    def who(self, owner: str | None) -> str:
        """The lease owner: ``owner`` (checked), or the Queue's."""
        return self.owner if owner is None else validate.owner(owner)

    def default(self, key: str) -> Any:
        """The tube's default for an option (None: no default)."""
        return self.options.get(key)

    def retrying(self, fn: Callable[[], R], *, what: str, deadline: float | None = None) -> R:
        """``fn()``, :meth:`guarded`, its Delta conflicts retried with backoff until
        ``deadline`` (monotonic seconds; default: the tube's conflict timeout), each
        counted in :attr:`conflicts`."""
        def counted() -> None:
            self.conflicts += 1
        return self.guarded(lambda: st.retrying(
            fn, deadline=deadline or self.deadline(), what=what, on_conflict=counted))

    def guarded(self, fn: Callable[[], R]) -> R:
        """``fn()``, with a missing table turned into the error that says why:
        :class:`TubeNotFound` for a dropped tube, :class:`StorageError` naming the
        table for a registered one; a failure of the storage itself (S3's errors,
        a lost connection) into a :class:`StorageError` naming the tube's folder
        and the storage's own words."""
        where = self.layout.tube_dir(self.name)

        def explained() -> R:
            try:
                return fn()
            except Exception as e:
                # a StorageError that names a tube was explained by a guard within
                if (isinstance(e, StorageError) and e.tube is None and not e.transient) or (
                        not isinstance(e, QueueError) and st.is_missing_table(e)):
                    raise self._missing_table(where, e) from e
                raise
        return st.storage_guarded(where, explained, self.name)

    def _missing_table(self, where: str, e: BaseException) -> QueueError:
        """The error for ``e``, a table of the tube found missing: whether the tube
        was dropped is the registry's to say (:func:`store.missing_table_error`)."""
        try:
            known = self.registered()
        except Exception as again:  # noqa: BLE001 (the registry is unreachable too)
            if isinstance(again, StorageError) and again.transient:  # the storage failing
                return StorageError(again.path, again.problem, self.name, transient=True)
            return st.storage_error(where, again, self.name) or StorageError(
                where, "a table of the tube is missing, and the registry cannot be read: "
                f"{st.first_line(again)}", self.name)
        return st.missing_table_error(self.name, where, e, known)
