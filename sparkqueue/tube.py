"""Tube: the Tarantool queue verbs over one tube's Delta tables.

The rules live here: task states and their transitions, ownership, time
(ttl, ttr, delay, leases, from the Queue's clock), statistics and events.
Which ready rows a take leases is the driver's (sparkqueue.drivers).

Every verb that changes tasks is one Delta MERGE whose clauses carry the
checks: a row in the wrong state or leased to someone else fails the whole
MERGE through ``raise_error`` (nothing is written), then a diagnostic read
names every offending id. Commit conflicts are retried, never surfaced while
the deadline allows.
"""

from __future__ import annotations

import math
import numbers
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.query import StreamingQuery

from . import storage as st
from . import streaming, validate
from .drivers.base import Driver
from .errors import (
    CapacityExceeded,
    InvalidOption,
    NotSupported,
    QueueError,
    SchemaMismatch,
    StorageError,
    TaskNotFound,
    Timeout,
)
from .storage import CommitTag, effective_status, sql_num
from .task import LIVE_STATES, Task, TaskState

if TYPE_CHECKING:
    from .queue import Queue

__all__ = ["Tube", "Tasks", "URGENT_PRI"]

#: ``urgent`` puts use the most urgent priority there is, ahead of any a user may give.
URGENT_PRI = validate.PRI_RANGE[0] - 1
#: Tarantool's statistics keys, always present.
CALL_KEYS = ("put", "take", "ack", "release", "bury", "kick", "delete", "touch", "ttl", "ttr",
             "delay")
#: How operations count in ``calls`` (others count under their own name).
CALL_NAME = {"release_all": "release", "dig": "kick"}
#: Choices of at most this many tasks are collected to the driver (one Spark job less).
COLLECT_UPTO = 10_000
#: Expiries a commit writes down, by the stored status of the rows it chose: a
#: stored ``taken`` row chosen while ready had its lease end (ttr), a stored
#: ``delayed`` one its delay end; the sweep marks ttl-expired rows ``expired``.
EXPIRY_COUNTS = {"ttr": "taken", "delay": "delayed", "ttl": "expired"}
#: How a commit's rows count, for commits that are not one verb's MERGE (its rows
#: updated and deleted) or DELETE (an ack that removed whole files, its rows deleted):
#: a put counts the rows it wrote; a take that also acked a consumer's previous
#: batch counts its updates as takes and its deletes as acks.
CALL_METRICS = {
    "put": {"put": ("numOutputRows",)},
    "take+ack": {"take": ("numTargetRowsUpdated",), "ack": ("numTargetRowsDeleted",)},
    "ingest+take": {"take": ("take",)},  # from its tag: an append has no rows-updated metric
}
#: The Delta transaction id that puts of a capacity tube record, one after another.
CAPACITY_TXN = "sq-capacity"
#: A per-row option that ``checked`` refused, in the write's error.
BAD_ROW = re.compile(r"sparkqueue:InvalidOption:0 (.*?)(?:\.? SQLSTATE|\n|$)")
#: Commits of the machinery, not of a Tarantool verb: they count no calls.
NOT_CALLS = frozenset({"ingest", "create", "truncate", "sweep", "purge"})
#: Operations whose tasks count as completed (``tasks.done``).
COMPLETING = ("ack", "delete", "done", "ttl")

Tasks = int | list[int] | DataFrame
R = TypeVar("R")
Callback = Callable[[DataFrame, str], Any]
#: A take's choice: the chosen rows, or the id range ``(lo, hi)`` whose every row
#: is chosen (known from file statistics), or None when nothing can be chosen.
Chosen = DataFrame | tuple[int, int] | None
Opt = float | int | Column | None


@dataclass(frozen=True)
class _Op:
    """One state-changing MERGE: which rows may change, and how."""

    name: str
    guard: str | None  # SQL of the error kind for a row that must not change, or NULL
    action: dict[str, str] | None  # UPDATE SET; None means DELETE
    skip: str | None = None  # SQL: rows that match but are left as they are
    # error kind for ids with no row; None: such ids are passed over (a take's
    # choice that was deleted meanwhile), which keeps the MERGE matched-only
    missing: str | None = "TaskNotFound"
    # Whether the op may touch tasks still in the inbox (ready ones): only then is
    # the inbox ingested first. Ops on taken or buried tasks never need to.
    pending: bool = False
    # utube takes: each row's sub-queue must have no live lease in the snapshot the
    # MERGE commits on; the source then carries ``arg_busy`` for the guard
    exclusive: bool = False
    # SQL: matched rows to delete rather than update (the sweep's ttl expiry)
    delete_when: str | None = None
    # The guard only ever says Stale, and the action names its owner and token as
    # ``{owner}`` and ``{token}``: a choice of consecutive ids may then run as an
    # UPDATE of their id range that leaves stale rows as they are, instead of a
    # MERGE that joins a source (see ``Tube._update_range``)
    by_range: bool = False


@dataclass(frozen=True)
class _PutOptions:
    """put()'s options, validated: Python values or Columns of per-row values."""

    pri: int | Column | None
    times: dict[str, float | Column]
    utube: str | Column | None
    timeout: float | None


class Tube:
    """One tube (queue). Get it from ``Queue.create_tube`` or ``Queue.tube``."""

    def __init__(self, queue: Queue, name: str, type: str, driver: Driver,
                 options: dict[str, Any]) -> None:
        self._q = queue
        self.name = name
        self.type = type
        self.driver = driver
        self.options = dict(options)
        self._ingested_upto = -1
        self._stats_cache: dict[str, tuple[int, dict[str, int]]] = {}
        self._schema: T.StructType | None = None  # the payload's, once known

    def __repr__(self) -> str:
        return f"Tube({self.name!r}, type={self.type!r})"

    # -- plumbing -------------------------------------------------------------------

    @property
    def _layout(self) -> st.Layout:
        return self._q._layout

    @property
    def _spark(self) -> SparkSession:
        return self._q.spark

    def _now(self) -> float:
        return float(self._q.clock())

    def _deadline(self, at_least: float = 0.0) -> float:
        return time.monotonic() + max(self._q.config.conflict_timeout, at_least)

    def _owner(self, owner: str | None) -> str:
        return self._q.owner if owner is None else validate.owner(owner)

    def _one_id(self, task_id: Any) -> list[int]:
        if isinstance(task_id, bool) or not isinstance(task_id, numbers.Integral):
            raise InvalidOption(f"expected one task id (an int), got {task_id!r}")
        ids = validate.task_ids(task_id)
        assert isinstance(ids, list)
        return ids

    def _need_ttl(self, what: str) -> None:
        if not self.driver.uses_ttl:
            raise NotSupported(f"{self.type} tube {self.name!r} does not support {what}")

    def _default(self, key: str) -> Any:
        return self.options.get(key)

    def _emit(self, result: DataFrame, event: str) -> None:
        callback = self._q._callbacks.get(self.name)
        if callback is not None:
            callback(result, event)

    def _empty(self) -> DataFrame:
        """An empty task DataFrame (a take that found nothing)."""
        tasks = self._layout.read(self._layout.tasks(self.name))
        if "data" not in tasks.columns:  # not ingested yet: the puts' payload, if any
            payload = self._tube_schema() or T.StructType([])
            tasks = tasks.withColumn("data", F.lit(None).cast(payload))
        return self._spark.createDataFrame([], tasks.select(*st.PUBLIC_COLUMNS).schema)

    def _guarded(self, fn: Callable[[], R]) -> R:
        try:
            return fn()
        except Exception as e:
            if isinstance(e, StorageError) or (
                    not isinstance(e, QueueError) and st.is_missing_table(e)):
                raise st.missing_table_error(self.name, self._layout.tube_dir(self.name), e,
                                             self._q.tubes()) from e
            raise

    # -- inbox → tasks ----------------------------------------------------------------

    def _pending(self, spark: SparkSession, anchor: st.Cursor, upto: int,
                 after: int | None = None, columns: list[str] | None = None,
                 ) -> DataFrame | None:
        """Inbox rows of the puts after ``anchor`` (or after version ``after``) up to
        ``upto``, as task rows (only ``columns`` of them when given: fewer to plan).

        A task's id is its file's first id plus its place in the file
        (:meth:`Layout.put_files`); its other columns come from the row
        (options given as Columns) and from its put's commit tag (the rest).
        """
        files, _ = self._layout.put_files(self.name, anchor, upto)
        files = [f for f in files if after is None or f.version > after]
        if not files:
            return None
        payload = self._tube_schema()
        assert payload is not None  # there were puts
        rows = self._layout.read_files(self._layout.inbox(self.name), [f.name for f in files],
                                       st.inbox_schema(payload), spark)
        fields = FILE_TAG_FIELDS + PUT_TAG_FIELDS
        values = [(f.name, f.first_id, f.version, *_tag_values(f.tag)) for f in files]
        if len(values) <= TAGS_INLINE:  # a literal map: no join, no extra Spark job
            lit = st.sql_literal
            tags = ", ".join(
                lit(v[0], "string") + ", named_struct(" + ", ".join(
                    f"'{k}', {lit(x, t)}" for x, (k, t) in zip(v[1:], fields, strict=True))
                + ")" for v in values)
            rows = rows.selectExpr(
                "*", "_metadata.row_index AS _row",
                f"element_at(map({tags}), _metadata.file_name) AS c")
        else:
            rows = rows.selectExpr("*", "_metadata.file_name AS _file",
                                   "_metadata.row_index AS _row")
            table = spark.createDataFrame(values, "file string, " + ", ".join(
                f"{k} {t}" for k, t in fields))
            table = table.select("file", F.struct(*[k for k, _ in fields]).alias("c"))
            rows = rows.join(F.broadcast(table), rows["_file"] == table["file"])
        return _task_columns(rows, columns)

    def _ingest(self) -> None:
        """Move tasks put since the last ingest into the tasks table, exactly once."""
        layout = self._layout
        upto = layout.latest_version(layout.inbox(self.name))
        if upto <= self._ingested_upto:
            return
        cursor = layout.cursor(self.name)
        if upto > cursor.version:
            tasks = layout.tasks(self.name)
            before = layout.latest_version(tasks)
            _, next_id = layout.put_files(self.name, cursor, upto)
            tag = CommitTag.new("ingest", upto=upto, next_id=next_id)
            with layout.tagged(tag) as sess:
                rows = self._pending(sess, cursor, upto)
                if rows is None:  # only the sweeper's commits (purge, vacuum) since
                    self._ingested_upto = upto
                    return
                layout.write_marker(self.name, cursor, st.Cursor(upto, next_id), rows)
            # the append is skipped when another process ingested from this cursor
            # first, maybe up to an older version: then only the cursor tells
            if not any(tag.token in (info.get("userMetadata") or "")
                       for _, info in layout.commit_infos(tasks, before)):
                return
        self._ingested_upto = upto

    def _live(self, now: float, pending: bool = True) -> DataFrame:
        """Every task (tasks table and puts not yet ingested); its state at ``now`` in ``eff``."""
        layout = self._layout
        tasks = layout.read(layout.tasks(self.name)).where("task_id >= 0")
        upto = layout.latest_version(layout.inbox(self.name)) if pending else -1
        if upto > self._ingested_upto:
            rows = self._pending(self._spark, layout.cursor(self.name), upto)
            if rows is not None:
                tasks = tasks.unionByName(rows, allowMissingColumns=True)
        if "data" not in tasks.columns:  # nothing was ever put: no payload schema yet
            tasks = tasks.withColumn("data", F.struct())
        return tasks.withColumn("eff", F.expr(effective_status(now)))

    def _file_stats(self) -> list[dict[str, Any]] | None:
        """The tasks table's file statistics at its latest version when known without
        a Spark job (:meth:`Layout.files_at`): what a take reads first, to find
        nothing or its whole choice without reading the table. Ingest runs before,
        so puts not yet ingested are in them."""
        layout = self._layout
        path = layout.tasks(self.name)
        files = layout.files_at(path, layout.latest_version(path))
        return None if files is None else list(files.values())

    def _candidates(self, now: float, n: int, acking: list[int] | None = None,
                    bounded: bool = True) -> tuple[DataFrame, bool]:
        """What a take's ``choose`` looks at, and whether it is only the rows near the head.

        Every task; or, where the driver promises it looks only at the head
        (``head_only``, ``sub_queue_heads``) and file statistics bound where
        the ``n`` lowest ready tasks are (:func:`storage.head_bound`), the
        ready tasks at or below that bound, with every taken task for
        ``sub_queue_heads`` drivers (unless ``bounded`` is False).

        ``acking``: tasks the take's own commit acks; they are left out (a lease
        that ended meanwhile would make one ready), and so their sub-queues
        count as free (the ack and the take are one commit).
        """
        layout = self._layout
        path = layout.tasks(self.name)
        bound = None
        if self.driver.head_only or (bounded and self.driver.sub_queue_heads):
            # statistics and the read may see different versions: a bound from an older
            # one can only make a concurrent take return fewer tasks, never skip a lower one
            bound = st.head_bound(layout.file_stats(path), now, n)
        ready = st.ready_when(now)
        if self.driver.head_only:
            live = layout.read(path).where(ready if bound is None else f"({ready}) AND {bound}")
            live = live.where("task_id >= 0").withColumn("eff", F.lit("ready"))
        elif bound is not None:
            # the taken rows tell which sub-queues are busy; past the bound only they count
            live = (layout.read(path).where(f"(({ready}) AND {bound}) OR status = 'taken'")
                    .where("task_id >= 0").withColumn("eff", F.expr(effective_status(now)))
                    .where(f"eff = 'taken' OR {bound}"))
        else:
            live = self._live(now, pending=False)
        live = st.without_ids(live, acking, self._spark) if acking else live
        return live, bound is not None and not self.driver.head_only

    # -- the MERGE every state change goes through ------------------------------------

    def _mutate(self, op: _Op, tasks: Any, extra: dict[str, Column] | None = None,
                event: str | None = None, tag_extra: dict[str, int] | None = None,
                owner: str | None = None, chooser: Callable[[float], DataFrame] | None = None,
                deadline: float | None = None, collect_upto: int = 0) -> DataFrame | None:
        """Apply ``op`` to ``tasks`` (or to the rows ``chooser(now)`` picks) in one commit.

        Returns the changed tasks as of the commit (immutable), or None when
        there was nothing to change.
        """
        done = self._apply(op, tasks, extra, event, tag_extra, owner, chooser, deadline,
                           collect_upto)
        return None if done is None else done[0]

    def _apply(self, op: _Op, tasks: Any, extra: dict[str, Column] | None = None,
               event: str | None = None, tag_extra: dict[str, int] | None = None,
               owner: str | None = None,
               chooser: Callable[[float], Chosen] | None = None,
               deadline: float | None = None, collect_upto: int = 0,
               acking: list[int] | None = None,
               ) -> tuple[DataFrame, dict[str, int]] | None:
        """:meth:`_mutate`, also returning the expiries the commit wrote down (ttl, ttr, delay).

        ``acking``: ids (sorted, distinct) acked in the same commit, all or
        nothing, as :meth:`ack` would (a consumer's previous batch): one MERGE
        instead of two. The result then holds the ``op`` rows only.
        """
        who = self._owner(owner)
        # bad ids fail here, before any Spark job or ingest commit
        ids = None if chooser is not None else validate.task_ids(tasks)
        if isinstance(ids, DataFrame):  # one Spark job, before anything is written
            ids = _collected_ids(ids)
        layout = self._layout
        path = layout.tasks(self.name)

        def attempt() -> tuple[DataFrame, dict[str, int]] | None:
            if op.pending:
                self._ingest()
            now = self._now()
            name = f"{op.name}+ack" if acking else op.name
            tag = CommitTag.new(name, **(tag_extra or {}))
            before = layout.latest_version(path)
            with layout.tagged(tag) as sess:
                keep = ["utube"] if op.exclusive else []
                picked = self._pick(sess, now, ids, chooser, collect_upto, keep)
                if picked is None and not acking:
                    return None
                if picked is None:
                    assert acking
                    base = sess.createDataFrame([], ", ".join(
                        ["task_id long"] + [f"{k} string" for k in keep]))
                    lo, hi, counts = acking[0], acking[-1], dict[str, int]()
                else:
                    base, lo, hi, counts, chosen_count = picked
                    if (op.by_range and not acking and not op.exclusive and not counts
                            and chosen_count == hi - lo + 1):
                        version = self._update_range(sess, op, lo, hi, who, tag, now, before)
                        return layout.changed_at(self.name, version, tag.token, lo, hi).select(
                            *st.PUBLIC_COLUMNS), counts
                chosen = base  # the op's own ids (without the acks riding along)
                acks = None
                if acking:
                    acks = st.id_frame(sess, acking)
                    lo, hi = min(lo, acking[0]), max(hi, acking[-1])
                if op.exclusive:
                    base = self._with_busy(sess, base, now, acking)
                if acks is not None:
                    base = base.withColumn("arg_ack", F.lit(False)).unionByName(
                        acks.withColumn("arg_ack", F.lit(True)), allowMissingColumns=True)
                if counts:
                    sess.conf.set(st.USER_METADATA, CommitTag(
                        tag.op, tag.token, tuple(sorted({**dict(tag.extra), **counts}.items()))
                    ).json())
                source = base.select(
                    "task_id",
                    *[c for c in base.columns if c.startswith("arg_")],
                    F.lit(who).alias("arg_owner"),
                    F.lit(uuid.uuid4().hex).alias("arg_token"),
                    *[col.alias(f"arg_{k}") for k, col in (extra or {}).items()],
                )
                ctx = self._sql_context(now, owner="s.arg_owner", token="s.arg_token")
                builder = DeltaTable.forPath(sess, path).alias("t").merge(
                    source.alias("s"),
                    f"t.task_id = s.task_id AND t.task_id >= {lo} AND t.task_id <= {hi}",
                )
                if op.guard:
                    guard = op.guard.format(**ctx)
                    if acking:
                        guard = (f"CASE WHEN s.arg_ack THEN ({self._OWNED.format(**ctx)}) "
                                 f"ELSE ({guard}) END")
                    builder = builder.whenMatchedUpdate(
                        condition=f"({guard}) IS NOT NULL",
                        set={"task_id": st.raise_guard(guard)},
                    )
                if acking:
                    builder = builder.whenMatchedDelete(condition="s.arg_ack")
                if op.delete_when:
                    builder = builder.whenMatchedDelete(condition=op.delete_when.format(**ctx))
                cond = f"NOT ({op.skip.format(**ctx)})" if op.skip else None
                if op.action is None:
                    builder = builder.whenMatchedDelete(condition=cond)
                else:
                    builder = builder.whenMatchedUpdate(condition=cond,
                                                        set=self._action_set(op, tag, ctx))
                if op.missing:
                    builder = builder.whenNotMatchedInsert(values={
                        "task_id": st.raise_missing(op.missing)})
                elif acking:
                    builder = builder.whenNotMatchedInsert(condition="s.arg_ack", values={
                        "task_id": st.raise_missing()})
                try:
                    builder.execute()
                except Exception as e:
                    failed = st.guard_failure(e)
                    if failed is None:
                        raise
                    # only the acks' guard fails with an error kind (the op's says Stale)
                    raise (self._diagnose(self._ACK, acks, failed, who, now) if acks is not None
                           else self._diagnose(op, base, failed, who, now)) from e
                found = layout.commit_of(path, tag.token, before)
                if found is None and chooser is not None:
                    # Delta commits no MERGE that changed nothing: every chosen row was
                    # removed (a take passes missing ids over) since the choice: choose again
                    raise st.StaleChoice(f"{op.name} on {self.name!r}: its choice is gone")
                if found is None:
                    raise QueueError(f"commit tagged {tag.token} not found in the log of {path}")
                version = found[0]
            changes = layout.changed_at(
                self.name, version, tag.token, lo, hi, updates=op.action is not None,
                removable=chosen if op.action is None or op.delete_when else None,
            ).select(*st.PUBLIC_COLUMNS)
            if acks is not None:
                self._emit(layout.changed_at(self.name, version, tag.token, lo, hi,
                                             updates=False, removable=acks)
                           .select(*st.PUBLIC_COLUMNS), "ack")
                if picked is None:
                    return None
            return changes, counts

        result = self._guarded(lambda: st.retrying(
            attempt, deadline=deadline or self._deadline(), what=f"{op.name} on {self.name!r}"))
        if result is not None:
            self._emit(result[0], event or op.name)
        return result

    @staticmethod
    def _sql_context(now: float, owner: str, token: str) -> dict[str, str]:
        """What an ``_Op``'s SQL templates are formatted with: the effective status
        of the target row ``t`` at ``now``, ``now``, and the owner and lease token."""
        return {"eff": effective_status(now, "t."), "now": sql_num(now),
                "owner": owner, "token": token}

    def _update_range(self, sess: SparkSession, op: _Op, lo: int, hi: int, who: str,
                      tag: CommitTag, now: float, before: int) -> int:
        """Apply a ``by_range`` op to the ids ``lo..hi`` (all chosen) as one UPDATE;
        the version it committed.

        Where a MERGE joins the chosen ids to the table, an UPDATE only filters
        its range. The rows it changes are those the guard passes in the
        transaction's own snapshot, so a row is never leased twice: when a
        concurrent take got some of them first, this take returns the others;
        when it got them all, Delta commits nothing and the take chooses again.
        """
        ctx = self._sql_context(now, owner=st.sql_literal(who, "string"),
                                token=st.sql_literal(uuid.uuid4().hex, "string"))
        assert op.guard is not None
        path = self._layout.tasks(self.name)
        DeltaTable.forPath(sess, path).alias("t").update(
            condition=f"t.task_id BETWEEN {lo} AND {hi} AND ({op.guard.format(**ctx)}) IS NULL",
            set=self._action_set(op, tag, ctx),
        )
        committed = self._layout.commit_of(path, tag.token, before)
        if committed is None or not int(committed[1].get("numUpdatedRows", 0)):
            # every chosen row went stale between the choice and the UPDATE's snapshot
            # (Delta then commits nothing): choose again, as the MERGE's guard would
            raise st.StaleChoice(f"{op.name} of {lo}..{hi} on {self.name!r}")
        return committed[0]

    @staticmethod
    def _action_set(op: _Op, tag: CommitTag, ctx: dict[str, str]) -> dict[str, str | Column]:
        """The SET of an updating ``op``: its action, and who changed the row, in
        which commit, and when its state next changes by itself."""
        assert op.action is not None
        action: dict[str, str | Column] = {k: v.format(**ctx) for k, v in op.action.items()}
        action["changed_by"] = f"'{op.name}'"
        action["change_token"] = f"'{tag.token}'"
        action["next_event"] = st.next_event(*(
            str(action.get(k, f"t.{k}")) for k in ("status", "delay_end", "lease_end", "ttl_end")))
        return action

    def _with_busy(self, sess: SparkSession, base: DataFrame, now: float,
                   acking: list[int] | None = None) -> DataFrame:
        """``base`` with ``arg_busy``: its sub-queue has a live lease when the take commits.

        The read of the tasks table below is not run here: it runs inside the
        MERGE, where Delta plans every scan of the target table on the
        transaction's own snapshot and records it as read. So a lease another
        consumer committed after this take chose its rows is either seen here
        (the guard answers Stale and the take chooses again) or makes the
        commit conflict: a sub-queue is never leased twice.
        """
        leased = (self._layout.read(self._layout.tasks(self.name), sess)
                  .where("status = 'taken'")  # prunes files by their statistics
                  .where(f"{effective_status(now)} = 'taken'"))
        if acking:  # acked in this same commit: their leases end with it
            leased = st.without_ids(leased, acking, sess)
        # a flag, not the joined utube: the sub-queue of tasks put without one is NULL
        leased = leased.select(F.col("utube").alias("busy_utube")).distinct()
        leased = leased.withColumn("arg_busy", F.lit(True))
        flagged = base.join(F.broadcast(leased), base["utube"].eqNullSafe(leased["busy_utube"]),
                            "left")
        return flagged.select("task_id", F.coalesce("arg_busy", F.lit(False)).alias("arg_busy"))

    def _pick(self, sess: SparkSession, now: float, ids: list[int] | DataFrame | None,
              chooser: Callable[[float], Chosen] | None, collect_upto: int,
              keep: list[str] | None = None,
              ) -> tuple[DataFrame, int, int, dict[str, int], int] | None:
        """The ids a MERGE (or range UPDATE) changes, their bounds, how many were
        stored taken/delayed, and how many they are.

        Small choices come to the driver in one job; big ones are checkpointed
        in Spark (one job) and summarized (one more). A choice keeps the
        columns ``keep`` beside ``task_id``.
        """
        keep = keep or []
        if isinstance(ids, list):  # validated, sorted, distinct: no Spark job needed
            if not ids:
                return None
            return st.id_frame(sess, ids), ids[0], ids[-1], {}, len(ids)
        if chooser is not None:
            chosen = chooser(now)
            if chosen is None:  # nothing can be chosen
                return None
            if isinstance(chosen, tuple):  # every id of a range
                lo, hi = chosen
                frame = sess.range(lo, hi + 1).select(F.col("id").alias("task_id"))
                return frame, lo, hi, {}, hi - lo + 1
            frame = chosen.select("task_id", "status", *keep)
        else:
            assert ids is not None
            frame = (ids.select(F.col("task_id").cast("long")).where("task_id IS NOT NULL")
                     .distinct().withColumn("status", F.lit(None).cast("string")))
        if collect_upto:
            rows = frame.collect()
            if not rows:
                return None
            rows = sorted(rows, key=lambda r: int(r["task_id"]))
            stored = [r["status"] for r in rows]
            counts = {k: stored.count(s) for k, s in EXPIRY_COUNTS.items()}
            chosen = sess.createDataFrame(
                [(int(r["task_id"]), *[r[k] for k in keep]) for r in rows],
                frame.select("task_id", *keep).schema)
            return (chosen, int(rows[0]["task_id"]), int(rows[-1]["task_id"]),
                    {k: v for k, v in counts.items() if v}, len(rows))
        base = frame.localCheckpoint(eager=True)
        stats = base.agg(
            F.count("*"), F.min("task_id"), F.max("task_id"),
            *[F.count(F.when(F.col("status") == s, 1)) for s in EXPIRY_COUNTS.values()],
        ).first()
        if stats is None or not stats[0]:
            return None
        counts = {k: int(v) for k, v in zip(EXPIRY_COUNTS, stats[3:], strict=True) if v}
        return base.select("task_id", *keep), int(stats[1]), int(stats[2]), counts, int(stats[0])

    def _diagnose(self, op: _Op, ids: DataFrame, failed: tuple[str, int], who: str,
                  now: float) -> QueueError:
        """Name every id that made ``op`` fail, for an error that says what was wrong."""
        kind = failed[0]
        live = self._live(now).alias("t")
        src = ids.select("task_id").withColumn("arg_owner", F.lit(who)).alias("s")
        joined = src.join(live, F.col("s.task_id") == F.col("t.task_id"), "left")
        eff = effective_status(now, "t.")
        kind_sql = (
            f"CASE WHEN t.task_id IS NULL THEN '{op.missing or 'TaskNotFound'}' "
            f"ELSE ({op.guard or 'NULL'}) END"
        ).format(eff=eff, now=sql_num(now))
        rows = (joined.selectExpr("s.task_id AS id", f"{kind_sql} AS kind", f"{eff} AS state")
                .where("kind IS NOT NULL").collect())
        kinds = {str(r["kind"]) for r in rows}
        kind = next((k for k in ("TaskNotFound", "NotOwner", "InvalidState") if k in kinds), kind)
        ids_of = sorted(int(r["id"]) for r in rows if r["kind"] == kind) or [failed[1]]
        states = {int(r["id"]): str(r["state"]) for r in rows}
        return st.typed_guard_error(self.name, kind, ids_of, who, states)

    # -- put ----------------------------------------------------------------------------

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
        return self._put(data, event="put", opts=self._put_options(
            pri=pri, ttl=ttl, ttr=ttr, delay=delay, utube=utube, timeout=timeout))

    def urgent(self, data: Any, **opts: Any) -> DataFrame | Task:
        """Like :meth:`put`, ahead of every other task (the most urgent priority)."""
        if opts.get("pri") is not None:
            raise InvalidOption("urgent() sets the priority itself; do not pass pri")
        opts.pop("pri", None)
        return self._put(data, urgent=True, event="put", opts=self._put_options(**opts))

    def _put(self, data: Any, *, event: str, opts: _PutOptions,
             urgent: bool = False) -> DataFrame | Task:
        single = not isinstance(data, (DataFrame, list, tuple))
        out = self._guarded(lambda: self._write_put(data, single, urgent, opts, event))
        assert out is not None  # only idempotent (sink) appends are ever skipped
        return out

    def _put_options(self, **opts: Any) -> _PutOptions:
        """Put options checked against the driver and normalized, before any Spark job."""
        given = {k for k, v in opts.items() if v is not None}
        unsupported = given - self.driver.put_options()
        if unsupported:
            raise InvalidOption(
                f"{self.type} tube {self.name!r} does not support put option(s) "
                f"{', '.join(sorted(unsupported))}; it supports "
                f"{', '.join(sorted(self.driver.put_options())) or 'none'}"
            )
        times = {k: validate.time_option(k, opts[k]) for k in ("ttl", "ttr", "delay")
                 if opts.get(k) is not None}
        pri = opts.get("pri")
        if pri is not None and not isinstance(pri, Column):
            pri = validate.pri(pri)
        timeout = opts.get("timeout")
        if timeout is not None:
            timeout = validate.seconds("timeout", timeout)
        utube = opts.get("utube")
        if utube is not None and not isinstance(utube, (str, Column)):
            raise InvalidOption(f"utube must be a string or a Column, got {utube!r}")
        return _PutOptions(pri, times, utube, timeout)

    def _payload(self, data: Any, tube_schema: T.StructType | None) -> tuple[DataFrame, Column]:
        """``data`` as a DataFrame, and its payload: a struct Column of that frame's
        columns, conformed to the tube's schema. The frame keeps every column,
        as per-row options are Columns of them."""
        if isinstance(data, DataFrame):
            if not data.columns:
                raise InvalidOption("a DataFrame put needs at least one column")
            frame = data
        else:
            items = list(data) if isinstance(data, (list, tuple)) else [data]
            if not items:
                raise InvalidOption("put() of an empty list: nothing to put")
            kinds = {isinstance(i, dict) for i in items}
            if len(kinds) > 1:
                raise InvalidOption("put() list mixes dicts and scalars")
            if kinds == {True}:
                keys: list[str] = []
                for item in items:
                    for k in item:
                        if not isinstance(k, str):
                            raise InvalidOption(f"payload keys must be strings, got {k!r}")
                        if k not in keys:
                            keys.append(k)
                rows = [tuple(item.get(k) for k in keys) for item in items]
            else:
                keys, rows = ["value"], [(i,) for i in items]
            if tube_schema is not None and set(keys) <= set(tube_schema.fieldNames()):
                order = tube_schema.fieldNames()
                rows = [tuple(dict(zip(keys, r, strict=True)).get(k) for k in order) for r in rows]
                try:
                    frame = self._spark.createDataFrame(rows, tube_schema)
                except (TypeError, ValueError) as e:
                    raise SchemaMismatch(
                        f"payload does not fit tube {self.name!r}'s schema "
                        f"{tube_schema.simpleString()}: {e}") from e
            else:
                try:
                    frame = self._spark.createDataFrame(rows, keys)
                except (TypeError, ValueError) as e:
                    raise InvalidOption(f"cannot build a payload from {items[:3]!r}: {e}") from e
        incoming = frame.schema
        if tube_schema is None or _fields(incoming) == _fields(tube_schema):
            # as it is: one SQL expression, not a Column per field (each a JVM round trip)
            return frame, F.expr(f"struct({', '.join(map(_quoted, frame.columns))})")
        return frame, conform(incoming, tube_schema, self.name)

    def _tube_schema(self) -> T.StructType | None:
        """The tube's payload schema; None until its first put. Read once: only
        the first put sets it (later ones are conformed to it)."""
        if self._schema is None:
            self._schema = self._data_schema(self._layout.inbox(self.name))
        return self._schema

    def _data_schema(self, path: str) -> T.StructType | None:
        """The payload struct of the table at ``path``; None while it has no ``data``."""
        current = self._layout.read(path).schema
        if "data" not in current.fieldNames():
            return None
        schema = current["data"].dataType
        assert isinstance(schema, T.StructType)
        return schema

    def _write_put(self, data: Any, single: bool, urgent: bool, opts: _PutOptions,
                   event: str, txn: tuple[str, int] | None = None) -> DataFrame | Task | None:
        """Append the tasks to the inbox in one commit; ``txn`` makes it idempotent.

        With ``txn = (app_id, version)`` Delta skips the append when a commit
        with that app id and a version at least as high exists (a micro-batch
        replayed after a crash): then nothing is written and None returned.
        A put of no rows writes nothing and returns no tasks.
        """
        layout = self._layout
        inbox = layout.inbox(self.name)
        tube_schema = self._tube_schema()
        frame, payload = self._payload(data, tube_schema)
        rows, put = self._put_rows(frame, payload, opts, urgent)
        capacity = int(self._default("capacity") or 0) if self.driver.uses_capacity else 0
        until = time.monotonic() + (opts.timeout or 0.0)
        adding = frame.count() if capacity else -1
        deadline = self._deadline(opts.timeout or 0.0)
        while True:
            if adding == 0:
                return self._empty()
            if time.monotonic() > deadline:
                raise Timeout(f"put to {self.name!r} kept losing its turn to other puts")
            anchor = layout.cursor(self.name)  # ids count from here; read before the append
            before = layout.latest_version(inbox)
            if capacity and txn is None:
                # Puts of a capacity tube commit in turn: each records the capacity
                # transaction id at one past the last one's, read before it counts the
                # live tasks. A put that committed after that count took the version,
                # so Delta skips this append (or refuses it, when they race) and it
                # counts again: two puts never both count the same room.
                claim = layout.last_tag_value(inbox, CAPACITY_TXN) + 1
                self._wait_for_room(capacity, adding, until)
                tag = CommitTag.new("put", put=put, **{CAPACITY_TXN: claim})
                appended = self._append(rows, tag, (CAPACITY_TXN, claim), tube_schema is None)
            else:
                tag = CommitTag.new("put", put=put)
                appended = self._append(rows, tag, txn, tube_schema is None)
            # read at the put's own version: the sweeper purges ingested inbox rows later
            found = [v for v, info in layout.commit_infos(inbox, before)
                     if tag.token in (info.get("userMetadata") or "")] if appended else []
            if found:
                break
            if txn is not None:  # an idempotent append Delta skipped: written before
                return None
            if not capacity:  # Delta commits no append of no rows
                return self._empty()
        version = found[0]
        pending = self._pending(self._spark, anchor, version, after=version - 1,
                                columns=st.PUBLIC_COLUMNS)
        created = self._empty() if pending is None else pending
        self._emit(created, event)
        if single:
            row = created.first()
            assert row is not None
            return Task.from_row(row)
        return created

    def _put_rows(self, frame: DataFrame, payload: Column, opts: _PutOptions,
                  urgent: bool) -> tuple[DataFrame, dict[str, Any]]:
        """The inbox rows of a put, and its tag's options.

        Options that are one value for the whole put travel in the commit's tag,
        not in a million identical cells: the rows carry the payload and only the
        options given as Columns (checked as they are written). Ingest derives
        every task column from both (``_task_columns``), the id from the row's
        place in the log.
        """
        put: dict[str, Any] = {"now": self._now()}
        cols: list[Column] = []
        for key in ("ttl", "ttr", "delay"):
            v = opts.times.get(key, self._default(key))
            if isinstance(v, Column):
                cols.append(checked(v, key).alias(key))
            elif v is not None:
                put[key] = float(v)
        put["pri"] = URGENT_PRI if urgent else int(self._default("pri") or 0)
        if isinstance(opts.pri, Column):  # NULLs in it take the tube's default
            cols.append(checked(opts.pri, "pri").alias("pri"))
        elif opts.pri is not None:
            put["pri"] = int(opts.pri)
        if isinstance(opts.utube, Column):
            cols.append(opts.utube.cast("string").alias("utube"))
        elif opts.utube is not None:
            put["utube"] = opts.utube
        return frame.select(payload.alias("data"), *cols), put

    def _append(self, rows: DataFrame, tag: CommitTag, txn: tuple[str, int] | None,
                first: bool) -> bool:
        """Append ``rows`` to the inbox tagged ``tag`` (idempotent with ``txn``);
        False when it conflicted with a put that records the same transaction id.
        ``first``: the tube's first put, which gives it its payload schema."""
        writer = rows.write.format("delta").mode("append").option("userMetadata", tag.json())
        if txn is not None:
            writer = writer.option("txnAppId", txn[0]).option("txnVersion", txn[1])
        if first:
            writer = writer.option("mergeSchema", "true")
        try:
            writer.save(self._layout.inbox(self.name))
        except Exception as e:
            bad = BAD_ROW.search(str(e))
            if bad is not None:
                raise InvalidOption(f"put to {self.name!r}: a row's {bad.group(1)}") from e
            if st.is_conflict(e) and txn is not None and txn[0] == CAPACITY_TXN:
                return False
            raise
        return True

    def _wait_for_room(self, capacity: int, adding: int, until: float) -> None:
        """Return once the tube's live tasks leave room for ``adding`` more; after
        ``until`` (monotonic seconds), :class:`CapacityExceeded`."""
        while True:
            live = self._live(self._now()).where(
                F.col("eff").isin([s.value for s in LIVE_STATES])).count()
            if live + adding <= capacity:
                return
            if time.monotonic() >= until:
                raise CapacityExceeded(self.name, capacity, live, adding)
            time.sleep(min(self._q.config.poll_interval, max(0.0, until - time.monotonic())))

    # -- take -----------------------------------------------------------------------------

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
        n = validate.batch("n", n)
        wait = validate.seconds("timeout", timeout)
        if window is not None:
            if not self.driver.uses_utube:
                raise InvalidOption(f"{self.type} tube {self.name!r} has no sub-queue window")
            window = validate.batch("window", window)
        win = window or int(self._default("window") or 1)
        return self._guarded(lambda: self._take(n, wait, self._owner(owner), win))

    def _take(self, n: int, wait: float, who: str, win: int,
              acking: list[int] | None = None) -> DataFrame:
        """:meth:`take`, validated; ``acking``: ids acked in the take's first commit
        (a consumer's previous batch, see ``_apply``), so a loop pays one MERGE per batch."""
        until = time.monotonic() + wait
        exclusive = self.driver.uses_utube
        take = _Op(
            "take",
            guard="CASE WHEN {eff} <> 'ready' THEN 'Stale' "
                  + ("WHEN s.arg_busy THEN 'Stale' " if exclusive else "") + "END",
            action={
                "status": "'taken'",
                "owner": "{owner}",
                "lease_token": "{token}",
                "lease_end": "least({now} + t.ttr, t.ttl_end)",
                "taken_count": "t.taken_count + 1",
                "delay_end": "0.0D",
            },
            missing=None,
            pending=True,
            exclusive=exclusive,
            by_range=True,
        )
        while True:
            def chooser(now: float, gone: list[int] | None = acking) -> Chosen:
                files = self._file_stats()
                if files is not None and not any(st.may_hold_ready(f, now) for f in files):
                    return None  # nothing can be ready: no Spark job
                if files is not None and self.driver.head_only and not gone:
                    head = st.ready_head(files, now, n)
                    if head is not None:  # whole files of ready tasks: no Spark job
                        return head
                live, near_head = self._candidates(now, n, gone)
                chosen = self.driver.choose(live, n, win)
                if near_head:  # enough free heads near the head, or choose from all
                    chosen = chosen.localCheckpoint(eager=True)
                    if chosen.count() < n:
                        live, _ = self._candidates(now, n, gone, bounded=False)
                        chosen = self.driver.choose(live, n, win)
                return chosen

            if not acking:
                fresh = self._take_fresh(take, n, win, who)
                if fresh is not None:
                    return fresh
            done = self._apply(
                take, None, owner=who, chooser=chooser,
                deadline=self._deadline(wait if wait != float("inf") else 0.0),
                collect_upto=n if n <= COLLECT_UPTO else 0, acking=acking,
            )
            if done is not None:
                return done[0]
            acking = None  # committed (alone, as nothing was ready)
            remaining = until - time.monotonic()
            if remaining <= 0:
                return self._empty()
            time.sleep(min(self._q.config.poll_interval, remaining))

    def _take_fresh(self, take: _Op, n: int, win: int, who: str) -> DataFrame | None:
        """The take's tasks when it could choose only among puts not yet ingested:
        they are ingested with the chosen ones already leased, in one commit.

        That is when file statistics show that the tasks table holds no ready
        task, with a driver that looks only at ready tasks and leases
        (``head_only``, ``sub_queue_heads``): a consumer that keeps up with
        its producers. Each new task is then written once, where an ingest
        and a MERGE would write the leased ones twice and run two commits.
        None when it does not apply or chose nothing (the ingest committed
        all the same): the take then goes the usual way.

        The commit has read the whole tasks table (:meth:`Layout.reading_all`),
        so the leases it saw and the cursor it read stay true until it
        commits, or it conflicts. A conflict also sends the take the usual
        way (ingest, then MERGE), which other commits cannot starve as they
        could a transaction that reads everything.
        """
        driver = self.driver
        if not (driver.head_only or driver.sub_queue_heads):
            return None
        layout = self._layout
        path = layout.tasks(self.name)
        upto = layout.latest_version(layout.inbox(self.name))
        if upto <= self._ingested_upto:
            return None
        try:
            return self._guarded(lambda: self._ingest_taking(take, n, win, who, path, upto))
        except Exception as e:
            if st.is_conflict(e):
                return None
            raise

    def _ingest_taking(self, take: _Op, n: int, win: int, who: str, path: str,
                       upto: int) -> DataFrame | None:
        """:meth:`_take_fresh`'s one attempt."""
        layout = self._layout
        txn = layout.reading_all(path)
        now = self._now()
        files = layout.files_at(path, int(txn.snapshot().version()))
        if files is None or any(st.may_hold_ready(f, now) for f in files.values()):
            return None
        cursor = layout.cursor(self.name)
        if cursor.version >= upto:
            self._ingested_upto = upto
            return None
        _, next_id = layout.put_files(self.name, cursor, upto)
        tag = CommitTag.new("ingest+take", upto=upto, next_id=next_id)
        with layout.tagged(tag) as sess:
            pending = self._pending(sess, cursor, upto)
            if pending is None or not layout.fits(txn, pending):
                return None
            pending = pending.localCheckpoint()  # read by the choice and the write
            live = pending.withColumn("eff", F.expr(effective_status(now)))
            held = ([name for name, f in files.items() if st.may_hold(f, "taken")]
                    if self.driver.sub_queue_heads else [])
            if held:  # the tasks table's leases keep their sub-queues busy
                leased = (layout.read_task_files(path, held, sess).where("status = 'taken'")
                          .where("task_id >= 0").withColumn("eff", F.expr(effective_status(now))))
                live = live.unionByName(leased.where("eff = 'taken'"))
            picked = self._pick(sess, now, None, lambda _: self.driver.choose(live, n, win),
                                n if n <= COLLECT_UPTO else 0)
            rows, changes = pending, pending.withColumn(st.CHANGE_TYPE, F.lit("insert"))
            if picked is not None:
                chosen, lo, hi, counts, count = picked
                tag = CommitTag(tag.op, tag.token, tuple(sorted(
                    {**dict(tag.extra), **counts, "take": count}.items())))
                sess.conf.set(st.USER_METADATA, tag.json())
                ctx = self._sql_context(now, owner=st.sql_literal(who, "string"),
                                        token=st.sql_literal(uuid.uuid4().hex, "string"))
                action = self._action_set(take, tag, ctx)
                if count == hi - lo + 1:  # a run of ids: no join
                    marked = pending.withColumn("arg_take",
                                                F.expr(f"task_id BETWEEN {lo} AND {hi}"))
                else:
                    marked = pending.join(F.broadcast(chosen.select(
                        "task_id", F.lit(True).alias("arg_take"))), "task_id", "left")

                def with_take(frame: DataFrame, where: str, *extra: str) -> DataFrame:
                    """``frame``'s task columns, with the take's SET where ``where``."""
                    return frame.alias("t").selectExpr(*[
                        f"CASE WHEN {where} THEN {action[c]} ELSE t.{c} END AS {c}"
                        if c in action else c for c in pending.columns], *extra)

                rows = with_take(marked, "t.arg_take")
                # The feed, in one pass over the puts: each put's insert, and a taken
                # one's post-image. No pre-image: it would repeat the insert, a state
                # no version held, and changes() reads inserts and post-images only.
                changes = with_take(marked.withColumn(st.CHANGE_TYPE, F.explode(F.expr(
                    "CASE WHEN arg_take THEN array('insert', 'update_postimage') "
                    "ELSE array('insert') END"))),
                    f"t.{st.CHANGE_TYPE} = 'update_postimage'", st.CHANGE_TYPE)
            version = layout.commit_ingest(txn, self.name, cursor, st.Cursor(upto, next_id),
                                           rows, changes, tag)
        self._ingested_upto = upto
        if picked is None:
            return None
        result = layout.changed_at(self.name, version, tag.token, lo, hi).select(
            *st.PUBLIC_COLUMNS)
        self._emit(result, "take")
        return result

    # -- taken → … ------------------------------------------------------------------------

    _OWNED = ("CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' "
              "WHEN {eff} <> 'taken' THEN 'InvalidState' "
              "WHEN t.owner <> s.arg_owner THEN 'NotOwner' END")

    _ACK = _Op("ack", _OWNED, None)

    def ack(self, tasks: Tasks, *, owner: str | None = None) -> DataFrame:
        """Complete taken tasks (only their owner may); they leave the tube.

        Returns the tasks with status ``done``. All or nothing: one task not
        taken by ``owner`` fails the whole batch and changes nothing.
        """
        ids = validate.task_ids(tasks)
        if isinstance(ids, DataFrame):
            ids = _collected_ids(ids)
        if isinstance(ids, list):
            acked = self._ack_files(ids, self._owner(owner))
            if acked is not None:
                return acked
        return self._mutate(self._ACK, ids, owner=owner) or self._empty()

    def _ack_files(self, ids: list[int], who: str) -> DataFrame | None:
        """Ack ``ids`` by removing whole the data files that hold exactly them
        (:func:`storage.whole_files`): one commit that reads and writes no data,
        where a MERGE would read, join and drop every row. The acked tasks, or
        None when they are not such files: then the MERGE acks them or says
        why not (so a failure here is left to it too).
        """
        if not ids:
            return None
        layout = self._layout
        tag = CommitTag.new("ack")

        def attempt() -> int | None:
            now = self._now()
            return layout.remove_files(layout.tasks(self.name),
                                       lambda files: st.whole_files(files, ids, who, now), tag)

        try:
            version = self._guarded(lambda: st.retrying(
                attempt, deadline=self._deadline(), what=f"ack on {self.name!r}"))
        except QueueError:
            return None
        if version is None:
            return None
        acked = layout.changed_at(self.name, version, tag.token, ids[0], ids[-1], updates=False,
                                  removable=st.id_frame(self._spark, ids))
        result = acked.select(*st.PUBLIC_COLUMNS)
        self._emit(result, "ack")
        return result

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
            t_new = validate.seconds("ttl", ttl)
        action = {
            "status": "'delayed'" if d > 0 else "'ready'",
            "owner": "NULL", "lease_token": "NULL", "lease_end": "0.0D",
            "delay_end": f"{{now}} + {sql_num(d)}" if d > 0 else "0.0D",
            "ttl_end": f"t.ttl_end + {sql_num(d)}",
            "ttl": f"t.ttl + {sql_num(d)}",
        }
        if ttl is not None:
            action["ttl"] = sql_num(t_new)
            action["ttl_end"] = f"{{now}} + {sql_num(d)} + {sql_num(t_new)}"
        return self._mutate(_Op("release", self._OWNED, action), tasks, owner=owner) \
            or self._empty()

    def requeue(self, tasks: Tasks, *, owner: str | None = None) -> DataFrame:
        """Return taken tasks to ``ready`` at the end of the queue (a new, higher order key)."""
        def last() -> Any:
            self._ingest()
            return self._layout.read(self._layout.tasks(self.name)).agg(
                F.max("order_key"), F.max("task_id")).first()
        top = self._guarded(last)
        base = max(int(top[0] or 0), int(top[1] or 0)) + 1 if top else 1
        action = {"status": "'ready'", "owner": "NULL", "lease_token": "NULL",
                  "lease_end": "0.0D", "order_key": f"{base} + s.arg_rank"}
        op = _Op("requeue", self._OWNED, action)
        rank = F.row_number().over(Window.orderBy("task_id")) - 1
        return self._mutate(op, tasks, extra={"rank": rank}, owner=owner) or self._empty()

    def touch(self, tasks: Tasks, increment: float, *, owner: str | None = None) -> DataFrame:
        """Extend the ttr and ttl of taken tasks by ``increment`` seconds."""
        self._need_ttl("touch")
        inc = sql_num(validate.seconds("increment", increment))
        action = {"ttr": f"t.ttr + {inc}", "ttl": f"t.ttl + {inc}",
                  "ttl_end": f"t.ttl_end + {inc}",
                  "lease_end": f"least(t.lease_end + {inc}, t.ttl_end + {inc})"}
        return self._mutate(_Op("touch", self._OWNED, action), tasks, owner=owner) \
            or self._empty()

    def done(self, task_id: int, data: Any) -> DataFrame:
        """Complete a task taken by this Queue's owner but keep it, with ``data`` as payload."""
        ident = self._one_id(task_id)
        # the tasks table's: before any ingest it has none, and no task can be taken
        tube_schema = self._data_schema(self._layout.tasks(self.name))
        frame, col = self._payload(data, tube_schema)
        row = frame.select(col.alias("p")).first()
        assert row is not None
        payload = row["p"]
        op = _Op("done", self._OWNED, {
            "status": "'done'", "owner": "NULL", "lease_token": "NULL", "lease_end": "0.0D",
            "data": "s.arg_data"})
        if tube_schema is None:  # nothing was ever put: no task can be taken
            raise TaskNotFound(self.name, ident)
        value = _struct_literal(payload, tube_schema)
        return self._mutate(op, ident, extra={"data": value}) or self._empty()

    # -- bury / kick / dig / delete ------------------------------------------------------

    def bury(self, tasks: Tasks, *, owner: str | None = None) -> DataFrame:
        """Move tasks to ``buried`` from any state (a task taken by another owner refuses)."""
        op = _Op(
            "bury",
            "CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' "
            "WHEN {eff} = 'done' THEN 'InvalidState' "
            "WHEN {eff} = 'taken' AND t.owner <> s.arg_owner THEN 'NotOwner' END",
            {"status": "'buried'", "owner": "NULL", "lease_token": "NULL", "lease_end": "0.0D",
             "delay_end": "0.0D", "buried_count": "t.buried_count + 1"},
            skip="{eff} = 'buried'",
            pending=True,
        )
        return self._mutate(op, tasks, owner=owner) or self._empty()

    _UNBURY = {"status": "'ready'", "delay_end": "0.0D"}

    def kick(self, count: int = 1) -> int:
        """Move up to ``count`` buried tasks to ``ready``, lowest ``(pri, id)`` first."""
        count = validate.batch("count", count, minimum=0)
        if count == 0:
            return 0
        op = _Op("kick", "CASE WHEN {eff} <> 'buried' THEN 'Stale' END", self._UNBURY,
                 missing=None)
        result = self._mutate(op, None, collect_upto=count if count <= COLLECT_UPTO else 0,
                              chooser=lambda now: self._live(now, pending=False).where(
            "eff = 'buried'").orderBy("pri", "order_key", "task_id").limit(count))
        return 0 if result is None else result.count()

    def dig(self, task_id: int) -> DataFrame:
        """Move one buried task to ``ready`` (the older API's ``dig``)."""
        ident = self._one_id(task_id)
        op = _Op("dig", "CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' "
                 "WHEN {eff} <> 'buried' THEN 'InvalidState' END", self._UNBURY)
        return self._mutate(op, ident) or self._empty()

    unbury = dig

    def delete(self, tasks: Tasks) -> DataFrame:
        """Remove tasks whatever their state; returns them with status ``done``."""
        op = _Op("delete", "CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' END", None,
                 pending=True)
        return self._mutate(op, tasks) or self._empty()

    def release_all(self) -> int:
        """Return every taken task, whoever holds it, to ``ready``; the count."""
        op = _Op("release_all", "CASE WHEN {eff} <> 'taken' THEN 'Stale' END",
                 {"status": "'ready'", "owner": "NULL", "lease_token": "NULL",
                  "lease_end": "0.0D"}, missing=None)
        result = self._mutate(op, None, event="release",
                              chooser=lambda now: self._live(now, pending=False)
                              .where("status = 'taken'")  # prunes files by their statistics
                              .where("eff = 'taken'"))
        return 0 if result is None else result.count()

    # -- the sweeper's part ------------------------------------------------------------

    _DUE = "{eff} = 'expired' OR ({eff} = 'ready' AND t.status IN ('taken', 'delayed'))"

    def _expire(self) -> dict[str, int]:
        """Write down what the clock has made due, in one commit; the counts per expiry.

        Rows past their ttl are deleted (``ttl``); ended leases (``ttr``) and
        passed delays (``delay``) become ``ready``. Reads already apply these
        at their own time, so this changes no answer: it keeps the table small
        and its stored states current for SQL readers. Due rows are found by
        ``next_event`` (Tarantool's next-event index), whose file statistics
        let Delta skip every file with nothing due. A row that changed after
        it was chosen (another sweeper, a take, an ack) fails the MERGE as
        stale and the choice is made again, so nothing is counted twice.
        """
        op = _Op(
            "sweep",
            guard=f"CASE WHEN NOT ({self._DUE}) THEN 'Stale' END",
            action={"status": "'ready'", "owner": "NULL", "lease_token": "NULL",
                    "lease_end": "0.0D", "delay_end": "0.0D"},
            delete_when="{eff} = 'expired'",
            missing="Stale",
            pending=True,
        )

        def due(now: float) -> DataFrame:
            live = self._live(now, pending=False).where(f"next_event <= {sql_num(now)}")
            return (live.where("eff = 'expired' OR (eff = 'ready' AND status IN "
                               "('taken', 'delayed'))")
                    .withColumn("status", F.when(F.col("eff") == "expired", "expired")
                                .otherwise(F.col("status"))))

        done = self._apply(op, None, chooser=due)
        counts = dict.fromkeys(EXPIRY_COUNTS, 0)
        counts.update(done[1] if done is not None else {})
        return counts

    # -- reads ----------------------------------------------------------------------------

    def _view(self, now: float) -> DataFrame:
        return self._live(now).where("eff <> 'expired'").withColumn("status", F.col("eff"))

    def peek(self, tasks: Tasks) -> DataFrame:
        """Read tasks without changing them; :class:`TaskNotFound` for a missing single id."""
        ids = validate.task_ids(tasks)
        single = not isinstance(tasks, (DataFrame, list, tuple, set, frozenset))

        def read() -> DataFrame:
            view = self._view(self._now())
            if isinstance(ids, DataFrame):
                chosen = view.join(ids.select(F.col("task_id").cast("long")).distinct(),
                                   "task_id", "left_semi")
            else:
                chosen = view.where(F.col("task_id").isin(ids))
            out = chosen.select(*st.PUBLIC_COLUMNS).localCheckpoint(eager=True)
            if single and out.isEmpty():
                raise TaskNotFound(self.name, ids if isinstance(ids, list) else [])
            return out
        return self._guarded(read)

    def meta(self, task_id: int) -> dict[str, Any]:
        """Everything known of one task: times, counters, owner, and ``now``."""
        ident = self._one_id(task_id)
        now = self._now()
        row = self._guarded(lambda: self._view(now).where(F.col("task_id").isin(ident)).first())
        if row is None:
            raise TaskNotFound(self.name, ident)
        return {
            "task_id": int(row["task_id"]), "tube": self.name, "status": row["status"],
            "event": float(row["next_event"]), "pri": int(row["pri"]), "owner": row["owner"],
            "created": float(row["created"]), "ttl": float(row["ttl"]), "ttr": float(row["ttr"]),
            "taken_count": int(row["taken_count"]), "buried_count": int(row["buried_count"]),
            "utube": row["utube"], "now": now,
        }

    def tasks_by_state(self, state: str | TaskState) -> DataFrame:
        """All tasks in ``state`` now."""
        s = TaskState.parse(state)
        return self._guarded(lambda: self._view(self._now()).where(F.col("status") == s.value)
                             .select(*st.PUBLIC_COLUMNS))

    def statistics(self) -> dict[str, dict[str, int]]:
        """Tarantool's statistics: task counts by state and call counts.

        Counts come from the tables and the Delta commit log, so they cover
        every process and survive restarts. ``calls`` count tasks (a put of a
        1,000-row DataFrame counts 1,000 puts, as 1,000 Tarantool puts would).
        """
        return self._guarded(self._statistics)

    def _statistics(self) -> dict[str, dict[str, int]]:
        return self._census(self._now())[0]

    def _census(self, now: float) -> tuple[dict[str, dict[str, int]], float | None]:
        """Statistics at ``now``, and the creation time of the oldest ready task."""
        rows = (self._live(now).groupBy("eff").agg(
            F.count("*").alias("n"),
            *[F.sum(F.when(F.col("status") == s, 1).otherwise(0)).alias(k)
              for k, s in EXPIRY_COUNTS.items() if k != "ttl"],
            F.min("created").alias("oldest"),
        ).collect())
        by_state = {r["eff"]: int(r["n"]) for r in rows}
        calls = dict.fromkeys(CALL_KEYS, 0)
        for key, value in self._logged_calls().items():
            calls[key] = calls.get(key, 0) + value
        # expiries that happened but were not yet written down count at once
        for r in rows:
            if r["eff"] == "ready":
                calls["ttr"] += int(r["ttr"])
                calls["delay"] += int(r["delay"])
        calls["ttl"] += by_state.get("expired", 0)
        tasks = {s.value: by_state.get(s.value, 0) for s in LIVE_STATES}
        tasks["done"] = sum(calls.get(k, 0) for k in COMPLETING)
        tasks["total"] = sum(by_state.get(s.value, 0) for s in LIVE_STATES)
        oldest = next((float(r["oldest"]) for r in rows if r["eff"] == "ready"), None)
        return {"tasks": tasks, "calls": calls}, oldest

    def _logged_calls(self) -> dict[str, int]:
        """Call counts from both tables' commit logs, read incrementally.

        A commit counts the rows it changed under its operation's name (or
        the count its tag holds, where its metrics have none), and the
        expiries it wrote down (its tag's ttl, ttr and delay); commits of the
        machinery (ingest, sweep, purge, ...) count only the latter.
        """
        total: dict[str, int] = {}
        for path in (self._layout.inbox(self.name), self._layout.tasks(self.name)):
            seen, counts = self._stats_cache.get(path, (-1, {}))
            counts = dict(counts)
            for h in self._layout.history(path, seen):
                op = h["tag"]["sq"]
                seen = max(seen, h["version"])
                for k in EXPIRY_COUNTS:
                    counts[k] = counts.get(k, 0) + int(h["tag"].get(k, 0))
                if op in NOT_CALLS:
                    continue
                found = {**h["metrics"], **h["tag"]}
                for name, keys in CALL_METRICS.get(op, {CALL_NAME.get(op, op): (
                        "numTargetRowsUpdated", "numTargetRowsDeleted", "numDeletedRows",
                        "numUpdatedRows")}).items():
                    counts[name] = counts.get(name, 0) + sum(int(found.get(k, 0)) for k in keys)
            self._stats_cache[path] = (seen, counts)
            for k, v in counts.items():
                total[k] = total.get(k, 0) + v
        return total

    # -- whole tube -------------------------------------------------------------------------

    def truncate(self) -> None:
        """Delete every task, keep the tube. No events; counters are untouched."""
        def run() -> None:
            self._ingest()
            with self._layout.tagged(CommitTag.new("truncate")) as sess:
                DeltaTable.forPath(sess, self._layout.tasks(self.name)).delete("task_id >= 0")
        self._guarded(lambda: st.retrying(run, deadline=self._deadline(),
                                          what=f"truncate of {self.name!r}"))

    def drop(self) -> None:
        """Remove the tube and its tables; refuses with InvalidState while a task is taken."""
        self._q._drop(self)

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
        return streaming.changes(self, starting_version)

    def on_task_change(self, callback: Callback | None = None) -> Callback | None:
        """Set ``callback(tasks_df, event)``, called after each committed change made
        through this process; returns the previous one. ``None`` removes it."""
        if callback is not None and not callable(callback):
            raise InvalidOption(f"on_task_change needs a callable, got {callback!r}")
        previous = self._q._callbacks.pop(self.name, None)
        if callback is not None:
            self._q._callbacks[self.name] = callback
        return previous


# -- helpers ---------------------------------------------------------------------------------

#: A put's options that were one value for all its tasks (its commit tag's ``put``).
PUT_TAG_FIELDS = [("now", "double"), ("pri", "long"), ("utube", "string"), ("ttl", "double"),
                  ("ttr", "double"), ("delay", "double")]
#: What ingest knows of each inbox file besides its put's tag (see ``_pending``).
FILE_TAG_FIELDS = [("first_id", "long"), ("inbox_version", "long")]
#: Ingests of up to this many puts carry the puts' tag values as a literal map.
TAGS_INLINE = 64


def _tag_values(put: dict[str, Any]) -> tuple[Any, ...]:
    """A put tag's values in ``PUT_TAG_FIELDS`` order, each one a task column can hold.

    Puts are validated before they are written, but an inbox may hold tags that
    an earlier release let through (a priority past BIGINT, a NaN time); ingest
    must never fail on them, or the tube is stuck: a priority is clamped into
    the range a put may give (urgent's included), a time that is not a
    non-negative number falls back to its default, a utube that is not a string
    to none.
    """
    def number(v: Any) -> float | None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
        return float(v) if ok and v >= 0 else None

    pri = put.get("pri")
    pri = int(pri) if isinstance(pri, (int, float)) and not math.isnan(pri) else 0
    pri = min(max(pri, URGENT_PRI), validate.PRI_RANGE[1])
    utube = put.get("utube") if isinstance(put.get("utube"), str) else None
    now = number(put.get("now"))
    return (now or 0.0, pri, utube, *[number(put.get(k)) for k in ("ttl", "ttr", "delay")])


def _task_row_sql() -> dict[str, str]:
    """SQL for each tasks-table column of a new task, by name (see ``_task_columns``)."""
    ttl = f"coalesce(ttl, c.ttl, {sql_num(st.INF)})"
    delay = "coalesce(delay, c.delay, 0.0D)"
    ttl_end = f"(c.now + {delay} + {ttl})"
    task_id = "c.first_id + _row"
    row = {
        "task_id": task_id,
        "status": f"CASE WHEN {delay} > 0 THEN 'delayed' ELSE 'ready' END",
        "pri": "coalesce(pri, c.pri)",
        "order_key": task_id,
        "utube": "coalesce(utube, c.utube)",
        "created": "c.now",
        "ttl": ttl,
        "ttr": f"coalesce(ttr, c.ttr, {ttl})",
        "delay_end": f"CASE WHEN {delay} > 0 THEN c.now + {delay} ELSE 0.0D END",
        "ttl_end": ttl_end,
        "lease_end": "0.0D",
        "next_event": f"CASE WHEN {delay} > 0 THEN least(c.now + {delay}, {ttl_end}) "
                      f"ELSE {ttl_end} END",
        "owner": "CAST(NULL AS STRING)",
        "lease_token": "CAST(NULL AS STRING)",
        "taken_count": "0L",
        "buried_count": "0L",
        "inbox_version": "c.inbox_version",
        "changed_by": "'put'",
        "change_token": "CAST(NULL AS STRING)",
        "data": "data",
    }
    return {name: row[name] for name, _ in [*st.TASK_COLUMNS, ("data", None)]}


#: ``_task_columns`` as SQL text: two ``selectExpr`` calls cost far less to build
#: than some sixty Column objects, each a round trip to the JVM (in a profile of
#: put, the result's rows took 0.07 s this way and 0.36 s as Columns).
_TASK_ROW_SQL = {name: f"{sql} AS {name}" for name, sql in _task_row_sql().items()}
# every column nullable, as the same columns read from a table are (a CASE
# without ELSE is nullable), so results compare equal whichever way they came
_NULLABLE_SQL = {name: f"CASE WHEN {name} IS NOT NULL THEN {name} END AS {name}"
                 for name in _task_row_sql()}


def _task_columns(joined: DataFrame, columns: list[str] | None = None) -> DataFrame:
    """Task rows from inbox rows (with their place ``_row`` in their file) and,
    in struct ``c``, their file's first id and commit and their put's tag values.

    Tarantool's timing rules for a new task: ttl counts from the put and
    includes the delay; ttr defaults to ttl; a delayed task waits until
    ``now + delay``. A row's own value (an option given as a Column) wins over
    the put's; the tube defaults were resolved into the tag at put time.
    """
    names = columns or list(_TASK_ROW_SQL)
    return (joined.selectExpr(*[_TASK_ROW_SQL[n] for n in names])
            .selectExpr(*[_NULLABLE_SQL[n] for n in names]))


#: A DataFrame of at most this many ids is collected by ack (one Spark job; the
#: MERGE's choice would take two), larger ones stay in Spark.
ACK_COLLECT_UPTO = 1_000_000


def _collected_ids(frame: DataFrame) -> list[int] | DataFrame:
    """The task ids of ``frame`` as a sorted list (through Arrow: columnar, no Row
    per task); ``frame`` itself when they are too many or some are negative (the
    MERGE then says which are missing). A NULL or non-integer id is refused."""
    table = (frame.select(F.col("task_id").try_cast("long"), F.col("task_id").try_cast("string"))
             .limit(ACK_COLLECT_UPTO + 1).toArrow())
    ids = table.column(0).to_pylist()
    if None in ids:
        raw = table.column(1)[ids.index(None)].as_py()
        raise InvalidOption("task ids must be non-negative integers; the DataFrame's task_id "
                            f"column holds {'NULL' if raw is None else repr(raw)}")
    if len(ids) > ACK_COLLECT_UPTO or any(i < 0 for i in ids):
        return frame
    return sorted(set(ids))


def checked(col: Column, what: str) -> Column:
    """A per-row option's values, checked as the rows are written: a value that
    :mod:`validate` would refuse fails the write (nothing is committed) with an
    error naming the option and the value.

    ``pri``: an integer in ``PRI_RANGE`` (NULL: the put's). A time: a number of
    seconds, not NULL, negative or NaN, and finite unless it may never end.
    """
    if what == "pri":
        value = col.try_cast("long")
        lo, hi = validate.PRI_RANGE
        bad = (col.isNotNull() & value.isNull()) | (value < lo) | (value > hi)
        rule = f"an integer from {lo} to {hi}"
    else:
        value = col.try_cast("double")
        bad = value.isNull() | F.isnan(value) | (value < 0)
        if what not in validate.NEVER_ENDS:
            bad = bad | (value == float("inf"))
        rule = "a non-negative number of seconds" + (
            "" if what in validate.NEVER_ENDS else ", finite")
    shown = F.coalesce(col.try_cast("string"), F.lit("NULL"))
    error = F.raise_error(F.concat(F.lit(f"sparkqueue:InvalidOption:0 {what} must be {rule}, "
                                         "got "), shown))
    return F.when(bad, error.cast("long" if what == "pri" else "double")).otherwise(value)


def conform(incoming: T.StructType, tube: T.StructType, name: str) -> Column:
    """The payload struct of a frame's columns ``incoming`` in the tube's schema,
    or SchemaMismatch naming the differences."""
    have = {f.name: f.dataType for f in tube.fields}
    problems = []
    for f in incoming.fields:
        if f.name not in have:
            problems.append(f"unknown field {f.name!r}")
        elif not _compatible(f.dataType, have[f.name]):
            problems.append(f"field {f.name!r} is {f.dataType.simpleString()}, "
                            f"expected {have[f.name].simpleString()}")
    if problems:
        raise SchemaMismatch(f"payload does not fit tube {name!r} (schema "
                             f"{tube.simpleString()}): {'; '.join(problems)}")
    present = set(incoming.fieldNames())
    return F.struct(*[
        (F.col(_quoted(f.name)).cast(f.dataType) if f.name in present
         else F.lit(None).cast(f.dataType)).alias(f.name) for f in tube.fields
    ])


def _fields(schema: T.StructType) -> list[tuple[str, T.DataType]]:
    """Each field's name and type, its nullability left out (as an append ignores it)."""
    return [(f.name, f.dataType) for f in schema.fields]


def _quoted(name: str) -> str:
    """A column name as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _compatible(a: T.DataType, b: T.DataType) -> bool:
    if a == b or isinstance(a, T.NullType):
        return True
    if isinstance(a, _INTEGRAL) and isinstance(b, (*_INTEGRAL, T.DoubleType)):
        return _INTEGRAL.index(type(a)) <= (_INTEGRAL.index(type(b)) if isinstance(
            b, _INTEGRAL) else 3)
    if isinstance(a, T.FloatType) and isinstance(b, T.DoubleType):
        return True
    return False


def _struct_literal(value: Any, schema: T.StructType) -> Column:
    """A struct literal Column of ``value`` (a Row) in ``schema``."""
    fields = value.asDict(recursive=False) if value is not None else {}
    return F.struct(*[F.lit(fields.get(f.name)).cast(f.dataType).alias(f.name)
                      for f in schema.fields])
