"""The commit every state change goes through: one MERGE (or range UPDATE) whose clauses
carry the checks, all or nothing. Verbs on whole files of the caller's leases may
commit without it (:mod:`.leased`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from .. import store as st
from .. import validate
from ..errors import (
    InvalidOption,
    QueueError,
)
from ..store import CommitTag, effective_status
from . import records, refusals
from .clauses import action_set, lease_context, merge_clauses
from .context import TubeContext
from .ingest import ingest, ingest_for_take
from .plan import COLLECT_UPTO
from .verbs import ACK, KICK, RELEASE_ALL, Op

#: A take's choice: the chosen rows, or the id range ``(lo, hi)`` whose every row
#: is chosen (known from file statistics), or None when nothing can be chosen.
Chosen = DataFrame | tuple[int, int] | None

#: Expiries a commit writes down, by the stored status of the rows it chose: a
#: stored ``taken`` row chosen while ready had its lease end (ttr), a stored
#: ``delayed`` one its delay end; the sweep marks ttl-expired rows ``expired``.
EXPIRY_COUNTS = {"ttr": "taken", "delay": "delayed", "ttl": "expired"}

#: A DataFrame of at most this many ids is collected by ack (one Spark job; the
#: MERGE's choice would take two), larger ones stay in Spark.
ACK_COLLECT_UPTO = 1_000_000

def id_run(lo: int, hi: int, step: int, count: int) -> list[int] | None:
    """The ids ``lo, lo + step, .. hi`` when ``count`` tasks were changed within them
    and that is all of them; else None (some ids between are not among them)."""
    return list(range(lo, hi + 1, step)) if count == (hi - lo) // step + 1 else None


def collected_ids(ctx: TubeContext, frame: DataFrame) -> list[int] | DataFrame:
    """The task ids of ``frame`` as a sorted list (through Arrow where there is:
    columnar, no Row per task); ``frame`` itself when they are too many or some are negative (the
    MERGE then says which are missing). A NULL or non-integer id is refused.
    A take's result whose ids the take wrote down (``Memory.taken_ids``: every task
    of a run of consecutive ids was leased, :func:`id_run`) is not read."""
    known = ctx.memory.taken_ids(frame)
    if known is not None and len(known) <= ACK_COLLECT_UPTO:
        return known
    ids, raws = st.column_values(
        frame.select(st.try_cast(F.col("task_id"), "long"),
                     st.try_cast(F.col("task_id"), "string")).limit(ACK_COLLECT_UPTO + 1))
    if None in ids:
        raw = raws[ids.index(None)]
        raise InvalidOption("task ids must be non-negative integers; the DataFrame's task_id "
                            f"column holds {'NULL' if raw is None else repr(raw)}")
    if len(ids) > ACK_COLLECT_UPTO or any(i < 0 for i in ids):
        return frame
    return sorted(set(ids))





def mutate(ctx: TubeContext, op: Op, tasks: Any, extra: dict[str, Column] | None = None,
           event: str | None = None, tag_extra: dict[str, Any] | None = None,
           owner: str | None = None, chooser: Callable[[float], DataFrame] | None = None,
           deadline: float | None = None, collect_upto: int = 0) -> DataFrame | None:
    """Apply ``op`` to ``tasks`` (or to the rows ``chooser(now)`` picks) in one commit.

    Returns the changed tasks as of the commit (immutable), or None when
    there was nothing to change.
    """
    done = apply(ctx, op, tasks, extra, event, tag_extra, owner, chooser, deadline,
                 collect_upto)
    return None if done is None else done[0]


def ingest_before_choice(ctx: TubeContext, ahead: int, found: dict[str, int]) -> int:
    """Before a take chooses from the tasks table at ``found``'s version (``found``:
    its version and the inbox's, read just now): ingest the puts waiting in the
    inbox unless that version holds ``ahead`` ready tasks ahead of them
    (:func:`ingest.ingest_for_take`). The version the choice reads, returned,
    is the one that decision was made on, or its ingest's commit: a choice
    from a later one could lease a task a waiting put comes before."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    known = found.get(path)
    files = layout.files_at(path, known) if ahead and known is not None else None
    ingest_for_take(ctx, ahead, files, found)
    return layout.known_version(path)  # its ingest's commit, if it made one


def apply(ctx: TubeContext, op: Op, tasks: Any, extra: dict[str, Column] | None = None,
          event: str | None = None, tag_extra: dict[str, Any] | None = None,
          owner: str | None = None,
          chooser: Callable[[float], Chosen] | None = None,
          deadline: float | None = None, collect_upto: int = 0,
          acking: list[int] | None = None, newest: dict[str, int] | None = None,
          ahead: int = 0) -> tuple[DataFrame, dict[str, int]] | None:
    """:func:`mutate`, also returning the expiries the commit wrote down (ttl, ttr, delay).

    ``acking``: ids (sorted, distinct) acked in the same commit, all or
    nothing, as :meth:`ack` would (a consumer's previous batch): one MERGE
    instead of two. The result then holds the ``op`` rows only. ``newest``:
    the inbox's and the tasks table's versions the caller just read, where
    the first attempt's ingest starts (an older one only makes it read on,
    and a choice from it is checked again by the statement). ``ahead``: a
    take's ``n``, whose ingest waits while the tasks table holds that many
    ready tasks ahead of the puts (:func:`ingest.ingest_for_take`).
    """
    who = ctx.who(owner)
    # bad ids fail here, before any Spark job or ingest commit
    ids = None if chooser is not None else validate.task_ids(tasks)
    if st.is_dataframe(ids):  # one Spark job, before anything is written
        ids = collected_ids(ctx, ids)
    read = [newest] if newest else []  # the first attempt's

    def attempt() -> tuple[DataFrame, dict[str, int]] | None:
        before, now = settled(ctx, op, ids, who, acking, read.pop() if read else None,
                              ahead, chooser is not None)
        tag = CommitTag.new(f"{op.name}+ack" if acking else op.name, **(tag_extra or {}))
        with ctx.layout.tagged(tag) as sess:
            picked = pick(sess, now, ids, chooser, collect_upto, kept(op), ctx.shards)
            if picked is None and not acking:
                return None
            if picked is not None and not acking and ranged(ctx, op, picked):
                return update_picked(ctx, sess, op, picked, who, tag, now, before)
            merged = merge_picked(ctx, sess, op, picked, extra, acking, who, tag, now, before,
                                  chooser is not None)
        return merged_changes(ctx, op, merged, tag, picked, acking, chooser is not None)

    result = ctx.retrying(attempt, deadline=deadline, what=f"{op.name} on {ctx.name!r}")
    if result is not None:
        ctx.emit(result[0], event or op.name)
    return result


def settled(ctx: TubeContext, op: Op, ids: list[int] | DataFrame | None, who: str,
            acking: list[int] | None, newest: dict[str, int] | None, ahead: int,
            choosing: bool) -> tuple[int, float]:
    """Ready the tasks table for a statement of ``op``: the puts it must see ingested
    (:func:`ingest_before_choice`, from ``newest`` or a look now), the leases
    it meets whose time ran out settled. The table's version it then reads
    from, and the statement's now."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    found: dict[str, int] = {}
    if op.pending:  # the inbox's newest version and the table's in one look
        found = newest or layout.latest_versions([layout.inbox(ctx.key), path])
        before = ingest_before_choice(ctx, ahead, found)
    else:
        before = layout.latest_version(path)
    now = ctx.now()
    if not choosing or op.chooses_leases:  # the MERGE needs their rows
        done = refusals.settle_for(ctx, op, ids, who, now)
    else:  # a choice by state: ended leases are ready (or expired) rows
        done = bool(records.settle_ended(ctx, now))
    if acking:
        done = refusals.settle_for(ctx, ACK, acking, who, now) or done
    if done:
        before = layout.latest_version(path)
        if op.pending:  # others' commits read with it may have taken the tasks ahead
            before = ingest_before_choice(ctx, ahead, {**found, path: before})
    return before, now


def kept(op: Op) -> list[str]:
    """The columns a choice for ``op`` keeps beside ``task_id``: the sub-queue,
    where ``op`` leases one task per free sub-queue (:func:`with_busy`)."""
    return ["utube"] if op.exclusive else []


def ranged(ctx: TubeContext, op: Op, picked: Picked) -> bool:
    """Whether ``picked`` is a whole run of ids that ``op`` changes by one range
    UPDATE (:func:`update_range`), not a MERGE."""
    return (op.by_range and not op.exclusive and not picked.counts
            and picked.total == (picked.hi - picked.lo) // ctx.shards + 1)


def update_picked(ctx: TubeContext, sess: SparkSession, op: Op, picked: Picked, who: str,
                  tag: CommitTag, now: float, before: int) -> tuple[DataFrame, dict[str, int]]:
    """:func:`update_range` of ``picked``: the changed rows, their ids written down."""
    version, updated = update_range(ctx, sess, op, picked.lo, picked.hi, who, tag, now, before)
    changed = ctx.layout.changed_at(ctx.key, version, tag.token, picked.lo, picked.hi).select(
        *st.PUBLIC_COLUMNS)
    ctx.memory.note_taken_ids(changed, id_run(picked.lo, picked.hi, ctx.shards, updated))
    return changed, picked.counts


class Merged(NamedTuple):
    """:func:`merge_picked`'s commit: its version, the rows it updated, the id
    bounds of its source, the op's own ids and the expiries it wrote down."""

    version: int
    updated: int
    lo: int
    hi: int
    chosen: DataFrame
    counts: dict[str, int]


def merge_picked(ctx: TubeContext, sess: SparkSession, op: Op, picked: Picked | None,
                 extra: dict[str, Column] | None, acking: list[int] | None, who: str,
                 tag: CommitTag, now: float, before: int, choosing: bool) -> Merged:
    """MERGE ``picked`` (and the ids ``acking`` acked alongside) for ``op``
    (:func:`merge_source`), with each chosen sub-queue's lease checked
    (``op.exclusive``) and the expiries counted in the tag."""
    if picked is None:
        assert acking
        base = sess.createDataFrame([], ", ".join(
            ["task_id long"] + [f"{k} string" for k in kept(op)]))
        lo, hi, counts = acking[0], acking[-1], dict[str, int]()
    else:
        base, lo, hi, counts = picked.frame, picked.lo, picked.hi, picked.counts
    chosen = base  # the op's own ids (without the acks riding along)
    acks = None
    if acking:
        acks = st.id_frame(sess, acking, ctx.shards)
        lo, hi = min(lo, acking[0]), max(hi, acking[-1])
    if op.exclusive:
        base = with_busy(ctx, sess, base, now, acking)
    if acks is not None:
        base = base.withColumn("arg_ack", F.lit(False)).unionByName(
            acks.withColumn("arg_ack", F.lit(True)), allowMissingColumns=True)
    if counts:
        sess.conf.set(st.USER_METADATA, tag.adding(**counts).json())
    version, updated = merge_source(ctx, sess, op, base, extra, (lo, hi), tag, acks,
                                    who, now, before, chosen=choosing)
    return Merged(version, updated, lo, hi, chosen, counts)


def merged_changes(ctx: TubeContext, op: Op, merged: Merged, tag: CommitTag,
                   picked: Picked | None, acking: list[int] | None, choosing: bool,
                   ) -> tuple[DataFrame, dict[str, int]] | None:
    """The rows ``merged``'s commit changed (None where it only acked), and its
    expiries; the acked rows told to listeners."""
    changes = ctx.layout.changed_at(
        ctx.key, merged.version, tag.token, merged.lo, merged.hi,
        updates=op.action is not None,
        removable=merged.chosen if op.action is None or op.delete_when else None,
    ).select(*st.PUBLIC_COLUMNS)
    if choosing and picked is not None and not acking and picked.ids \
            and merged.updated == len(picked.ids):  # each chosen row changed, and no other
        ctx.memory.note_taken_ids(changes, picked.ids)  # its ack need not read them
    if acking:
        if ctx.listening():
            ctx.emit(acked_rows(ctx, merged.version, tag.token, acking), "ack")
        if picked is None:
            return None
    return changes, merged.counts


def merge_source(ctx: TubeContext, sess: SparkSession, op: Op, base: DataFrame,
                 extra: dict[str, Column] | None, bounds: tuple[int, int], tag: CommitTag,
                 acks: DataFrame | None, who: str, now: float, before: int,
                 chosen: bool) -> tuple[int, int]:
    """MERGE ``base`` (ids and ``arg_`` columns), with ``extra`` columns, the owner
    ``who`` and a lease token, into the tasks table for ``op``, ids within
    ``bounds``; the version committed and how many rows it updated (Delta's
    ``numTargetRowsUpdated``). A failed guard becomes the typed error
    naming every offending id; ``chosen``: the ids were a choice, which a
    commit that changed nothing shows gone (choose again)."""
    source = base.select(
        "task_id",
        *[c for c in base.columns if c.startswith("arg_")],
        F.lit(who).alias("arg_owner"),
        F.lit(uuid.uuid4().hex).alias("arg_token"),
        *[col.alias(f"arg_{k}") for k, col in (extra or {}).items()],
    )
    path = ctx.layout.tasks(ctx.key)
    lo, hi = bounds
    on = f"t.task_id = s.task_id AND t.task_id >= {lo} AND t.task_id <= {hi}"
    try:
        st.merge(sess, path, source, on, merge_clauses(op, tag, now, acks is not None))
    except Exception as e:
        failed = st.guard_failure(e)
        if failed is None:
            raise
        # only the acks' guard fails with an error kind (the op's says Stale)
        raise (refusals.diagnose(ctx, ACK, acks, failed, who, now) if acks is not None
               else refusals.diagnose(ctx, op, source, failed, who, now)) from e
    found = ctx.layout.commit_of(path, tag.token, before)
    if found is None and chosen:
        # Delta commits no MERGE that changed nothing: every chosen row was
        # removed (a take passes missing ids over) since the choice: choose again
        raise st.StaleChoice(f"{op.name} on {ctx.name!r}: its choice is gone")
    if found is None:
        raise QueueError(f"commit tagged {tag.token} not found in the log of {path}")
    return found[0], int(found[1].get("numTargetRowsUpdated", 0))


def update_range(ctx: TubeContext, sess: SparkSession, op: Op, lo: int, hi: int, who: str,
                 tag: CommitTag, now: float, before: int) -> tuple[int, int]:
    """Apply a ``by_range`` op to the ids ``lo..hi`` (all chosen) as one UPDATE;
    the version it committed and how many rows it changed.

    Where a MERGE joins the chosen ids to the table, an UPDATE only filters
    its range. The rows it changes are those the guard passes in the
    transaction's own snapshot, so a row is never leased twice: when a
    concurrent take got some of them first, this take returns the others;
    when it got them all, Delta commits nothing and the take chooses again.
    """
    sqlctx = lease_context(now, who)
    assert op.guard is not None
    path = ctx.layout.tasks(ctx.key)
    st.update(sess, path,
              f"t.task_id BETWEEN {lo} AND {hi} AND ({op.guard.format(**sqlctx)}) IS NULL",
              action_set(op, tag, sqlctx))
    committed = ctx.layout.commit_of(path, tag.token, before)
    if committed is None or not int(committed[1].get("numUpdatedRows", 0)):
        # every chosen row went stale between the choice and the UPDATE's snapshot
        # (Delta then commits nothing): choose again, as the MERGE's guard would
        raise st.StaleChoice(f"{op.name} of {lo}..{hi} on {ctx.name!r}")
    return committed[0], int(committed[1]["numUpdatedRows"])


def with_busy(ctx: TubeContext, sess: SparkSession, base: DataFrame, now: float,
              acking: list[int] | None = None) -> DataFrame:
    """``base`` with ``arg_busy``: its sub-queue has a live lease when the take commits.

    The read of the tasks table below is not run here: it runs inside the
    MERGE, where Delta plans every scan of the target table on the
    transaction's own snapshot and records it as read. So a lease another
    consumer committed after this take chose its rows is either seen here
    (the guard answers Stale and the take chooses again) or makes the
    commit conflict: a sub-queue is never leased twice.
    """
    leased = (ctx.layout.read(ctx.layout.tasks(ctx.key), sess)
              .where("status = 'taken'")  # prunes files by their statistics
              .where(f"{effective_status(now)} = 'taken'"))
    if acking:  # acked in this same commit: their leases end with it
        leased = st.without_ids(leased, acking, sess, ctx.shards)
    # a flag, not the joined utube: the sub-queue of tasks put without one is NULL
    leased = leased.select(F.col("utube").alias("busy_utube")).distinct()
    leased = leased.withColumn("arg_busy", F.lit(True))
    flagged = base.join(F.broadcast(leased), base["utube"].eqNullSafe(leased["busy_utube"]),
                        "left")
    return flagged.select("task_id", F.coalesce("arg_busy", F.lit(False)).alias("arg_busy"))


class Picked(NamedTuple):
    """:func:`pick`'s answer; ``ids``: the ids, sorted, when they came to the driver."""

    frame: DataFrame
    lo: int
    hi: int
    counts: dict[str, int]
    total: int
    ids: list[int] | None = None


def pick(sess: SparkSession, now: float, ids: list[int] | DataFrame | None,
         chooser: Callable[[float], Chosen] | None, collect_upto: int,
         keep: list[str] | None = None, step: int = 1) -> Picked | None:
    """The ids a MERGE (or range UPDATE) changes, their bounds, how many were
    stored taken/delayed, and how many they are.

    Small choices come to the driver in one job; big ones are checkpointed
    in Spark (one job) and summarized (one more). A choice keeps the
    columns ``keep`` beside ``task_id``. Ids of one shard are ``step`` apart.
    """
    keep = keep or []
    if isinstance(ids, list):  # validated, sorted, distinct: no Spark job needed
        if not ids:
            return None
        return Picked(st.id_frame(sess, ids, step), ids[0], ids[-1], {}, len(ids), ids)
    if chooser is not None:
        chosen = chooser(now)
        if chosen is None:  # nothing can be chosen
            return None
        if isinstance(chosen, tuple):  # every id of a range
            lo, hi = chosen
            frame = sess.range(lo, hi + 1, step).select(F.col("id").alias("task_id"))
            return Picked(frame, lo, hi, {}, (hi - lo) // step + 1)
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
        chosen = sess.createDataFrame(
            [(int(r["task_id"]), *[r[k] for k in keep]) for r in rows],
            frame.select("task_id", *keep).schema)
        ids = [int(r["task_id"]) for r in rows]
        return Picked(chosen, ids[0], ids[-1], expiry_counts([r["status"] for r in rows]),
                      len(ids), ids)
    base = st.frozen(frame)
    stats = base.agg(
        F.count("*"), F.min("task_id"), F.max("task_id"),
        *[F.count(F.when(F.col("status") == s, 1)) for s in EXPIRY_COUNTS.values()],
    ).first()
    if stats is None or not stats[0]:
        return None
    counts = {k: int(v) for k, v in zip(EXPIRY_COUNTS, stats[3:], strict=True) if v}
    return Picked(base.select("task_id", *keep), int(stats[1]), int(stats[2]), counts,
                  int(stats[0]))


def expiry_counts(stored: list[str | None]) -> dict[str, int]:
    """The expiries a commit writes down for the chosen rows, by their ``stored``
    statuses (:data:`EXPIRY_COUNTS`): those that happened."""
    counts = {k: stored.count(s) for k, s in EXPIRY_COUNTS.items()}
    return {k: v for k, v in counts.items() if v}


def acked_rows(ctx: TubeContext, version: int, token: str, ids: list[int]) -> DataFrame:
    """The tasks ``ids`` (sorted) that the commit ``version`` (tagged ``token``) removed,
    read from the files it removed, as acked (``done``): an ack's result and its
    ``on_task_change`` event, however it committed."""
    return ctx.layout.changed_at(ctx.key, version, token, ids[0], ids[-1], updates=False,
                                 removable=ids, step=ctx.shards).select(*st.PUBLIC_COLUMNS)


def kick(ctx: TubeContext, count: int) -> int:
    """Up to ``count`` buried tasks back to ``ready``, lowest ``(pri, order_key, id)``
    first, in one commit; how many."""
    result = mutate(ctx, KICK, None, collect_upto=count if count <= COLLECT_UPTO else 0,
                    chooser=lambda now: known_tasks(ctx, now)
                    .where("eff = 'buried'").orderBy("pri", "order_key", "task_id").limit(count))
    if result is None:
        return 0
    ids = ctx.memory.taken_ids(result)  # the MERGE's commit showed them: no Spark job
    return len(ids) if ids is not None else result.count()


def release_all(ctx: TubeContext) -> int:
    """Every taken task, whoever holds it, back to ``ready`` in one commit; how many."""
    result = mutate(ctx, RELEASE_ALL, None, event="release",
                    chooser=lambda now: known_tasks(ctx, now)
                    .where("status = 'taken'")  # prunes files by their statistics
                    .where("eff = 'taken'"))
    return 0 if result is None else result.count()


def known_tasks(ctx: TubeContext, now: float) -> DataFrame:
    """The ingested tasks (:func:`records.live_tasks`) at the tasks table's version
    the statement's attempt has just read: what a choice by state chooses
    from, checked again by the statement on its own snapshot."""
    return records.live_tasks(ctx, now, pending=False,
                              version=ctx.layout.known_version(ctx.layout.tasks(ctx.key)))


def queue_end(ctx: TubeContext) -> int:
    """The order key after every task's, puts not yet ingested included (they are
    first ingested): where a requeue puts tasks."""
    def last() -> int:
        ingest(ctx)
        path = ctx.layout.tasks(ctx.key)
        version = ctx.layout.latest_version(path)
        top = ctx.layout.read(path, version=version).agg(
            F.max("order_key"), F.max("task_id")).first()
        # a lease record's tasks: their order keys are their ids
        held = [r.ids[1] for r in records.records_at(ctx, version).values()]
        return max([int(top[0] or 0), int(top[1] or 0), *held]) if top else max(held or [0])
    return ctx.guarded(last) + 1
