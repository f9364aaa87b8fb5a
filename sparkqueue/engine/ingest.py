"""Puts become tasks: the inbox rows after the cursor, read as task rows, and the ingest
that moves them into the tasks table exactly once."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .. import store as st
from .. import validate
from ..store import CommitTag, sql_num
from .context import TubeContext

#: A put's options that were one value for all its tasks (its commit tag's ``put``).
PUT_TAG_FIELDS = [("now", "double"), ("pri", "long"), ("utube", "string"), ("ttl", "double"),
                  ("ttr", "double"), ("delay", "double")]

#: What ingest knows of each inbox file besides its put's tag (see :func:`read_put_files`).
FILE_TAG_FIELDS = [("first_id", "long"), ("id_step", "long"), ("inbox_version", "long"),
                   ("row_lo", "long"), ("row_hi", "long")]

#: A place past the last row of any inbox file (``c.row_hi`` of a read of all rows).
EVERY_ROW = 1 << 62

#: Ingests of up to this many puts carry the puts' tag values as a literal map.
TAGS_INLINE = 64

#: An ingest writes runs of consecutive put files of at least this many tasks side
#: by side, a task each (see :func:`runs`): an ingest of fewer is written by one.
#: Each run is a scan, a plan and a task of its own, so fewer, longer runs cost
#: less than many short ones (docs/design.md, "Ingest").
INGEST_RUN_ROWS = 25 * st.TASK_FILE_ROWS

def tag_values(put: dict[str, Any]) -> tuple[Any, ...]:
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
    pri = min(max(pri, validate.URGENT_PRI), validate.PRI_RANGE[1])
    utube = put.get("utube") if isinstance(put.get("utube"), str) else None
    now = number(put.get("now"))
    return (now or 0.0, pri, utube, *[number(put.get(k)) for k in ("ttl", "ttr", "delay")])

def put_order_rows(puts: list[st.PutFile], next_id: int, n: int, now: float,
                   start: int | None = None) -> tuple[int, int] | None:
    """The first and last row (numbered as ids count them, :meth:`TubeContext.task_id`)
    of the ``n`` tasks a ``head_only`` driver takes among the ``puts`` alone
    (``next_id`` after the last; their rows from ``start`` on, by default all),
    when their commit tags tell without reading them; None when they do not.

    They tell when every put gave all its tasks one priority, the same for
    every put, and no delay, no option as a Column (its tag's ``columns`` is
    empty; a put written before tags said so counts as having some), and no
    ttl that has ended by ``now`` (as :func:`task_row_sql` reckons it): every
    task is then ready, and in :data:`~sparkqueue.drivers.base.ORDER` the
    lowest rows come first.
    """
    names = [name for name, _ in PUT_TAG_FIELDS]
    tags = [dict(zip(names, tag_values(f.tag), strict=True)) for f in puts]

    def ready(tag: dict[str, Any]) -> bool:
        ttl = st.INF if tag["ttl"] is None else tag["ttl"]
        return not tag["delay"] and tag["now"] + ttl > now

    if (not puts or any(f.tag.get("columns") != [] for f in puts)
            or len({tag["pri"] for tag in tags}) > 1 or not all(map(ready, tags))):
        return None
    first = puts[0].first_id if start is None else start
    return first, first + min(n, next_id - first) - 1

def task_row_sql() -> dict[str, str]:
    """SQL for each tasks-table column of a new task, by name (see ``task_columns``)."""
    ttl = f"coalesce(ttl, c.ttl, {sql_num(st.INF)})"
    delay = "coalesce(delay, c.delay, 0.0D)"
    ttl_end = f"(c.now + {delay} + {ttl})"
    task_id = "c.first_id + _row * c.id_step"  # see TubeContext.task_id
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

#: ``task_columns`` as SQL text: two ``selectExpr`` calls cost far less to build
#: than some sixty Column objects, each a round trip to the JVM (in a profile of
#: put, the result's rows took 0.07 s this way and 0.36 s as Columns).
_TASK_ROW_SQL = {name: f"{sql} AS {name}" for name, sql in task_row_sql().items()}

# every column nullable, as the same columns read from a table are (a CASE
# without ELSE is nullable), so results compare equal whichever way they came
_NULLABLE_SQL = {name: f"CASE WHEN {name} IS NOT NULL THEN {name} END AS {name}"
                 for name in task_row_sql()}

def task_columns(joined: DataFrame, columns: list[str] | None = None) -> DataFrame:
    """Task rows from inbox rows (with their place ``_row`` in their file) and,
    in struct ``c``, their file's first id and commit and their put's tag values.

    Tarantool's timing rules for a new task: ttl counts from the put and
    includes the delay; ttr defaults to ttl; a delayed task waits until
    ``now + delay``. A row's own value (an option given as a Column) wins over
    the put's; the tube defaults were resolved into the tag at put time.
    """
    names = columns or list(_TASK_ROW_SQL)
    return as_stored(joined.selectExpr(*[_TASK_ROW_SQL[n] for n in names]), names)


def as_stored(rows: DataFrame, names: list[str] | None = None) -> DataFrame:
    """Task rows with every column nullable, as the same columns read from the
    tasks table are: results compare equal whichever way they came. ``names``:
    the rows' columns, where the caller knows them (asking a Spark Connect
    client's DataFrame for them is a round trip to the server)."""
    return rows.selectExpr(*[_NULLABLE_SQL[n] for n in names or rows.columns])


def empty(ctx: TubeContext) -> DataFrame:
    """An empty task DataFrame (a take that found nothing)."""
    tasks = ctx.layout.read(ctx.layout.tasks(ctx.key))
    if "data" not in tasks.columns:  # not ingested yet: the puts' payload, if any
        payload = payload_schema(ctx) or T.StructType([])
        tasks = tasks.withColumn("data", F.lit(None).cast(payload))
    return ctx.spark.createDataFrame([], tasks.select(*st.PUBLIC_COLUMNS).schema)


def payload_schema(ctx: TubeContext) -> T.StructType | None:
    """The tube's payload schema; None until its first put. Read once: only
    the first put sets it (later ones are conformed to it)."""
    if ctx.schema is None:
        ctx.schema = data_schema(ctx, ctx.layout.inbox(ctx.key))
    return ctx.schema


def data_schema(ctx: TubeContext, path: str) -> T.StructType | None:
    """The payload struct of the table at ``path``; None while it has no ``data``."""
    current = ctx.layout.read(path).schema
    if "data" not in current.fieldNames():
        return None
    schema = current["data"].dataType
    assert isinstance(schema, T.StructType)
    return schema


def pending_rows(ctx: TubeContext, spark: SparkSession, anchor: st.Cursor, upto: int,
                 after: int | None = None, columns: list[str] | None = None,
                 ) -> DataFrame | None:
    """Inbox rows of the puts after ``anchor`` (or after version ``after``) up to
    ``upto`` that are not ingested, as task rows (only ``columns`` of them when
    given: fewer to plan)."""
    files, next_id = ctx.layout.put_files(ctx.key, anchor, upto)
    files = [f for f in within(files, next_id, anchor.first_pending, next_id)
             if after is None or f.version > after]
    if not files:
        return None
    return tasks_of_files(ctx, spark, files, columns,
                          rows=(anchor.first_pending, next_id) if anchor.partial else None)


def ends(files: list[st.PutFile], next_id: int) -> list[int]:
    """The row after each of the put ``files`` (in id order, ``next_id`` after the last)."""
    return [*[f.first_id for f in files[1:]], next_id] if files else []


def within(files: list[st.PutFile], next_id: int, start: int, end: int) -> list[st.PutFile]:
    """The put ``files`` (in id order, ``next_id`` after the last) that hold rows from
    ``start`` to ``end`` (exclusive)."""
    return [f for f, after in zip(files, ends(files, next_id), strict=True)
            if after > start and f.first_id < end]


def advanced(cursor: st.Cursor, files: list[st.PutFile], next_id: int, upto: int,
             bound: int) -> st.Cursor:
    """The cursor after an ingest from ``cursor`` of the rows below ``bound`` of the
    puts up to inbox version ``upto`` (``files``: all of them after ``cursor``'s
    version, ``next_id`` after the last): the last version whose puts it
    ingested whole, and how many rows of the later ones (``Cursor.partial``)."""
    rest = [f for f, after in zip(files, ends(files, next_id), strict=True) if after > bound]
    if bound >= next_id or not rest:
        return st.Cursor(upto, next_id)
    first = next(f.first_id for f in files if f.version == rest[0].version)
    return st.Cursor(rest[0].version - 1, first, bound - first)


def runs(files: list[st.PutFile], next_id: int, least: int,
         start: int | None = None) -> list[list[st.PutFile]]:
    """Put files (in id order, ``next_id`` after the last; their rows from ``start``
    on) cut into runs of consecutive files of at least ``least`` rows each (the
    last one may hold fewer), which an ingest writes side by side
    (:func:`store.ingest_frame`)."""
    out: list[list[st.PutFile]] = [[]]
    rows = 0
    for f, after in zip(files, ends(files, next_id), strict=True):
        if rows >= least:
            out.append([])
            rows = 0
        out[-1].append(f)
        rows += after - max(f.first_id, start or 0)
    return out


def tasks_of_files(ctx: TubeContext, spark: SparkSession, files: list[st.PutFile],
                   columns: list[str] | None = None, rows: tuple[int, int] | None = None,
                   ) -> DataFrame:
    """The rows of the inbox ``files`` as task rows (only ``columns`` when given; only
    ``rows`` from its first to before its second, rows as ids count them).

    A task's id is its file's first id plus its place in the file
    (:meth:`Layout.put_files`), spaced for the tube's shards
    (:meth:`TubeContext.task_id`); its other columns come from the row
    (options given as Columns) and from its put's commit tag (the rest).
    """
    frame = read_put_files(ctx, spark, files, rows)
    if rows is not None:
        frame = frame.where("_row >= c.row_lo AND _row < c.row_hi")
    return task_columns(frame, columns)


def read_put_files(ctx: TubeContext, spark: SparkSession, files: list[st.PutFile],
                   rows: tuple[int, int] | None = None) -> DataFrame:
    """The inbox ``files``' rows with their place ``_row`` in their file and, in
    struct ``c``, their file's first id and commit, their put's tag values
    (what :func:`task_columns` reads), and the places in the file of ``rows``
    (``row_lo`` to before ``row_hi``; all without ``rows``).

    Every value that differs from one call to the next comes from ``c``, a
    lookup in a literal map (or a broadcast table) by the row's file: Spark
    writes a number that is a literal of the query into its generated code,
    where it keeps a map as data, so a read of other files or other rows
    reuses the code a read of the same shape compiled (a drain's result of
    every batch, read by its consumer)."""
    payload = payload_schema(ctx)
    assert payload is not None  # there were puts
    frame = ctx.layout.read_files(ctx.layout.inbox(ctx.key), [f.name for f in files],
                                  st.inbox_schema(payload), spark)
    fields = FILE_TAG_FIELDS + PUT_TAG_FIELDS
    lo, hi = rows if rows is not None else (0, EVERY_ROW)
    values = [(f.name, ctx.task_id(f.first_id), ctx.shards, f.version,
               lo - f.first_id, hi - f.first_id, *tag_values(f.tag)) for f in files]
    if len(values) <= TAGS_INLINE:  # a literal map: no join, no extra Spark job
        lit = st.sql_literal
        tags = ", ".join(
            lit(v[0], "string") + ", named_struct(" + ", ".join(
                f"'{k}', {lit(x, t)}" for x, (k, t) in zip(v[1:], fields, strict=True))
            + ")" for v in values)
        return frame.selectExpr(
            "*", "_metadata.row_index AS _row",
            f"element_at(map({tags}), _metadata.file_name) AS c")
    frame = frame.selectExpr("*", "_metadata.file_name AS _file", "_metadata.row_index AS _row")
    table = spark.createDataFrame(values, "file string, " + ", ".join(
        f"{k} {t}" for k, t in fields))
    table = table.select("file", F.struct(*[k for k, _ in fields]).alias("c"))
    return frame.join(F.broadcast(table), frame["_file"] == table["file"])


class RunRows(NamedTuple):
    """A run of puts (:func:`runs`) as task rows, and the task ids it spans."""

    rows: DataFrame
    first: int  #: its first task id
    end: int  #: the next run's first task id (its ids are below)


def run_frames(ctx: TubeContext, spark: SparkSession, files: list[st.PutFile],
               next_id: int, start: int | None = None, end: int | None = None,
               ) -> list[RunRows]:
    """The task rows of the put ``files`` (``next_id`` after the last; only their rows
    from ``start`` to before ``end`` when given), one :class:`RunRows` per run
    for an ingest to write side by side; none for no files."""
    if not files:
        return []
    lo = max(files[0].first_id, start or 0)
    hi = next_id if end is None else min(end, next_id)
    grouped = [run for run in runs(files, hi, INGEST_RUN_ROWS, lo) if run]
    firsts = [lo, *[run[0].first_id for run in grouped[1:]]]
    out = []
    for k, (run, first, after) in enumerate(zip(grouped, firsts, [*firsts[1:], hi],
                                                strict=True)):
        cut = first > run[0].first_id or (k == len(grouped) - 1 and hi < next_id)
        out.append(RunRows(tasks_of_files(ctx, spark, run, rows=(first, after) if cut else None),
                           ctx.task_id(first), ctx.task_id(after)))
    return out


def ingest_for_take(ctx: TubeContext, n: int, files: dict[str, dict[str, Any]] | None,
                    newest: dict[str, int]) -> bool:
    """Before a take of ``n`` by a ``head_only`` driver: :func:`ingest` the puts
    waiting in the inbox, unless the tasks table holds ``n`` ready tasks ahead of
    all of them (:func:`puts_behind`). True when it ingested. ``newest``: the
    tasks table's version whose data files' statistics are ``files`` (None where
    unknown), and the inbox's newest when read just now. ``n`` 0: always ingest.

    So a small take after a big put takes from what an earlier take of new
    puts ingested (:func:`engine.fresh.fresh_plan` ingests only the put files
    that hold its tasks) and leaves the rest of the puts where they are,
    where ingesting them all would make the take's cost the backlog's."""
    layout = ctx.layout
    inbox, tasks = layout.inbox(ctx.key), layout.tasks(ctx.key)
    upto = newest[inbox] if inbox in newest else layout.latest_version(inbox)
    if upto <= ctx.ingested_upto:
        return False
    if n and ctx.driver.head_only and files is not None and puts_behind(
            ctx, files, newest[tasks], upto, n):
        return False
    ingest(ctx, {**newest, inbox: upto})
    return True


def puts_behind(ctx: TubeContext, files: dict[str, dict[str, Any]], version: int, upto: int,
                n: int) -> bool:
    """Whether the tasks table at ``version`` (``files``' statistics) holds ``n``
    tasks ready now that come before every task of the puts not yet ingested
    up to inbox version ``upto``, in a ``head_only`` driver's order (``pri``,
    then order key). Their puts' tags tell their priority (none may give it
    as a Column); their order key is their id, above every one ingested. A
    task made ready meanwhile in the inbox's puts (none: they are never
    leased) cannot change that, and a put committed after the take's look
    is one the take came before."""
    cursor = ctx.layout.cursor(ctx.key, at=version)
    every, next_id = ctx.layout.put_files(ctx.key, cursor, upto)
    puts = within(every, next_id, cursor.first_pending, next_id)
    if not puts or any(f.tag.get("columns") is None or "pri" in f.tag["columns"]
                       for f in puts):
        return False
    pri = min(tag_values(f.tag)[1] for f in puts)
    ahead = st.ready_ahead(files.values(), ctx.now(), pri, ctx.task_id(cursor.first_pending))
    return ahead >= n


def ingest(ctx: TubeContext, newest: dict[str, int] | None = None) -> None:
    """Move tasks put since the last ingest into the tasks table, exactly once.

    ``newest``: the inbox's and the tasks table's newest versions, read just
    now (:meth:`Layout.latest_versions`), so not read again."""
    layout = ctx.layout
    tasks, inbox = layout.tasks(ctx.key), layout.inbox(ctx.key)
    newest = newest or {}
    upto = newest[inbox] if inbox in newest else layout.latest_version(inbox)
    if upto <= ctx.ingested_upto:
        return
    read = newest.get(tasks)  # the tasks table's version, while no ingest has been tried
    cursor = layout.cursor(ctx.key, at=read)
    while upto > cursor.version:
        before = layout.latest_version(tasks) if read is None else read
        read = None
        files, next_id = layout.put_files(ctx.key, cursor, upto)
        files = within(files, next_id, cursor.first_pending, next_id)
        if not files:  # only the sweeper's commits (purge, vacuum) since
            break
        tag = CommitTag.new("ingest", upto=upto, next_id=next_id)
        with layout.tagged(tag) as sess:
            layout.write_marker(ctx.key, cursor, st.Cursor(upto, next_id), [
                run.rows for run in run_frames(ctx, sess, files, next_id, cursor.first_pending)])
        if layout.commit_of(tasks, tag.token, before) is not None:
            break
        # skipped: another process ingested from this cursor first, maybe up to an
        # older version or in part (a take of new puts): then only the cursor tells
        later = layout.cursor(ctx.key)
        if later == cursor:
            return
        cursor = later
    ctx.ingested_upto = upto


def truncate(ctx: TubeContext) -> None:
    """Delete every task of the tube and every put not yet ingested (Tarantool's
    truncate), retried on conflict.

    Where the store commits chosen files, one commit that has read the whole
    tasks table removes its files, no Spark job (:func:`truncate_files`).
    Elsewhere the puts are ingested first, then a DELETE removes all but the
    cursor's markers."""
    def run() -> None:
        if truncate_files(ctx):
            return
        ingest(ctx)
        with ctx.layout.tagged(CommitTag.new("truncate")) as sess:
            st.delete(sess, ctx.layout.tasks(ctx.key),  # and lease records, settle rows
                      f"task_id >= 0 OR status IN ('{st.LEASE}', '{st.SETTLED}')")
    ctx.retrying(run, what=f"truncate of {ctx.name!r}")


def truncate_files(ctx: TubeContext) -> bool:
    """The truncate of :func:`truncate` as one commit of the store's own, which has
    read the whole tasks table, tagged ``truncate``; False, having committed
    nothing, where the store cannot, the files' statistics are not known
    without a Spark job, or the table has no payload column while puts are.

    With puts after the cursor, it is an ingest of no rows: every file
    removed, the cursor moved past the newest put with a marker of its own
    (its tag says so, as an ingest's does). Without, every file but the
    markers' is removed, and the cursor stays (an ingest from it records its
    transaction version next: Delta would skip a portable engine's append
    of it, were it recorded already)."""
    layout = ctx.layout
    tasks = layout.tasks(ctx.key)
    if not layout.store.commits_files:
        return False
    txn = layout.store.begin(tasks, read_all=True)
    files = txn.files
    if files is None:
        return False
    cursor = layout.cursor(ctx.key, at=txn.version)
    upto = max(cursor.version, layout.latest_version(layout.inbox(ctx.key)))
    _, next_id = layout.put_files(ctx.key, cursor, upto)
    after = st.Cursor(upto, next_id)
    if after == cursor:
        if all(st.is_marker(f) for f in files.values()):
            return True  # nothing to delete
        return layout.store.remove_files(
            tasks, lambda now: [n for n, f in now.items() if not st.is_marker(f)],
            CommitTag.new("truncate"), read_all=True) is not None
    payload = payload_schema(ctx)
    if payload is None:
        return False  # puts whose payload schema is not read: the DELETE's way
    tag = CommitTag.new("truncate", upto=after.version, next_id=after.next_id)
    txn.ingest(ctx.key, cursor, after, [], None, tag, removed=files,
               like=T.StructType([T.StructField("data", payload)]))
    ctx.ingested_upto = upto
    return True
