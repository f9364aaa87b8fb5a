"""The sweeper: expiry written down, purges, maintenance and statistics snapshots.

One pass over a tube (:func:`sweep_tube`), in this order, each step a few
Delta commits, each of which leaves consistent tables, so a pass killed at
any point leaves them so and the next pass does what is left:

1. **expire**: ttl-expired tasks deleted, ended leases and passed delays
   made ``ready`` (:func:`expire`; correctness never depends on it, reads
   already apply expiry at their own time);
2. **purge**: superseded ingest-cursor markers out of the tasks table, and
   inbox rows already ingested out of the inbox. Neither touches a file that
   a take or an ack reads (markers have negative ids in files of their own;
   takes never read the inbox inside a transaction);
3. **compact** (every ``compact_interval`` seconds): small files behind the
   head holding no ready and no taken task (buried, delayed, kept ``done``
   tasks) rewritten into fewer, in commits that change no data, so that
   takes and acks running beside it are not aborted (:func:`compact`);
4. **vacuum** (every ``vacuum_interval`` seconds): files unreferenced for
   longer than ``vacuum_retention_hours`` deleted from both tables;
5. **snapshot**: one row in ``ROOT/_stats`` with the tube's statistics and
   what this pass did (:meth:`Queue.statistics_history` reads them).

Commits of steps 1-2 are tagged and step 3's change no data, so statistics
never count them as calls.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from . import store as st
from .engine import ops, verbs
from .engine.records import live_tasks, records_at
from .engine.stats import census_of
from .errors import Timeout
from .store import CommitTag

if TYPE_CHECKING:
    from .engine.context import TubeContext
    from .queue import Queue
    from .tube import Tube

__all__ = ["STATS_SCHEMA", "ACTIONS", "sweep_tube", "compact", "cold_groups", "purge", "vacuum",
           "expire"]

#: What a pass reports, per tube and summed over tubes.
ACTIONS = ("ttl", "ttr", "delay", "purged", "compacted", "vacuumed")

#: One row per tube per sweep pass.
STATS_SCHEMA = T.StructType([
    T.StructField("tube", T.StringType()),
    T.StructField("sweep_id", T.StringType()),
    T.StructField("at", T.DoubleType()),
    *[T.StructField(s, T.LongType()) for s in ("ready", "taken", "done", "buried", "delayed",
                                              "total")],
    T.StructField("calls", T.MapType(T.StringType(), T.LongType())),
    T.StructField("oldest_ready_age", T.DoubleType()),
    T.StructField("tasks_expired", T.LongType()),
    T.StructField("leases_expired", T.LongType()),
    T.StructField("delays_ended", T.LongType()),
    T.StructField("purged", T.LongType()),
    # NULL: not due this pass; a number: the files the step removed
    T.StructField("compacted", T.LongType()),
    T.StructField("vacuumed", T.LongType()),
])

#: Files with a delay or ttl ending sooner than this many seconds are not compacted:
#: a task whose delay ends becomes takeable, and its file read by a take.
COMPACT_HORIZON = 60.0
#: A file with fewer rows than this is small (see store.TASK_FILE_ROWS).
SMALL_FILE_ROWS = st.TASK_FILE_ROWS // 4
#: Purges give way to producers: after this many seconds of conflicts they wait
#: for the next pass instead of holding the sweeper up.
PURGE_PATIENCE = 15.0

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def sweep_tube(queue: Queue, tube: Tube, sweep_id: str,
               last: tuple[float | None, float | None],
               progress: Progress = _quiet) -> dict[str, int]:
    """One sweeper pass over ``tube``; the counts per action.

    ``last`` holds when compaction and vacuum last ran on the tube (from the
    snapshots), which with the conf's intervals decides whether they are due.
    """
    config = queue.config
    now = tube.context.now()
    parts = tube.parts  # a sharded tube's shards, each swept as a tube of its own
    expired = dict.fromkeys(("ttl", "ttr", "delay"), 0)
    for part in parts:
        for key, value in expire(part.context).items():
            expired[key] += value
    progress(f"{tube.name}: expired ttl={expired['ttl']} ttr={expired['ttr']} "
             f"delay={expired['delay']}")
    purged = sum(purge(part) for part in parts)
    progress(f"{tube.name}: purged {purged}")
    compacted = vacuumed = None
    if _due(last[0], config.compact_interval, now):
        compacted = sum(compact(part) for part in parts)
        progress(f"{tube.name}: compacted {compacted} file(s)")
    if _due(last[1], config.vacuum_interval, now):
        vacuumed = sum(vacuum(part, config.vacuum_retention_hours) for part in parts)
        progress(f"{tube.name}: vacuumed {vacuumed} file(s)")
    stats, oldest = census_of([part.context for part in parts], tube.context.now())
    snapshot = (
        tube.name, sweep_id, now, *[int(stats["tasks"][s]) for s in (
            "ready", "taken", "done", "buried", "delayed", "total")],
        {k: int(v) for k, v in stats["calls"].items()},
        None if oldest is None else max(0.0, now - oldest),
        expired["ttl"], expired["ttr"], expired["delay"], purged, compacted, vacuumed,
    )
    layout = tube.context.layout
    layout.create_stats_table(STATS_SCHEMA)
    st.append(queue.spark.createDataFrame([snapshot], STATS_SCHEMA), layout.stats)
    progress(f"{tube.name}: snapshot written")
    return {**expired, "purged": purged, "compacted": compacted or 0,
            "vacuumed": vacuumed or 0}


def _due(last: float | None, interval: float, now: float) -> bool:
    """Whether a step run every ``interval`` seconds (``inf``: never) is due at ``now``."""
    return not math.isinf(interval) and (last is None or now - last >= interval)


def last_maintenance(queue: Queue) -> dict[str, tuple[float | None, float | None]]:
    """When compaction and vacuum last ran, per tube, from the snapshots."""
    layout = queue.layout
    if not layout.exists(layout.stats):
        return {}
    rows = (layout.read(layout.stats).groupBy("tube").agg(
        F.max(F.when(F.col("compacted").isNotNull(), F.col("at"))).alias("c"),
        F.max(F.when(F.col("vacuumed").isNotNull(), F.col("at"))).alias("v"),
    ).collect())
    return {r["tube"]: (r["c"], r["v"]) for r in rows}


def new_sweep_id() -> str:
    return uuid.uuid4().hex


# -- expiry ------------------------------------------------------------------------------

#: A task whose stored state the clock has changed: its ttl ended, or its lease or
#: delay did (it reads ready, stored taken or delayed).
DUE = "{eff} = 'expired' OR ({eff} = 'ready' AND t.status IN ('taken', 'delayed'))"


def expire(ctx: TubeContext) -> dict[str, int]:
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
    op = verbs.Op(
        "sweep",
        guard=f"CASE WHEN NOT ({DUE}) THEN 'Stale' END",
        action={"status": "'ready'", "owner": "NULL", "lease_token": "NULL",
                "lease_end": "0.0D", "delay_end": "0.0D"},
        delete_when="{eff} = 'expired'",
        missing="Stale",
        pending=True,
    )

    def due(now: float) -> DataFrame:
        live = live_tasks(ctx, now, pending=False).where(f"next_event <= {st.sql_num(now)}")
        return (live.where("eff = 'expired' OR (eff = 'ready' AND status IN "
                           "('taken', 'delayed'))")
                .withColumn("status", F.when(F.col("eff") == "expired", "expired")
                            .otherwise(F.col("status"))))

    done = ops.apply(ctx, op, None, chooser=due)
    counts = dict.fromkeys(ops.EXPIRY_COUNTS, 0)
    counts.update(done[1] if done is not None else {})
    return counts


# -- purge -------------------------------------------------------------------------------

def purge(tube: Tube) -> int:
    """Remove superseded cursor markers and already-ingested inbox rows; rows removed.

    The markers' DELETE conflicts only with ingests (appends, which never
    lose: the purge retries, and after PURGE_PATIENCE seconds of conflicts
    leaves the rest for the next pass). The inbox's removal of whole files
    (:meth:`Store.purge_inbox`) by the accelerated store reads no data, so
    by Delta's conflict rules puts do not abort it; the portable store's is a
    DELETE by put token, which by those rules puts committing meanwhile abort (the put
    wins, the purge retries the same way; no race test shows it).
    """
    deadline = time.monotonic() + PURGE_PATIENCE
    removed = 0
    for step in (_purge_markers, _purge_settled, _purge_inbox):
        try:
            removed += tube.context.retrying(lambda s=step: s(tube),  # type: ignore[misc]
                                             deadline=deadline, what=f"purge of {tube.name!r}")
        except Timeout:
            break
    return removed


def _purge_markers(tube: Tube) -> int:
    layout = tube.context.layout
    path = layout.tasks(tube.context.key)
    row = (layout.read(path).where("task_id < 0")  # marker files only (their statistics)
           .agg(F.count("*"), F.min("task_id")).first())
    if row is None or int(row[0]) <= 1:
        return 0
    keep = int(row[1])  # the newest marker (the lowest id): the cursor's fallback
    with layout.tagged(CommitTag.new("purge")) as sess:
        st.delete(sess, path, f"task_id < 0 AND task_id > {keep}")
    return int(row[0]) - 1


def _purge_settled(tube: Tube) -> int:
    """The lease records that settle rows closed, and those rows, out of the tasks
    table (``engine.records``): one MERGE whose source is the settle rows of
    its own snapshot; none where file statistics show no settle row."""
    layout = tube.context.layout
    path = layout.tasks(tube.context.key)
    files = layout.files_at(path, layout.latest_version(path), live=False)
    if files is not None and not st.settled_records(files):
        return 0
    with layout.tagged(CommitTag.new("purge")) as sess:
        settled = (layout.read(path, sess).where(f"status = '{st.SETTLED}'")
                   .select("change_token").distinct())
        done = st.merge(sess, path, settled,
                        f"t.change_token = s.change_token AND t.status IN "
                        f"('{st.LEASE}', '{st.SETTLED}')", [st.When("delete")])
    return 0 if done is None else int(done["num_deleted_rows"])


def _purge_inbox(tube: Tube) -> int:
    """The inbox purge up to the cursor, keeping the put files that lease records read
    (both as of one version of the tasks table: a record committed later
    reads puts after that cursor)."""
    ctx = tube.context
    layout = ctx.layout
    version = layout.latest_version(layout.tasks(ctx.key))
    held = [f for record in records_at(ctx, version).values() for f in record.files]
    return layout.purge_inbox(ctx.key, layout.cursor(ctx.key, at=version), held)


# -- compaction and vacuum -------------------------------------------------------------

def compact(tube: Tube) -> int:
    """Rewrite small cold files behind the head of the tasks table into fewer; files removed.

    Cold: no ready and no taken task (the file's largest status sorts below
    ``ready``) and nothing due within COMPACT_HORIZON seconds. Behind the
    head: every id in the file is below the lowest id of a ready or taken
    task, so no take (which leases ready tasks, at or above the head) and no
    ack (of taken tasks) reads it. Each group of files is rewritten in one
    commit that changes no data (``dataChange=false``, as OPTIMIZE commits;
    :meth:`Store.rewrite_files`): Delta does not abort a concurrent take or
    ack for it, since they read none of the files it removes, and the change
    feed has nothing to report. A commit that removed one of the files first
    (a kick, a delete) makes the rewrite conflict; it is retried.
    """
    layout = tube.context.layout
    path = layout.tasks(tube.context.key)
    if not layout.store.commits_files:  # Delta's SQL cannot name the files to rewrite
        return 0

    def attempt() -> int:
        files = (layout.read(path).where("task_id >= 0")
                 .groupBy(F.element_at(F.split("_metadata.file_path", "/"), -1).alias("file"))
                 .agg(F.count("*").alias("n"), F.min("task_id").alias("lo"),
                      F.max("task_id").alias("hi"), F.max("status").alias("top"),
                      F.min("next_event").alias("soonest"),
                      F.min(F.when(F.col("status").isin("ready", "taken"), F.col("task_id")))
                      .alias("live"))
                 .collect())
        return sum(layout.store.rewrite_files(path, group)
                   for group in cold_groups(files, tube.context.now()))

    return tube.context.retrying(attempt, what=f"compaction of {tube.name!r}")


def cold_groups(files: list[Any], now: float) -> list[list[str]]:
    """Names of small cold files behind the head, in id order, grouped for rewriting.

    ``files`` rows carry each file's name ``file``, row count ``n``, id range
    ``lo``/``hi``, largest status ``top``, earliest ``next_event``
    ``soonest`` and lowest ready-or-taken id ``live``. A group holds two or
    more files and at most TASK_FILE_ROWS rows.
    """
    lives = [f["live"] for f in files if f["live"] is not None]
    head = min(lives) if lives else math.inf

    def cold(f: Any) -> bool:
        soonest = f["soonest"] if f["soonest"] is not None else math.inf
        return bool(f["n"] < SMALL_FILE_ROWS and f["top"] < "ready" and f["hi"] < head
                    and soonest > now + COMPACT_HORIZON)

    groups: list[list[Any]] = [[]]
    for f in sorted(filter(cold, files), key=lambda f: (f["lo"], f["hi"])):
        if sum(g["n"] for g in groups[-1]) + f["n"] > st.TASK_FILE_ROWS:
            groups.append([])
        groups[-1].append(f)
    return [[f["file"] for f in group] for group in groups if len(group) >= 2]


def vacuum(tube: Tube, retention_hours: float) -> int:
    """VACUUM both tables with the conf's retention; data files deleted.

    VACUUM writes no data and no file actions, so it conflicts with nothing.
    A retention Delta's check refuses is refused before anything is deleted
    (:func:`sparkqueue.store.tables.vacuum`: :class:`InvalidOption`).
    """
    layout = tube.context.layout
    deleted = 0
    for path in (layout.inbox(tube.context.key), layout.tasks(tube.context.key)):
        before = layout.latest_version(path)
        tube.context.guarded(lambda p=path: st.vacuum(  # type: ignore[misc]
            tube.context.spark, p, retention_hours))
        for _, info in layout.commit_infos(path, before):
            if info.get("operation") == "VACUUM END":
                deleted += int((info.get("operationMetrics") or {}).get("numDeletedFiles", 0))
    return deleted


def history(queue: Queue, name: str | None) -> DataFrame:
    """The snapshots, oldest first (empty, with the schema, before any sweep)."""
    layout = queue.layout
    if not layout.exists(layout.stats):
        return queue.spark.createDataFrame([], STATS_SCHEMA)
    frame = layout.read(layout.stats)
    if name is not None:
        frame = frame.where(F.col("tube") == name)
    return frame.orderBy("at", "tube")
