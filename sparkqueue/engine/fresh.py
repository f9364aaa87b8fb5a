"""The take of puts not yet ingested, in one commit (``ingest+take``): the puts' rows
written with the chosen ones already leased, or only the leased ones where the
puts' tags tell which they are."""

from __future__ import annotations

from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .. import store as st
from ..store import CommitTag, effective_status
from . import records
from .clauses import action_set, lease_context
from .context import TubeContext
from .ingest import (
    RunRows,
    advanced,
    put_order_rows,
    run_frames,
    tag_values,
    within,
)
from .ops import acked_rows, id_run, pick
from .plan import COLLECT_UPTO, Strategy
from .records import with_action
from .verbs import Op

__all__ = ["take_fresh", "leased_result", "acked_result"]


def take_fresh(ctx: TubeContext, take: Op, n: int, win: int, who: str,
               acking: list[int] | None, upto: int) -> DataFrame | None:
    """The take's tasks when it could choose only among puts not yet ingested:
    they are ingested with the chosen ones already leased, in one commit.

    That is when file statistics show that the tasks table holds no ready
    task, with a driver that looks only at ready tasks and leases
    (``head_only``, ``sub_queue_heads``): a consumer that keeps up with
    its producers. Each new task is then written once, where an ingest
    and a MERGE would write the leased ones twice and run two commits.
    None when it does not apply or chose nothing (the ingest committed
    all the same): the take then goes the usual way.

    No two takes lease one put: of two ingests from one cursor one commits
    (:meth:`Transaction.ingest`). For a driver that looks at sub-queues the
    commit has also read the whole tasks table (``read_all``), so the
    leases it saw stay true until it commits, or it conflicts; a
    ``head_only`` driver's choice of the lowest new puts rests on nothing
    else (the portable engine's append reads no row: a task made ready
    meanwhile, by a release, goes to a later take, as if this one had
    committed first). A conflict sends the
    take the usual way (ingest, then :func:`take_files` or the UPDATE or
    MERGE) rather than trying again: a transaction that reads everything
    conflicts with any other commit, so retried it could be starved.

    When the driver takes the lowest ids and the puts' tags say which those
    are (:func:`ingest.put_order_rows`), the commit ingests the leased tasks
    alone (:func:`fresh_plan`), and leaves the others in the inbox
    (``Cursor.partial``): each new task is then written once, leased, where
    ingesting them all would write the others ready and the next takes
    write them again. ``acking``: a consumer's previous batch, whole files
    of ``who``'s leases (:func:`store.whole_files`), removed by the same
    commit where the puts' tags tell the take's tasks, on a table that keeps
    no change feed; else None, having committed nothing. ``upto``: the inbox's
    newest version, read by the take's plan: only :func:`take.take_once` runs
    it, where the plan says it applies (``Strategy.NEW_PUTS``).
    """
    path = ctx.layout.tasks(ctx.key)
    try:
        return ctx.guarded(lambda: ingest_taking(ctx, take, n, win, who, path, upto, acking))
    except Exception as e:
        if st.is_conflict(e):
            return None
        raise


class FreshPlan(NamedTuple):
    """What an ingest+take writes: the puts' rows from ``start`` (row numbers as ids
    count them) up to the new ``cursor``, in runs (``spans``), and the ids
    leased when the puts' tags tell them (``head``)."""

    cursor: st.Cursor
    spans: list[RunRows]
    head: tuple[int, int] | None
    files: list[st.PutFile]  #: the put files the spans read


def fresh_plan(ctx: TubeContext, spark: SparkSession, cursor: st.Cursor, upto: int, n: int,
               now: float) -> FreshPlan:
    """The rows an ingest+take from ``cursor`` writes: every put up to inbox version
    ``upto``; or, where the puts' tags tell that a ``head_only`` driver leases
    their first rows, those alone, however few of their put files' rows they
    are, while the cursor's partial rows stay in bounds. What a take of new
    puts writes so follows its size, not the puts': a small take of a big put
    commits its lease record alone, where ingesting more would write rows
    ready that each next small take rewrites (an UPDATE, or a rewrite of
    their files) to lease them. The cost is the record's readers' (its
    take's result, a peek, a release): they read its put files whole."""
    every, next_id = ctx.layout.put_files(ctx.key, cursor, upto)
    start = cursor.first_pending
    puts = within(every, next_id, start, next_id)
    rows = put_order_rows(puts, next_id, n, now, start) if ctx.driver.head_only else None
    after = st.Cursor(upto, next_id)
    if rows is not None:
        bound = rows[1] + 1
        part = advanced(cursor, every, next_id, upto, bound)
        if part.partial < st.schema.PARTIAL_ROWS:
            after = part
    spans = run_frames(ctx, spark, within(puts, next_id, start, after.first_pending), next_id,
                       start, after.first_pending)
    head = None if rows is None else (ctx.task_id(rows[0]), ctx.task_id(rows[1]))
    return FreshPlan(after, spans, head, within(puts, next_id, start, after.first_pending))


def ingest_taking(ctx: TubeContext, take: Op, n: int, win: int, who: str, path: str,
                  upto: int, acking: list[int] | None = None) -> DataFrame | None:
    """:func:`take_fresh`'s one attempt."""
    layout = ctx.layout
    # a choice among free sub-queues rests on the leases the snapshot holds; the lowest
    # new puts only on the ingest being the one from its cursor (see take_fresh)
    txn = layout.store.begin(path, read_all=not ctx.driver.head_only)
    now = ctx.now()
    files = txn.files
    if files is None or any(st.may_hold_ready(f, now) for f in files.values()):
        return None
    if not txn.writes_feed and txn.keeps_feed:
        return None  # the feed would show the leased tasks put, never taken
    cursor = layout.cursor(ctx.key, at=txn.version)
    if cursor.version >= upto:
        ctx.ingested_upto = upto
        return None
    acked = layout.whole_leased_files(path, files, acking, who, now, ctx.shards) if acking else []
    if acked is None or (acked and txn.keeps_feed):
        return None  # not whole files, or the feed would miss their removal
    tag = CommitTag.new("ingest+take", plan=Strategy.NEW_PUTS.value)
    with layout.tagged(tag) as sess:
        plan = fresh_plan(ctx, sess, cursor, upto, n, now)
        if not plan.spans or not txn.fits(plan.spans[0].rows) or (
                acked and plan.head is None):
            return None  # (acks only where the take surely leases: nothing else commits)
        after, spans, head, _ = plan
        tag = tag.adding(upto=after.version, next_id=after.next_id,
                         **({"partial": after.partial} if after.partial else {}),
                         **({"ack": len(acking or [])} if acked else {}))
        if head is None and len(spans) == 1:  # read by the choice and the write
            spans = [spans[0]._replace(rows=st.frozen(spans[0].rows, eager=False))]
        pending = st.union([run.rows for run in spans])
        picked = pick(sess, now, None, lambda _: head or choice(ctx, pending, files, n, win, now),
                      n if n <= COLLECT_UPTO else 0, step=ctx.shards)
        rows = [run.rows for run in spans]
        local: list[dict[str, Any]] = []
        changes: DataFrame | None = pending.withColumn(st.CHANGE_TYPE, F.lit("insert"))
        record = None
        if picked is not None:
            chosen, lo, hi, counts, count, chosen_ids = picked
            tag = tag.adding(**counts, take=count)
            sess.conf.set(st.USER_METADATA, tag.json())
            run = id_run(lo, hi, ctx.shards, count)
            action = action_set(take, tag, lease_context(now, who))
            # a record's ack removes its file (portable: DELETEs its one row)
            record = (None if run is None or txn.keeps_feed
                      else recorded(ctx, cursor, plan, (lo, hi), action, who, tag.token, now))
            if record is not None:  # the lease alone: one row
                rows, local, changes = [], [records.record_row(record)], None
            else:
                rows, changes = with_lease(spans, pending, chosen if run is None else (lo, hi),
                                           action)
        version, written = txn.ingest(ctx.key, cursor, after, rows, changes, tag,
                                      {name: files[name] for name in acked},
                                      local, spans[0].rows.schema if local else None)
    if after.version >= upto:
        ctx.ingested_upto = upto
    if picked is None:  # (never with acks: they go only with a take's known head)
        return None
    if record is not None and run is not None:
        noting_record(ctx, record, written, run)
    elif run is None and chosen_ids:  # chosen by id: their ack needs to know their files
        run = noting_leased(ctx, written, count, chosen_ids)
    return leased_result(ctx, version, tag.token, (lo, hi), run, acking if acked else None,
                         acked, record)


def choice(ctx: TubeContext, pending: DataFrame, files: dict[str, dict[str, Any]], n: int,
           win: int, now: float) -> DataFrame:
    """The driver's choice among the ``pending`` task rows of an ingest+take,
    with the leases that the tasks table's ``files`` hold where the driver
    looks at sub-queues (they keep their sub-queues busy)."""
    live = pending.withColumn("eff", F.expr(effective_status(now)))
    held = ([name for name, f in files.items() if st.may_hold(f, "taken")]
            if ctx.driver.sub_queue_heads else [])
    if held:
        layout = ctx.layout
        leased = (layout.read_task_files(layout.tasks(ctx.key), held, pending.sparkSession)
                  .where("status = 'taken'").where("task_id >= 0")
                  .withColumn("eff", F.expr(effective_status(now))))
        live = live.unionByName(leased.where("eff = 'taken'"))
    return ctx.driver.choose(live, n, win)


def with_lease(spans: list[RunRows], pending: DataFrame, chosen: DataFrame | tuple[int, int],
               action: dict[str, str]) -> tuple[list[DataFrame], DataFrame]:
    """An ingest+take's writes: the runs of puts (``spans``, whose union is
    ``pending``) with the take's SET (``action``) on the ``chosen`` rows, and
    the change feed's rows.

    ``chosen`` is the leased ids' range when they are a run of ids, or else
    the chosen rows, joined. Either way the leased rows of each run of puts
    are written apart from the others (for a range, the rows below, within
    and above it), so that they fill files of their own (as
    :func:`take_files` writes them) and their ack removes whole files. The
    feed comes in one pass over the puts: each put's insert, and a taken
    one's post-image. No pre-image: it would repeat the insert, a
    state no version held, and changes() reads inserts and post-images only.
    """
    columns = pending.columns

    def marked(frame: DataFrame) -> DataFrame:
        """``frame`` with ``arg_take``: whether the take leases the row."""
        if isinstance(chosen, tuple):  # a run of ids: no join
            return frame.withColumn("arg_take", F.expr(
                f"task_id BETWEEN {chosen[0]} AND {chosen[1]}"))
        return frame.join(F.broadcast(chosen.select(
            "task_id", F.lit(True).alias("arg_take"))), "task_id", "left")

    def pieces(frame: DataFrame, first: int, end: int) -> list[DataFrame]:
        """The run's rows, marked, cut where the leased ones begin and end within it."""
        frame = marked(frame)
        if not isinstance(chosen, tuple):
            return [frame.where("arg_take"), frame.where("arg_take IS NULL")]
        if chosen[1] < first or chosen[0] >= end:
            return [frame]
        lo, hi = chosen
        cuts = [f"task_id BETWEEN {lo} AND {hi}"]
        if lo > first:
            cuts.insert(0, f"task_id < {lo}")
        if hi + 1 < end:
            cuts.append(f"task_id > {hi}")
        return [frame.where(cut) for cut in cuts]

    rows = [with_action(piece, action, "t.arg_take", columns)
            for run in spans for piece in pieces(run.rows, run.first, run.end)]
    feed = marked(pending).withColumn(st.CHANGE_TYPE, F.explode(F.expr(
        "CASE WHEN arg_take THEN array('insert', 'update_postimage') "
        "ELSE array('insert') END")))
    changes = with_action(feed, action, f"t.{st.CHANGE_TYPE} = 'update_postimage'", columns,
                          st.CHANGE_TYPE)
    return rows, changes


def leased_result(ctx: TubeContext, version: int, token: str, span: tuple[int, int],
                  run: list[int] | None, acking: list[int] | None = None,
                  acked: list[str] | None = None, record: records.Record | None = None,
                  ) -> DataFrame:
    """A take's result: the tasks its commit ``version`` (tagged ``token``) leased, ids
    within ``span`` (``run``: them, where known), or those its lease ``record``
    holds, with their ``on_task_change`` events sent, after those of the
    ``acking`` ids the same commit acked (removing the data files ``acked``)."""
    if acking and ctx.listening():  # (an ack's own call reads them as its result)
        ctx.emit(acked_result(ctx, version, token, acking, acked or []), "ack")
    result = (ctx.layout.changed_at(ctx.key, version, token, *span) if record is None
              else records.expand(ctx, ctx.spark, record)).select(*st.PUBLIC_COLUMNS)
    if record is not None:
        records.taken_as(ctx, record, result)
    ctx.memory.note_taken_ids(result, run)
    ctx.emit(result, "take")
    return result


def recorded(ctx: TubeContext, cursor: st.Cursor, plan: FreshPlan, span: tuple[int, int],
             action: dict[str, str], who: str, token: str, now: float,
             ) -> records.Record | None:
    """The lease record of a take of new puts that leases exactly the rows it
    ingests (``plan``, from ``cursor``), a run of ids (``span``); None when
    it ingests others too (they are written out, and the leased ones with them)."""
    first, end = cursor.first_pending, plan.cursor.first_pending
    if (plan.head != span or end <= first or ctx.task_id(first) != span[0]
            or ctx.task_id(end - 1) != span[1]):
        return None
    ends: list[tuple[float, float]] = []
    for f in plan.files:  # every task's own ttl and ttr are its put's (tags tell them)
        put_now, _, _, ttl, ttr, _ = tag_values(f.tag)
        ttl_end = put_now + (st.INF if ttl is None else ttl)
        ttr = ttr if ttr is not None else (st.INF if ttl is None else ttl)
        ends.append((min(now + ttr, ttl_end), ttl_end))
    return records.Record(tuple(plan.files), first, end, span, action, who,
                          min(e[0] for e in ends), min(e[1] for e in ends), token)


def noting_record(ctx: TubeContext, record: records.Record, written: list[dict[str, Any]],
                  run: list[int]) -> None:
    """Write down the data file a take wrote its lease ``record`` to (among the
    files it ``written``), for its tasks' ack (:meth:`Layout.note_leased`)."""
    path = ctx.layout.tasks(ctx.key)
    name = next(f["name"] for f in written if f["min_status"] == st.LEASE)
    ctx.memory.remember_record(path, name, record)
    ctx.layout.note_leased(path, [name], run)


def acked_result(ctx: TubeContext, version: int, token: str, ids: list[int],
                 removed: list[str]) -> DataFrame:
    """The tasks ``ids`` that the commit ``version`` (tagged ``token``) acked by
    removing the data files ``removed``, as acked (``done``): from the lease
    records among them, and from the others' rows (:func:`ops.acked_rows`)."""
    path = ctx.layout.tasks(ctx.key)
    held = [r for r in map(lambda n: ctx.memory.record(path, n), removed) if r is not None]
    frames = [records.as_acked(ctx, r) for r in held]
    if len(held) < len(removed) or not removed:
        frames.append(acked_rows(ctx, version, token, ids))
    return st.union(frames)


def noting_leased(ctx: TubeContext, written: list[dict[str, Any]], count: int,
                  ids: list[int] | None = None) -> list[int] | None:
    """The ids a take that wrote its leased tasks apart leased (:func:`leased_run`),
    and, when it chose them by id (``ids``, sorted), the files that hold them
    written down for their ack (:meth:`Layout.note_leased`), since their ids
    need not be a run that the files' statistics show."""
    run = leased_run(written, count, ctx.shards, ids)
    if run is not None and ids is not None:
        ctx.layout.note_leased(ctx.layout.tasks(ctx.key),
                               [f["name"] for f in written if all_taken(f)], run)
    return run


def leased_run(written: list[dict[str, Any]], count: int, step: int,
               ids: list[int] | None = None) -> list[int] | None:
    """The ids a file-rewriting take leased (``count`` tasks), from the statistics of
    the files it wrote (``written``), when they show them: the files whose rows
    are all ``taken`` (the leased tasks, written apart from the others) hold
    ``count`` rows, ids a run ``step`` apart, or the ``ids`` it chose. None
    otherwise."""
    leased = [f for f in written if all_taken(f)]
    if not leased or sum(f["rows"] for f in leased) != count:
        return None
    lo, hi = min(f["min_task_id"] for f in leased), max(f["max_task_id"] for f in leased)
    if ids is not None:
        return ids if (lo, hi) == (ids[0], ids[-1]) and len(ids) == count else None
    return id_run(lo, hi, step, count)


def all_taken(f: dict[str, Any]) -> bool:
    """Whether a written file's statistics show every row of it ``taken`` (a take's
    leased tasks, written apart from the others), with its row count and ids'
    bounds known."""
    return bool(f["min_status"] == "taken" == f["max_status"] and f["rows"] is not None
                and f["min_task_id"] is not None)
