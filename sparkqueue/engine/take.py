"""take: the strategies that choose and lease tasks (one commit of new puts, in
``fresh``; a rewrite of the head files; a range UPDATE of consecutive ids; a MERGE
of a choice)."""

from __future__ import annotations

import bisect
import time
from dataclasses import replace
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from .. import store as st
from ..drivers.base import ORDER
from ..drivers.utube import UtubeDriver
from ..store import CommitTag, effective_status
from . import plan, verbs
from .clauses import action_set, lease_context
from .context import TubeContext
from .fresh import leased_result, noting_leased, take_fresh
from .ingest import empty, ingest_for_take
from .ops import Chosen, apply, expiry_counts
from .plan import COLLECT_UPTO
from .records import live_tasks, settle_ended, with_action
from .settle import acks_apart
from .verbs import Op


def take(ctx: TubeContext, n: int, wait: float, who: str, win: int,
         acking: list[int] | None = None) -> DataFrame:
    """:meth:`take`, validated; ``acking``: ids acked in the take's first commit
    (a consumer's previous batch, see ``_apply``), so a loop pays one MERGE per batch."""
    until = time.monotonic() + wait
    while True:
        got = take_once(ctx, n, who, win, acking, wait)
        if got is not None:
            return got
        acking = None  # committed (alone, as nothing was ready)
        remaining = until - time.monotonic()
        if remaining <= 0:
            return empty(ctx)
        time.sleep(min(ctx.config.poll_interval, remaining))


def take_facts(ctx: TubeContext, n: int, acking: list[int] | None = None,
               ) -> tuple[plan.TakeFacts, dict[str, int] | None]:
    """What a take of ``n`` knows before it reads any task (:class:`plan.TakeFacts`),
    and the inbox's and the tasks table's newest versions where the plan needs
    the inbox's (None: not read): what the take's first ingest starts from."""
    driver = ctx.driver
    facts = plan.TakeFacts(engine=ctx.layout.engine, head_only=driver.head_only,
                           sub_queue_heads=driver.sub_queue_heads, n=n,
                           acks=bool(acking))
    if not plan.reads_inbox(facts):
        return facts, None
    inbox = ctx.layout.inbox(ctx.key)
    newest = ctx.guarded(lambda: ctx.layout.latest_versions([inbox, ctx.layout.tasks(ctx.key)]))
    return replace(facts, puts_waiting=newest[inbox] > ctx.ingested_upto), newest


def explain_take(ctx: TubeContext, n: int) -> dict[str, Any]:
    """The plan a take of ``n`` would follow now (:func:`plan.explained`), taking
    nothing."""
    facts, _ = take_facts(ctx, n)
    return plan.explained(facts)


def take_once(ctx: TubeContext, n: int, who: str, win: int, acking: list[int] | None = None,
              wait: float = 0.0) -> DataFrame | None:
    """One attempt of :func:`take`, without waiting for tasks: the leased tasks, or
    None when none was ready. ``acking``: ids (sorted, distinct) of ``who``'s
    leases acked by the take's commit or just before it, all or nothing, as
    :meth:`ack` would (a Consumer's previous batch); acked also when none was
    ready. The strategies are :func:`plan.plan_take`'s, each tried until one
    commits; each commit's tag names its strategy (``plan``). Conflicts are
    retried for the tube's conflict timeout, or ``wait`` when longer."""
    take = take_op(ctx)
    facts, newest = take_facts(ctx, n, acking)
    deadline: float | None = None  # counted from the settling: each strategy after it

    def chooser(now: float) -> Chosen:
        gone = acking  # the acks riding this commit: not chosen
        files = file_stats(ctx)
        if files is not None and not any(st.may_hold_ready(f, now) for f in files):
            return None  # nothing can be ready: no Spark job
        if files is not None and ctx.driver.head_only:
            head = st.ready_head(files, now, n, ctx.shards)
            if head is not None and not overlaps(head, gone):
                return head  # whole files of ready tasks: no Spark job
        rows, near_head = candidates(ctx, now, n, gone)
        chosen = ctx.driver.choose(rows, n, win)
        if near_head:  # enough free heads near the head, or choose from all
            chosen = st.frozen(chosen)
            if chosen.count() < n:
                rows, _ = candidates(ctx, now, n, gone, bounded=False)
                chosen = ctx.driver.choose(rows, n, win)
        return chosen

    def run(strategy: plan.Strategy) -> DataFrame | NoneReady | None:
        """The strategy's executor: its tasks, NONE_READY, or None (turned down)."""
        if strategy is plan.Strategy.NEW_PUTS:
            assert newest is not None
            return take_fresh(ctx, take, n, win, who, acking, newest[ctx.layout.inbox(ctx.key)])
        if strategy is not plan.Strategy.STATEMENT:
            return take_files(ctx, take, n, who, acking, deadline, win)
        done = apply(ctx, take, None, owner=who, chooser=chooser, deadline=deadline,
                     collect_upto=n if n <= COLLECT_UPTO else 0, acking=acking,
                     tag_extra={"plan": strategy.value}, newest=newest, ahead=n)
        return NONE_READY if done is None else done[0]

    tried: list[plan.Strategy] = []
    settled = False
    while (strategy := plan.plan_take(facts, tried)) is not None:
        if strategy is not plan.Strategy.NEW_PUTS and not settled:
            settle_ended(ctx, ctx.now())  # tasks whose recorded lease ended are ready again
            settled = True
            deadline = ctx.deadline(wait if wait != float("inf") else 0.0)
        tried.append(strategy)
        if strategy is plan.Strategy.ACKS_APART:  # its executor: the acks alone, then
            assert acking  # the take planned anew, in this loop
            if acks_apart(ctx, acking, who) is not None:
                acking = None  # committed: plan the take again, without them
                facts, newest = take_facts(ctx, n)
                tried = []
            continue  # else not whole files: they ride the statement
        got = run(strategy)
        if got is not None:
            return None if isinstance(got, NoneReady) else got
    return None


def take_op(ctx: TubeContext) -> Op:
    """A take's state change on this tube (:func:`verbs.take`): exclusive per
    sub-queue on a utube tube."""
    return verbs.take(ctx.driver.uses_utube)


class NoneReady:
    """What :func:`take_files` returns when it applied and found no task to lease
    (every sub-queue with ready tasks busy, say): the take need not try the
    MERGE's choice as well."""


NONE_READY = NoneReady()


class FilePlan(NamedTuple):
    """What a file-rewriting take leases: the data files it rewrites (``names``),
    the least and greatest id it leases, how many (``leases``), the ids
    themselves where chosen one by one (None: the ``leases`` lowest of the
    files' ``held`` rows, all ready), and the expiries its choice ends
    (:func:`ops.expiry_counts`)."""

    names: list[str]
    lo: int
    hi: int
    leases: int
    ids: list[int] | None
    counts: dict[str, int]
    held: int = 0


def take_files(ctx: TubeContext, take: Op, n: int, who: str,
               acking: list[int] | None, deadline: float | None = None,
               win: int = 1) -> DataFrame | NoneReady | None:
    """The take's tasks when file statistics show which files hold them: those
    files are rewritten in one commit, the leased tasks into files of their
    own, the others into others; ``acking``, when those are whole files
    (:meth:`Layout.whole_leased_files`), are removed by the same commit.

    Where the store commits chosen files, on a table that keeps no change
    feed, and a driver that looks only at ready tasks (``head_only``) or at
    the heads of free sub-queues (``sub_queue_heads``; a take of at most
    ``COLLECT_UPTO``): the plan's ``head-files`` and ``sub-queue-heads``
    strategies (:data:`plan.TAKE_RULES`). An UPDATE would
    write each leased task into a file with the ready ones it shared a
    file with, so its ack would read and rewrite them all again; here the
    ack removes the leased files whole, reading no data. For ``head_only``
    the choice is made where the files are written (the ``n`` lowest of
    their rows, by :func:`store.head_files` the ``n`` lowest ready of the
    table), so no Spark job chooses before the write. For sub-queues one
    query chooses (:func:`sub_queue_plan`), in far fewer Spark jobs than a
    MERGE runs (``bench/profile_ops.py``).
    None when it does not apply: the take then goes the usual way.
    :data:`NONE_READY` when it found nothing to lease and had no acks to
    commit (with acks it is None: they go the usual way).

    The commit removes the files it read, so a concurrent commit that
    removed one of them conflicts with it (another consumer's take of the
    same head), and so does one that added files (Delta checks a table
    without partitions as read whole: an ingest, another consumer's take).
    A sub-queue take's transaction has read the whole table
    (``read_all``, :meth:`Store.begin`): any commit after its snapshot makes
    it conflict, so the leases it saw stay true until it commits, and a
    sub-queue is never leased twice. The take then tries again on fresh
    statistics (the next head) until ``deadline``, each try an ingest
    check and one commit.
    The UPDATE or MERGE would gain nothing: the same commits conflict with
    its read predicate, and a take falling back to it lost to the others'
    cheaper head-file takes until its tries ran out.
    """
    layout = ctx.layout
    heads = ctx.driver.sub_queue_heads and not ctx.driver.head_only
    path = layout.tasks(ctx.key)

    def attempt() -> DataFrame | NoneReady | None:
        txn = layout.store.begin(path, read_all=heads)
        # a conflict with another's ingest is retried as the commit's is
        if ingest_for_take(ctx, 0 if heads else n, txn.files, {path: txn.version}):
            txn = layout.store.begin(path, read_all=heads)
        if txn.keeps_feed:
            return None  # the feed's rows are Delta's to write
        now = ctx.now()
        files = txn.files
        acked = (layout.whole_leased_files(path, files, acking, who, now, ctx.shards)
                 if acking and files else [])
        if files is None or acked is None:
            return None
        tag = CommitTag.new("take+ack" if acking else "take",
                            plan=(plan.Strategy.SUB_QUEUE_HEADS if heads
                                  else plan.Strategy.HEAD_FILES).value,
                            **({"ack": len(acking)} if acking else {}))
        with layout.tagged(tag) as sess:
            files_plan = (sub_queue_plan(ctx, sess, files, acked, n, win, now) if heads
                    else head_plan(files, n, now))
            if files_plan is None or not files_plan.leases:
                return NONE_READY if files_plan is not None and not acking else None
            tag = tag.adding(take=files_plan.leases, **files_plan.counts)
            sess.conf.set(st.USER_METADATA, tag.json())
            rows = layout.read_task_files(path, files_plan.names, sess)
            leased = (leasing(rows, take, tag, n, files_plan.held, who, now)
                      if files_plan.ids is None
                      else leasing_ids(rows, take, tag, files_plan.ids, ctx.shards, who, now))
            version, written = txn.replace(files_plan.names + acked, leased, tag, st.file_rows(n))
        run = noting_leased(ctx, written, files_plan.leases, files_plan.ids)
        return leased_result(ctx, version, tag.token, (files_plan.lo, files_plan.hi), run,
                             acking, acked)

    return ctx.retrying(attempt, deadline=deadline, what=f"take on {ctx.name!r}")


def head_plan(files: dict[str, dict[str, Any]], n: int, now: float) -> FilePlan | None:
    """A ``head_only`` take's files: those :func:`store.head_files` shows hold the
    ``n`` lowest ready tasks (the choice among their rows is the write's)."""
    head = st.head_files(files, now, n)
    if head is None:
        return None
    names, rows, lo, hi = head
    return FilePlan(names, lo, hi, min(n, rows), None, {}, rows)


def sub_queue_plan(ctx: TubeContext, sess: SparkSession, files: dict[str, dict[str, Any]],
                   acked: list[str], n: int, win: int, now: float) -> FilePlan | None:
    """A ``sub_queue_heads`` take's choice (:func:`choose_heads`) on the data files of
    the transaction's snapshot (``files``) less those its commit acks whole
    (``acked``: their sub-queues are free again), and the files that hold the
    chosen tasks. Where the files that may hold a ready task hold more than
    ``schema.HEAD_READ_ROWS`` rows and file statistics bound where the ``n``
    lowest ready tasks are (:func:`store.head_key`), the ready tasks within
    that bound first, as the MERGE's choice does: a sub-queue's head comes
    before its other tasks, so the heads within the bound are heads; all of
    them when those give fewer than ``n``. None when the files' columns are
    not known yet, or the driver chose a task that is not a free head; also
    when a file's statistics are unknown: it may have a deletion vector
    (:func:`store.file_entry`), whose deleted rows its Parquet still holds,
    and only Delta's own read (the MERGE's) leaves them out."""
    kept = {name: f for name, f in files.items() if name not in acked}
    if any(f["rows"] is None for f in kept.values()):
        return None
    ready = [name for name, f in kept.items() if st.may_hold_ready(f, now)]
    if not ready:
        return FilePlan([], 0, 0, 0, [], {})
    path = ctx.layout.tasks(ctx.key)
    if ctx.layout.task_file_schema(path, sess) is None:
        return None
    many = sum(kept[name]["rows"] for name in ready) > st.schema.HEAD_READ_ROWS
    key = st.head_key(kept.values(), now, n) if many else None
    if key is not None:
        chosen = choose_heads(ctx, sess, kept, ready, n, win, now, key)
        if chosen is None or chosen.leases >= n:
            return chosen
    return choose_heads(ctx, sess, kept, ready, n, win, now)


def choose_heads(ctx: TubeContext, sess: SparkSession, files: dict[str, dict[str, Any]],
                 ready: list[str], n: int, win: int, now: float,
                 key: tuple[int, int] | None = None) -> FilePlan | None:
    """The driver's choice among the rows of the data files ``ready`` (may hold a
    ready task; only those that reach ``key`` when given, and only their rows
    at or below it) and of the ``files`` that may hold a lease (busy
    sub-queues), in one query, checked against those rows: every chosen task
    ready, its sub-queue without a live lease. None when it is not so. Up to
    ``schema.HEAD_READ_ROWS`` rows are read into one partition, which already
    holds each sub-queue whole: the query runs as one Spark job, without the
    shuffle a choice by sub-queue otherwise needs (and its job of its own).
    sparkqueue's own choice (:meth:`UtubeDriver.choose`) passes over busy
    sub-queues by itself, so for it the query does not check again."""
    near = [name for name in ready if key is None or st.reaches(files[name], key)]
    held = [name for name, f in files.items() if name not in near and st.may_hold(f, "taken")]
    rows = ctx.layout.read_task_files(ctx.layout.tasks(ctx.key), near + held, sess)
    if sum(files[name]["rows"] for name in near + held) <= st.schema.HEAD_READ_ROWS:
        rows = rows.coalesce(1)  # one partition holds every sub-queue whole: no shuffle
    live = near_head(rows.where("task_id >= 0"), now, None if key is None else st.bound_sql(key))
    chosen = ctx.driver.choose(live, n, win)
    if type(ctx.driver).choose is UtubeDriver.choose:
        chosen = chosen.withColumn("busy", F.lit(False))
    else:  # a driver's own: its rows from ``live``, and whether their sub-queues are busy
        busy = (live.where("eff = 'taken'").select(F.col("utube").alias("busy_utube"))
                .distinct().withColumn("busy", F.lit(True)))
        chosen = (live.join(chosen.select("task_id"), "task_id", "left_semi")
                  .join(busy, F.col("utube").eqNullSafe(F.col("busy_utube")), "left"))
    picked = sorted((int(r["task_id"]), r["status"], r["eff"], r["busy"]) for r in
                    chosen.select("task_id", "status", "eff", "busy").collect())
    if any(eff != "ready" or busy for _, _, eff, busy in picked):
        return None  # not a choice of free heads (a driver's own): the MERGE checks it
    ids = [row[0] for row in picked]
    if not ids:
        return FilePlan([], 0, 0, 0, [], {})
    names = [name for name in near if holds_any(files[name], ids)]
    return FilePlan(names, ids[0], ids[-1], len(ids), ids,
                    expiry_counts([row[1] for row in picked]))


def near_head(rows: DataFrame, now: float, bound: str | None) -> DataFrame:
    """Task ``rows`` with their state at ``now`` (``eff``), for a sub-queue choice:
    all of them; or, within ``bound`` (SQL on ``(pri, order_key)``), the ready
    ones and every lease, since the taken rows tell which sub-queues are
    busy and past the bound only they count."""
    if bound is not None:
        rows = rows.where(f"(({st.ready_when(now)}) AND {bound}) OR status = 'taken'")
    rows = rows.withColumn("eff", F.expr(effective_status(now)))
    return rows if bound is None else rows.where(f"eff = 'taken' OR {bound}")


def holds_any(f: dict[str, Any], ids: list[int]) -> bool:
    """Whether a data file's statistics leave room for a row of ``ids`` (sorted)."""
    lo, hi = f["min_task_id"], f["max_task_id"]
    if lo is None or hi is None:
        return True
    at = bisect.bisect_left(ids, lo)
    return at < len(ids) and ids[at] <= hi


def leasing(rows: DataFrame, take: Op, tag: CommitTag, n: int, count: int, who: str,
            now: float) -> DataFrame:
    """``rows`` (``count`` ready tasks) with the ``n`` lowest ``(pri, order_key,
    task_id)`` leased to ``who``: those first, in partitions of their own (a
    union), then the others as they were."""
    action = action_set(take, tag, lease_context(now, who))
    if count <= n:  # the files hold the take's tasks alone
        return with_action(rows, action)
    rows = rows.withColumn("arg_take", F.row_number().over(Window.orderBy(*ORDER)) <= n)
    return with_action(rows.where("arg_take"), action).unionByName(
        rows.where("NOT arg_take").select(*st.TASK_TABLE_COLUMNS))


def leasing_ids(rows: DataFrame, take: Op, tag: CommitTag, ids: list[int], step: int,
                who: str, now: float) -> DataFrame:
    """``rows`` with the tasks ``ids`` (sorted, ``step`` apart in runs) leased to
    ``who``: those first, in partitions of their own, then the others as they
    were."""
    action = action_set(take, tag, lease_context(now, who))
    return (with_action(st.with_ids(rows, ids, rows.sparkSession, step), action)
            .unionByName(st.without_ids(rows, ids, rows.sparkSession, step)
                         .select(*st.TASK_TABLE_COLUMNS)))


def overlaps(ids: tuple[int, int], acking: list[int] | None) -> bool:
    """Whether a take's range of ids holds any of the ids its commit acks (sorted).

    Those were taken, so a range of rows stored ready holds none unless an
    ack names a task it does not hold: the MERGE's guard then refuses the
    ack, which a row both chosen and acked would turn into Delta's error
    of two source rows for one target row."""
    if not acking:
        return False
    at = bisect.bisect_left(acking, ids[0])
    return at < len(acking) and acking[at] <= ids[1]


def file_stats(ctx: TubeContext) -> list[dict[str, Any]] | None:
    """The tasks table's file statistics at the version the take's commit read just
    before (:meth:`Layout.known_version`), when known without a Spark job
    (:meth:`Layout.files_at`): what a take reads first, to find nothing or its
    whole choice without reading the table. Ingest runs before, so puts not
    yet ingested are in them, unless the table holds the take's tasks ahead
    of them (:func:`ingest.ingest_for_take`)."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    files = layout.files_at(path, layout.known_version(path))
    return None if files is None else list(files.values())


def candidates(ctx: TubeContext, now: float, n: int, acking: list[int] | None = None,
               bounded: bool = True) -> tuple[DataFrame, bool]:
    """What a take's ``choose`` looks at, and whether it is only the rows near the head.

    Every task; or, where the driver promises it looks only at the head
    (``head_only``, ``sub_queue_heads``) and file statistics bound where
    the ``n`` lowest ready tasks are (:func:`store.head_bound`), the
    ready tasks at or below that bound, with every taken task for
    ``sub_queue_heads`` drivers (unless ``bounded`` is False).

    ``acking``: tasks the take's own commit acks; they are left out (a lease
    that ended meanwhile would make one ready), and so their sub-queues
    count as free (the ack and the take are one commit).
    """
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    version = layout.known_version(path)
    key = None
    if ctx.driver.head_only or (bounded and ctx.driver.sub_queue_heads):
        # statistics and the read may see different versions: a bound from an older
        # one can only make a concurrent take return fewer tasks, never skip a lower one
        key = st.head_key(layout.file_stats(path, version), now, n)
    bound = None if key is None else st.bound_sql(key)

    def near(f: dict[str, Any]) -> bool:  # a file that may hold a ready row within the bound
        return st.may_hold_ready(f, now) and (key is None or st.reaches(f, key))

    ready = st.ready_when(now)
    if ctx.driver.head_only:
        rows = layout.read_pruned(path, version, near)
        rows = rows.where(ready if bound is None else f"({ready}) AND {bound}")
        rows = rows.where("task_id >= 0").withColumn("eff", F.lit("ready"))
    elif bound is not None:
        rows = layout.read_pruned(path, version, lambda f: near(f) or st.may_hold(f, "taken"))
        rows = near_head(rows.where("task_id >= 0"), now, bound)
    else:
        rows = live_tasks(ctx, now, pending=False, version=version)
    rows = st.without_ids(rows, acking, ctx.spark, ctx.shards) if acking else rows
    return rows, bound is not None and not ctx.driver.head_only
