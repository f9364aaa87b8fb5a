"""Lease records: a take of new puts that commits one row for its whole lease
instead of the leased rows themselves.

A consumer that keeps up with its producers takes puts not yet ingested,
the lowest ids first (:mod:`.fresh`). Written out, each of those leases is
a Spark job that reads the puts and writes them again as taken task rows,
about half of a batch's time in a drain; its ack then removes those rows.
A lease record is that write left undone: the take commits, with the
cursor's advance past the puts it leased, one row in the tasks table (status
``_lease``, task id NULL, so every task filter passes it over) that says
which put rows it leased, and the SET its take applied to them. The tasks
are those put rows with that SET (:func:`expand`), as the take would have
written them; the inbox files hold them unchanged until they are ingested
(the inbox purge keeps every put file a live record reads).

- The owner's ack (or delete) of exactly that batch removes the record: its
  file (the accelerated engine, :mod:`.leased`), or on the portable one a
  *settle row* appended beside it (:func:`close`: status ``_settled``, the
  record's token), which closes it; on a table made before settle rows, one
  DELETE of its row. No data is read. A release, touch or bury of that
  batch writes its tasks with the verb's SET in the same commit (a rewrite
  of the file, or one MERGE, :func:`write_out`); :mod:`.settle`.
- A settle row is a blind append: no statement, no rebuild of the table's
  state, a fraction of a DELETE's time. It closes the record when the
  record's file is still there at its commit (:func:`closes`; else it
  closes nothing and the verb goes the MERGE's way). Tasks tables are
  Serializable (``Layout.settles_by_append``), so every commit that read the
  record before the settle row conflicts and reads again; every reader
  reads the table's files without the closed records and their settle rows
  (``filestats.live_files``), and the sweeper purges both.
- Readers (:func:`live_tasks`: peek, statistics, the sweeper's and the
  verbs' choices, error reports) see each live record's tasks beside the
  table's rows, read at one version.
- Every other change to a recorded task first writes the record's tasks out
  (:func:`settle`): one MERGE that deletes the record and inserts its tasks,
  whose source reads the record in the MERGE's own snapshot, so that a
  record removed meanwhile (acked) inserts nothing and one removed after
  the snapshot makes the MERGE conflict. The change then goes its usual way.
  A take settles the records whose leases or ttls have ended, so their tasks
  are ready to be taken again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .. import store as st
from ..store import CommitTag, When, effective_status
from .context import TubeContext
from .ingest import as_stored, pending_rows, tasks_of_files

__all__ = ["LEASE", "Record", "as_acked", "close", "closes", "expand", "live_tasks", "record_row",
           "held", "holding", "records_at", "settle", "settle_ended", "settle_ids",
           "taken_as", "view", "with_action", "write_out"]

LEASE, SETTLED = st.LEASE, st.SETTLED

#: The column a record's row describes it in (as JSON): a string column that no
#: driver taking new puts by id reads (records are made for ``head_only``
#: drivers alone, whose tasks have no sub-queue).
DESCRIPTION = "utube"

@dataclass(frozen=True)
class Record:
    """One take's lease over put rows: the put files and which of their rows (as
    ids count rows, ``first`` to before ``end``), the take's SET on them, who
    holds them, until when, and the take's commit token."""

    files: tuple[st.PutFile, ...]
    first: int
    end: int
    ids: tuple[int, int]  #: the first and last task id leased
    action: dict[str, str]
    owner: str
    lease_end: float
    ttl_end: float
    token: str

    def to_json(self) -> str:
        return json.dumps({
            "files": [[f.name, f.version, f.first_id, f.tag] for f in self.files],
            "first": self.first, "end": self.end, "ids": list(self.ids),
            "action": self.action, "owner": self.owner, "lease_end": self.lease_end,
            "ttl_end": self.ttl_end, "token": self.token})

    @classmethod
    def from_json(cls, text: str) -> Record:
        d = json.loads(text)
        return cls(tuple(st.PutFile(*f) for f in d["files"]), d["first"], d["end"],
                   (d["ids"][0], d["ids"][1]), d["action"], d["owner"],
                   float(d["lease_end"]), float(d["ttl_end"]), d["token"])

    def ended(self, now: float) -> bool:
        """Whether a lease or a ttl among its tasks may have ended by ``now``."""
        return min(self.lease_end, self.ttl_end) <= now


def with_action(rows: DataFrame, action: dict[str, str], where: str | None = None,
                columns: list[str] | None = None, *extra: str) -> DataFrame:
    """The task ``columns`` of ``rows`` (aliased ``t`` for the SET; default every
    column of the tasks table) with an updating op's SET (``clauses.action_set``):
    on every row, or on those where the SQL ``where`` holds; then ``extra``."""
    def value(c: str) -> str:
        if c not in action:
            return c
        return (f"{action[c]} AS {c}" if where is None
                else f"CASE WHEN {where} THEN {action[c]} ELSE t.{c} END AS {c}")
    return rows.alias("t").selectExpr(*[value(c) for c in columns or st.TASK_TABLE_COLUMNS],
                                      *extra)


def record_row(record: Record) -> dict[str, Any]:
    """The record's row of the tasks table (column name -> value; the others NULL)."""
    return {"status": LEASE, DESCRIPTION: record.to_json(), "lease_end": record.lease_end,
            "ttl_end": record.ttl_end, "next_event": min(record.lease_end, record.ttl_end),
            "owner": record.owner, "change_token": record.token}


def close(sess: SparkSession, path: str, record: Record, who: str) -> None:
    """Append the settle row that closes ``record`` (its tasks acked or deleted by
    ``who``) to the tasks table ``path`` in ``sess`` (tagged), one row in a
    file of its own: a blind append, which rebuilds no table state and reads
    no row. It closes the record only where the record's file is still there
    at its commit (:func:`closes`); on a Serializable table every commit that
    read the record before it then conflicts (:meth:`Layout.settles_by_append`)."""
    row = {"status": SETTLED, "change_token": record.token, "owner": who}
    kinds = dict(st.TASK_COLUMNS)
    schema = T.StructType([T.StructField(c, kinds[c]) for c in row])
    st.append(sess.createDataFrame([tuple(row.values())], schema), path)


def closes(ctx: TubeContext, version: int, name: str, record: Record) -> bool:
    """Whether the lease record ``record``, in the data file ``name``, is there at
    ``version`` of the tube's tasks table (its settle row's commit): then that
    row closed it. From file statistics, else a read of that version."""
    path = ctx.layout.tasks(ctx.key)
    files = ctx.layout.files_at(path, version, live=False)
    if files is not None:
        return name in files
    return ctx.layout.read(path, version=version).where(
        f"status = '{LEASE}' AND change_token = {st.sql_literal(record.token, 'string')}"
    ).limit(1).count() > 0


def expand(ctx: TubeContext, spark: SparkSession, record: Record) -> DataFrame:
    """The tasks ``record`` leases, as the take would have written them."""
    rows = tasks_of_files(ctx, spark, list(record.files), rows=(record.first, record.end))
    return as_stored(with_action(rows, record.action))


def records_at(ctx: TubeContext, version: int) -> dict[str, Record]:
    """The live records of the tube's tasks table at ``version``, by data file.

    Found by file statistics (a record's file holds it alone), read once per
    Queue: a Spark job only for records its :class:`Memory` does not hold."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    files = layout.files_at(path, version)
    if files is None:  # loaded once (a Spark job), then moved on through the log
        layout.file_stats(path, version)
        files = layout.files_at(path, version)
    if files is None:
        return _read_records(ctx, path, version, None)
    names = [n for n, f in files.items() if st.may_hold(f, LEASE)]
    return held_records(ctx, path, version, names)


def held_in(ctx: TubeContext, names: list[str], files: dict[str, dict[str, Any]],
            ) -> dict[str, Record]:
    """The records among the tasks table's data files ``names`` (``files``: their
    statistics), by file: a Spark job only for records the Queue has not seen."""
    path = ctx.layout.tasks(ctx.key)
    return held_records(ctx, path, None,
                        [n for n in names if st.may_hold(files[n], LEASE)])


def held_records(ctx: TubeContext, path: str, version: int | None,
                 names: list[str]) -> dict[str, Record]:
    """The records that the data files ``names`` of ``path`` (at ``version``; None:
    the newest) hold, by file: from the Queue's :class:`Memory`, the others read."""
    memory = ctx.memory
    unknown = [n for n in names if memory.record(path, n) is None]
    if unknown:
        _read_records(ctx, path, version, unknown)
    return {n: r for n in names if (r := memory.record(path, n)) is not None}


def task_rows(ctx: TubeContext, spark: SparkSession, names: list[str],
              files: dict[str, dict[str, Any]]) -> DataFrame:
    """The tasks the tasks table's data files ``names`` hold (``files``: their
    statistics): read, or, for a lease record's file, its tasks (:func:`expand`)."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    held = held_in(ctx, names, files)
    frames = [expand(ctx, spark, r) for r in held.values()]
    plain = [n for n in names if n not in held]
    if plain or not frames:
        frames.append(layout.read_task_files(path, plain, spark))
    return st.union(frames)


def _read_records(ctx: TubeContext, path: str, version: int | None,
                  names: list[str] | None) -> dict[str, Record]:
    """The records in the data files ``names`` of ``path`` (None: the live records
    of the table at ``version``, those no settle row closes), read and written
    down."""
    layout = ctx.layout
    frame = (layout.read(path, version=version) if names is None
             else layout.read_files(path, names, None))
    rows = (frame.where(f"status IN ('{LEASE}', '{SETTLED}')")
            .selectExpr("_metadata.file_name AS name", "status", "change_token", DESCRIPTION)
            .collect())
    closed = {r["change_token"] for r in rows if r["status"] == SETTLED}
    found = {}
    for r in rows:
        if r["status"] == LEASE:
            record = Record.from_json(r[DESCRIPTION])
            ctx.memory.remember_record(path, r["name"], record)
            if names is not None or record.token not in closed:
                found[r["name"]] = record
    return found


def live_tasks(ctx: TubeContext, now: float, pending: bool = True,
               version: int | None = None) -> DataFrame:
    """Every task (tasks table, lease records and puts not yet ingested); its state
    at ``now`` in ``eff``.

    The tasks table is read at the version its records and cursor are read
    at: a Delta DataFrame reads the newest version when it runs, and an
    ingest or settle committed after those were read would show tasks twice.
    ``version``: that version where the caller has just read it (a take's
    choice, which its statement checks again); None: the newest, read now."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    upto = layout.latest_version(layout.inbox(ctx.key)) if pending else -1
    version = layout.latest_version(path) if version is None else version
    records = records_at(ctx, version) if version >= 0 else {}
    if upto <= ctx.ingested_upto and not records:
        tasks = layout.read(path)
    else:
        tasks = layout.read(path, version=version)
        rows = (pending_rows(ctx, ctx.spark, layout.cursor(ctx.key, at=version), upto)
                if upto > ctx.ingested_upto else None)
        for record in records.values():
            held = expand(ctx, ctx.spark, record)
            rows = held if rows is None else rows.unionByName(held)
        if rows is not None:
            tasks = tasks.unionByName(rows, allowMissingColumns=True)
    tasks = tasks.where("task_id >= 0")
    if "data" not in tasks.columns:  # nothing was ever put: no payload schema yet
        # a typed NULL: Spark 3.5 cannot encode an empty struct's value
        tasks = tasks.withColumn("data", F.lit(None).cast(T.StructType([])))
    return tasks.withColumn("eff", F.expr(effective_status(now)))


def view(ctx: TubeContext, now: float) -> DataFrame:
    """The tube's tasks as of ``now`` (ttl-expired ones left out), each with the
    status it has then."""
    return live_tasks(ctx, now).where("eff <> 'expired'").withColumn("status", F.col("eff"))


def task_row(ctx: TubeContext, ident: list[int], now: float) -> Row | None:
    """The row of the task ``ident`` (one id) in :func:`view`; None when none."""
    return ctx.guarded(lambda: view(ctx, now).where(F.col("task_id").isin(ident)).first())


def settle(ctx: TubeContext, which: Callable[[Record], bool], probe: bool = True) -> int:
    """Write out the tasks of the live records ``which`` picks, each record
    replaced by its tasks in one commit (tagged ``settle``, :func:`write_out`);
    how many records. A record acked after the MERGE's snapshot makes it
    conflict (retried). ``probe``: look for the table's newest version (else
    the one this process read last, for a choice that checks again in its own
    commit: on the portable engine a probe is a Spark job)."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)

    def attempt() -> int:
        version = layout.latest_version(path) if probe else layout.known_version(path)
        picked = [r for r in records_at(ctx, version).values() if which(r)]
        if not picked:
            return 0
        with layout.tagged(CommitTag.new("settle")) as sess:
            write_out(ctx, sess, picked)
        return len(picked)

    return ctx.retrying(attempt, what=f"settle of leases on {ctx.name!r}")


def write_out(ctx: TubeContext, sess: SparkSession, picked: list[Record],
              action: dict[str, str] | None = None,
              holds_row: Callable[[str], str] | None = None) -> None:
    """One MERGE that deletes the rows of the records ``picked`` and inserts their
    tasks (with ``action``'s SET, ``clauses.action_set``, applied); given
    ``holds_row`` (SQL on a record's row, its columns named with the prefix it
    is called with), only for the records whose row it holds for.

    Its source keeps only the tasks of records present (and so held) and not
    closed by a settle row in the MERGE's own snapshot: Delta plans that read
    of the target on it and checks it at commit, so a record acked before the
    MERGE inserts nothing, and one changed (or closed) after its snapshot
    makes it conflict. A MERGE that changes nothing commits nothing.
    """
    path = ctx.layout.tasks(ctx.key)
    tasks = st.union([
        (expand(ctx, sess, r) if action is None
         else as_stored(with_action(expand(ctx, sess, r), action)))
        .withColumn("rec", F.lit(r.token)) for r in picked])
    table = ctx.layout.read(path, sess)
    present = table.where(f"status = '{LEASE}'")
    if holds_row is not None:
        present = present.where(holds_row(""))
    present = present.select(F.col("change_token").alias("rec")).join(
        table.where(f"status = '{SETTLED}'").select(F.col("change_token").alias("rec")),
        "rec", "left_anti")
    tasks = tasks.join(present, "rec", "left_semi").withColumn("is_rec", F.lit(False))
    keys = sess.createDataFrame([(r.token, True) for r in picked], "rec string, is_rec boolean")
    source = tasks.unionByName(keys, allowMissingColumns=True)
    on = f"s.is_rec AND t.status = '{LEASE}' AND t.change_token = s.rec"
    st.merge(sess, path, source, on if holds_row is None else f"{on} AND {holds_row('t.')}",
             [When("delete"),
              When("insert", "NOT s.is_rec", {c: f"s.{c}" for c in st.TASK_TABLE_COLUMNS})])


def held(record: Record, who: str, now: float, prefix: str = "") -> str:
    """The condition on the tasks table's rows (columns named with ``prefix``) that
    holds for ``record``'s row alone, while ``who`` holds its lease and its
    lease and ttl run at ``now``."""
    return (f"{prefix}status = {st.sql_literal(LEASE, 'string')} "
            f"AND {prefix}change_token = {st.sql_literal(record.token, 'string')} "
            f"AND {prefix}owner = {st.sql_literal(who, 'string')} "
            f"AND {prefix}lease_end > {st.sql_num(now)} AND {prefix}ttl_end > {st.sql_num(now)}")


def holds(ids: list[int] | None) -> Callable[[Record], bool]:
    """Whether a record may hold any of ``ids`` (sorted; None: any id)."""
    if ids is None:
        return lambda r: True
    return lambda r: bool(ids) and r.ids[0] <= ids[-1] and r.ids[1] >= ids[0]


def holding(ctx: TubeContext, ids: list[int] | None) -> bool:
    """Whether a live record of the version this process read last may hold any of
    ``ids`` (None: any)."""
    path = ctx.layout.tasks(ctx.key)
    return any(map(holds(ids), records_at(ctx, ctx.layout.known_version(path)).values()))


def settle_ids(ctx: TubeContext, ids: list[int] | None) -> int:
    """:func:`settle` the records that may hold any of ``ids`` (sorted; None: all)."""
    return settle(ctx, holds(ids))


def settle_ended(ctx: TubeContext, now: float) -> int:
    """:func:`settle` the records whose leases or ttls may have ended by ``now``
    (their tasks are then ready, or expired), among those of the version this
    process read last: a choice by state, checked again in its own commit."""
    return settle(ctx, lambda r: r.ended(now), probe=False)


def taken_as(ctx: TubeContext, record: Record, result: DataFrame) -> None:
    """Write down ``result`` (its public columns) as what the take that made ``record``
    returned: the ack's result is those rows as acked (:func:`as_acked`)."""
    ctx.memory.note_result(record.token, result)


def as_acked(ctx: TubeContext, record: Record) -> DataFrame:
    """A recorded batch's tasks as its ack returns them (``done``): its take's result
    with that status, where this process's take made the record, so that the
    ack does not plan the record's tasks again (most of a big batch's ack time
    in the driver; the ack itself reads no data); else the record expanded."""
    taken = ctx.memory.pop_result(record.token)  # acked: the record is gone
    if taken is None or taken.sparkSession is not ctx.spark:
        taken = expand(ctx, ctx.spark, record).select(*st.PUBLIC_COLUMNS)
    return taken.withColumn("status", F.lit("done"))
