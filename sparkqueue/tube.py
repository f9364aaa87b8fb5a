"""Tube: the Tarantool queue verbs, the docstrings users read.

Each verb checks its input (:mod:`sparkqueue.validate`) and hands the work to
the tube's storage: :class:`~sparkqueue.single.SingleTube` for a tube of one
shard, which hands what changes (its :class:`~sparkqueue.engine.verbs.Op`)
to the engine (:mod:`sparkqueue.engine`), one Delta commit, all or nothing;
:class:`~sparkqueue.sharded.ShardedTube` for a tube of several, which routes
to its shards' SingleTubes. A row in the wrong state or leased to someone
else fails the whole commit, then a diagnostic read names every offending id.
Commit conflicts are retried, never surfaced while the deadline allows.
Which ready rows a take leases is the driver's (:mod:`sparkqueue.drivers`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, SupportsIndex, overload

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql.streaming.query import StreamingQuery

from . import store as st
from . import streaming, validate
from .engine import put as putting
from .engine import shards as sh
from .engine import verbs
from .engine.context import TubeContext
from .errors import InvalidOption, NotSupported, TaskNotFound
from .task import Task, TaskState
from .validate import URGENT_PRI

if TYPE_CHECKING:
    from .single import SingleTube

__all__ = ["Tube", "Tasks", "URGENT_PRI", "Callback"]

#: Tasks a verb acts on: an id (any integer, numpy's too), a collection of ids, or a
#: DataFrame with a ``task_id`` column.
TaskId = int | SupportsIndex
Tasks = TaskId | Collection[TaskId] | DataFrame
Callback = Callable[[DataFrame, str], Any]
Opt = float | int | Column | None
#: One task's payload: a dict of fields, or a scalar (a struct with one field, ``value``).
Payload = dict[str, Any] | str | int | float | bool | bytes | None


class Tube(abc.ABC):
    """One tube (queue). Get it from ``Queue.create_tube`` or ``Queue.tube``.

    The verbs check their input here and hand the work to the tube's storage:
    the methods named with a leading underscore, which
    :class:`~sparkqueue.single.SingleTube` (one shard) and
    :class:`~sparkqueue.sharded.ShardedTube` (several) implement. ``context``
    gives the tube's clock, owner, defaults and driver (a sharded tube's
    shards share them)."""

    def __init__(self, context: TubeContext, callbacks: dict[str, Callback],
                 drop: Callable[[Tube], None]) -> None:
        self._ctx = context
        self.name = context.name
        self.type = context.type
        self.driver = context.driver
        self.options = dict(context.options)
        self._callbacks = callbacks
        self._dropper = drop

    def __repr__(self) -> str:
        return f"Tube({self.name!r}, type={self.type!r})"

    @property
    def context(self) -> TubeContext:
        """What the engine knows of this tube (for sparkqueue's own jobs: the
        sweeper, the streaming sink, the Consumer); a sharded tube's is its
        first shard's, and each of its ``parts`` has its own."""
        return self._ctx

    def _need_ttl(self, what: str) -> None:
        if not self.driver.uses_ttl:
            raise NotSupported(f"{self.type} tube {self.name!r} does not support {what}")

    def drop(self) -> None:
        """Remove the tube and its tables; refuses with InvalidState while a task is taken."""
        self._dropper(self)

    @property
    @abc.abstractmethod
    def parts(self) -> list[SingleTube]:
        """The tube's shards, each a tube over one inbox and tasks table of its own
        (for sparkqueue's own jobs); a tube of one shard is its own only part."""

    @abc.abstractmethod
    def apply_op(self, op: verbs.Op, tasks: Any, **kwargs: Any) -> DataFrame:
        """Commit ``op`` on ``tasks`` (validated by the caller where it must be): the
        tasks it changed (none: an empty DataFrame)."""

    @overload
    def put(self, data: DataFrame | list[Any] | tuple[Any, ...], *, pri: Opt = None,
            ttl: Opt = None, ttr: Opt = None, delay: Opt = None,
            utube: str | Column | None = None, timeout: float | None = None) -> DataFrame: ...

    @overload
    def put(self, data: Payload, *, pri: Opt = None, ttl: Opt = None, ttr: Opt = None,
            delay: Opt = None, utube: str | Column | None = None,
            timeout: float | None = None) -> Task: ...

    def put(self, data: Any, *, pri: Opt = None, ttl: Opt = None, ttr: Opt = None,
            delay: Opt = None, utube: str | Column | None = None,
            timeout: float | None = None) -> DataFrame | Task:
        """Put tasks: one per DataFrame row, or one per dict/scalar.

        Parameters
        ----------
        data
            A DataFrame (all its columns become each task's payload), a dict
            or scalar (one task), or a list of them.
        pri, ttl, ttr, delay
            Python numbers, or Columns of per-row values; the tube's defaults
            otherwise. Only for drivers that support them.
        utube
            The sub-queue (utube drivers).
        timeout
            limfifottl: seconds to wait for room.

        Returns
        -------
        DataFrame of the created tasks (``ready``, or ``delayed`` when
        ``delay > 0``) for DataFrame and list input; a :class:`Task` for a
        single dict or scalar.

        Examples
        --------
        >>> tube.put(spark.createDataFrame([("a.com",)], ["url"]))   # doctest: +SKIP
        >>> tube.put({"url": "b.com"}, delay=30).task_id              # doctest: +SKIP
        """
        opts = putting.put_options(self._ctx, pri=pri, ttl=ttl, ttr=ttr, delay=delay,
                                   utube=utube, timeout=timeout)
        return self._put(data, event="put", opts=opts)

    @overload
    def urgent(self, data: DataFrame | list[Any] | tuple[Any, ...], **opts: Any) -> DataFrame: ...

    @overload
    def urgent(self, data: Payload, **opts: Any) -> Task: ...

    def urgent(self, data: Any, **opts: Any) -> DataFrame | Task:
        """Like :meth:`put`, ahead of every other task (the most urgent priority)."""
        if opts.get("pri") is not None:
            raise InvalidOption("urgent() sets the priority itself; do not pass pri")
        opts.pop("pri", None)
        return self._put(data, urgent=True, event="put",
                         opts=putting.put_options(self._ctx, **opts))

    @abc.abstractmethod
    def _put(self, data: Any, *, event: str, opts: putting.PutOptions,
             urgent: bool = False) -> DataFrame | Task:
        """Write the put of ``data`` (checked ``opts``)."""

    def take(self, n: int = 1, *, timeout: float = 0.0, owner: str | None = None,
             window: int | None = None) -> DataFrame:
        """Lease up to ``n`` ready tasks to ``owner``, lowest ``(pri, task_id)`` first.

        Waits up to ``timeout`` seconds (``float("inf")``: forever) for at
        least one task. The returned DataFrame is read at the version the take
        committed, so re-evaluating it gives the same rows.

        Examples
        --------
        >>> batch = tube.take(1000, timeout=5)      # doctest: +SKIP
        >>> tube.ack(batch)                         # doctest: +SKIP
        """
        n, wait, who, win = self.take_args(n, timeout, owner, window)
        return self._take(n, wait, who, win)

    @abc.abstractmethod
    def _take(self, n: int, wait: float, who: str, win: int) -> DataFrame:
        """:meth:`take` with its arguments checked."""

    def explain_take(self, n: int = 1, *, owner: str | None = None) -> dict[str, Any]:
        """How ``take(n)`` would commit now, without taking or writing anything: the
        strategy it tries first (``strategy``), those it would fall back to, in
        order (``then``), and the facts that chose them (``facts``: the engine,
        the driver's capabilities, whether puts wait in the inbox, ...). The
        strategies and when each runs are docs/design.md's table ("Take"); the
        commit of a take names the one that committed in its tag (``plan``).

        Examples
        --------
        >>> tube.explain_take(1000)["strategy"]     # doctest: +SKIP
        'head-files'
        """
        n, _, who, _ = self.take_args(n, 0.0, owner, None)
        return self._explain_take(n, who)

    @abc.abstractmethod
    def _explain_take(self, n: int, who: str) -> dict[str, Any]:
        """:meth:`explain_take` with its arguments checked."""

    def take_args(self, n: int, timeout: float, owner: str | None,
                  window: int | None) -> tuple[int, float, str, int]:
        """:meth:`take`'s arguments, checked: ``(n, timeout, owner, window)``."""
        n = validate.batch("n", n)
        wait = validate.seconds("timeout", timeout)
        if window is not None:
            if not self.driver.uses_utube:
                raise NotSupported(f"{self.type} tube {self.name!r} has no sub-queue window")
            window = validate.batch("window", window)
        return n, wait, self._ctx.who(owner), window or int(self._ctx.default("window") or 1)

    def ack(self, tasks: Tasks, *, owner: str | None = None) -> DataFrame:
        """Complete taken tasks (only their owner may); they leave the tube.

        Returns the tasks with status ``done``. All or nothing: one task not
        taken by ``owner`` fails the whole batch and changes nothing.
        """
        return self.apply_op(verbs.ACK, tasks, owner=owner)

    def release(self, tasks: Tasks, *, owner: str | None = None, delay: float | None = None,
                ttl: float | None = None) -> DataFrame:
        """Return taken tasks to ``ready``, or ``delayed`` for ``delay`` seconds.

        A delay extends the task's ttl by the same amount (Tarantool's rule);
        ``ttl`` gives the task a fresh time to live counted from now.
        """
        d = 0.0
        if delay is not None:
            self._need_ttl("release(delay=...)")
            d = validate.seconds("delay", delay)
        if ttl is not None:
            self._need_ttl("release(ttl=...)")
            ttl = validate.seconds("ttl", ttl)
        return self.apply_op(verbs.release(d, ttl), tasks, owner=owner)

    def requeue(self, tasks: Tasks, *, owner: str | None = None) -> DataFrame:
        """Return taken tasks to ``ready`` at the end of the queue (a new, higher order key)."""
        return self._requeue(tasks, owner)

    @abc.abstractmethod
    def _requeue(self, tasks: Tasks, owner: str | None) -> DataFrame:
        """:meth:`requeue`."""

    def touch(self, tasks: Tasks, increment: float, *, owner: str | None = None) -> DataFrame:
        """Extend the ttr and ttl of taken tasks by ``increment`` seconds."""
        self._need_ttl("touch")
        increment = validate.seconds("increment", increment)
        return self.apply_op(verbs.touch(increment), tasks, owner=owner)

    def done(self, task_id: TaskId, data: Any, *, owner: str | None = None) -> DataFrame:
        """Complete a task taken by ``owner`` (default this Queue's) but keep it, with
        ``data`` as payload."""
        return self._done(validate.one_id(task_id), data, owner)

    @abc.abstractmethod
    def _done(self, ident: list[int], data: Any, owner: str | None) -> DataFrame:
        """:meth:`done` of the task ``ident`` (one checked id)."""

    def bury(self, tasks: Tasks, *, owner: str | None = None) -> DataFrame:
        """Move tasks to ``buried`` from any state (a task taken by another owner refuses)."""
        return self.apply_op(verbs.BURY, tasks, owner=owner)

    def kick(self, count: int = 1) -> int:
        """Move up to ``count`` buried tasks to ``ready``, lowest ``(pri, id)`` first."""
        count = validate.batch("count", count, minimum=0)
        return 0 if count == 0 else self._kick(count)

    @abc.abstractmethod
    def _kick(self, count: int) -> int:
        """:meth:`kick` of at least one."""

    def dig(self, task_id: TaskId) -> DataFrame:
        """Move one buried task to ``ready`` (the older API's ``dig``)."""
        return self.apply_op(verbs.DIG, validate.one_id(task_id))

    unbury = dig

    def delete(self, tasks: Tasks) -> DataFrame:
        """Remove tasks whatever their state; returns them with status ``done``."""
        return self.apply_op(verbs.DELETE, tasks)

    @abc.abstractmethod
    def release_all(self) -> int:
        """Return every taken task, whoever holds it, to ``ready``; the count."""

    def peek(self, tasks: Tasks) -> DataFrame:
        """Read tasks without changing them; :class:`TaskNotFound` for a missing single id."""
        ids = validate.task_ids(tasks)
        single = not isinstance(tasks, (*st.DATAFRAMES, list, tuple, set, frozenset))
        out = self._peek(ids)
        if single and out.isEmpty():
            raise TaskNotFound(self.name, ids if isinstance(ids, list) else [])
        return out

    @abc.abstractmethod
    def _peek(self, ids: list[int] | DataFrame) -> DataFrame:
        """The tasks ``ids`` (checked) now, frozen."""

    def meta(self, task_id: TaskId) -> dict[str, Any]:
        """Everything known of one task: times, counters, owner, and ``now``."""
        ident = validate.one_id(task_id)
        now = self._ctx.now()
        row = self._meta_row(ident, now)
        if row is None:
            raise TaskNotFound(self.name, ident)
        return {
            "task_id": int(row["task_id"]), "tube": self.name, "status": row["status"],
            "event": float(row["next_event"]), "pri": int(row["pri"]), "owner": row["owner"],
            "created": float(row["created"]), "ttl": float(row["ttl"]), "ttr": float(row["ttr"]),
            "taken_count": int(row["taken_count"]), "buried_count": int(row["buried_count"]),
            "utube": row["utube"], "now": now,
        }

    @abc.abstractmethod
    def _meta_row(self, ident: list[int], now: float) -> Row | None:
        """The task ``ident``'s row as of ``now``; None when there is none."""

    def tasks_by_state(self, state: str | TaskState) -> DataFrame:
        """All tasks in ``state`` now."""
        return self._by_state(TaskState.parse(state))

    @abc.abstractmethod
    def _by_state(self, state: TaskState) -> DataFrame:
        """:meth:`tasks_by_state`."""

    @abc.abstractmethod
    def statistics(self) -> dict[str, dict[str, int]]:
        """Tarantool's statistics: task counts by state and call counts.

        Counts come from the tables and the Delta commit log, so they cover
        every process and survive restarts. ``calls`` count tasks (a put of a
        1,000-row DataFrame counts 1,000 puts, as 1,000 Tarantool puts would).
        """

    @abc.abstractmethod
    def truncate(self) -> None:
        """Delete every task, keep the tube. No events; counters are untouched."""

    def sink(self, stream_df: DataFrame, checkpoint_location: str, *,
             trigger: dict[str, Any] | None = None, **put_opts: Any) -> StreamingQuery:
        """Feed this tube from a streaming DataFrame: every row one task, exactly once.

        Each micro-batch is one put (``put_opts`` as for :meth:`put`, Columns
        allowed), an idempotent Delta append keyed by the query's id and the
        batch id, so a batch replayed after a crash or restart is not put
        twice. ``trigger`` goes to ``DataStreamWriter.trigger(**trigger)``.

        Examples
        --------
        >>> q = tube.sink(spark.readStream.json(landing, schema), "/ckpt/urls",
        ...               trigger={"availableNow": True}, utube=F.col("domain"))  # doctest: +SKIP
        >>> q.awaitTermination()                                                 # doctest: +SKIP
        """
        return streaming.sink(self, stream_df, checkpoint_location, trigger, put_opts)

    def changes(self, starting_version: int | None = None) -> DataFrame:
        """Streaming DataFrame of task state transitions (the tasks table's change feed).

        Columns: task_id, status (after the change; ``done`` once it left the
        tube), event (the operation), owner, pri, utube, taken_count,
        buried_count, version, committed_at and data.

        Examples
        --------
        >>> burials = tube.changes().where("event = 'bury'")              # doctest: +SKIP
        >>> burials.writeStream.format("console").start()                # doctest: +SKIP
        """
        if not self.options.get("change_feed", True):
            raise NotSupported(f"tube {self.name!r} was created with change_feed=False: "
                               "it keeps no change feed to stream")
        return sh.union(streaming.changes(self.parts, starting_version))

    def on_task_change(self, callback: Callback | None = None) -> Callback | None:
        """Set ``callback(tasks_df, event)``, called after each committed change made
        through this process (through any Queue of the root); returns the previous
        one. ``None`` removes it."""
        if callback is not None and not callable(callback):
            raise InvalidOption(f"on_task_change needs a callable, got {callback!r}")
        previous = self._callbacks.pop(self.name, None)
        if callback is not None:
            self._callbacks[self.name] = callback
        return previous
