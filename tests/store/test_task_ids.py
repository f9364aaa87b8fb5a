"""Task ids: the count of rows put before a task, read from the inbox's Delta log.

Ids are unique forever and increase in put order, across files, puts,
ingests, purges and restarts, whichever way the next id is found (the newest
ingest's tag, or the newest cursor marker once the log no longer shows one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

import sparkqueue
from sparkqueue import FakeClock, Queue, QueueError, store
from sparkqueue.engine.ingest import ingest, pending_rows
from sparkqueue.sweep import purge

from ..conftest import ids


def payloads(spark: SparkSession, lo: int, hi: int, files: int = 1) -> DataFrame:
    return spark.range(lo, hi).toDF("n").repartition(files, "n").sortWithinPartitions("n")


def test_ids_count_rows_put_in_file_and_commit_order(sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("ids", "fifo")
    first = t.put(payloads(spark, 0, 30, files=3))
    by_id = {r["task_id"]: r["data"]["n"] for r in first.collect()}
    assert sorted(by_id) == list(range(30)), "one id per row, none skipped"
    placed = (spark.read.format("delta").load(t.context.layout.inbox("ids"))
              .select("data.n", "_metadata.file_name", "_metadata.row_index").collect())
    assert len({r["file_name"] for r in placed}) == 3, "the put wrote three files"
    # within a put, ids follow the files' part numbers, then the rows' places in them
    in_place = sorted(placed, key=lambda r: (r["file_name"], r["row_index"]))
    assert [by_id[i] for i in range(30)] == [r["n"] for r in in_place]
    assert t.put({"n": 100}).task_id == 30, "the next put counts on"
    assert ids(t.take(31)) == list(range(31)), "ingest gives every task the id its put returned"


def test_ids_count_on_through_purges_and_restarts(sq: Queue, spark: SparkSession, root: str,
                                                  clock: FakeClock,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    t = sq.create_tube("ids", "fifo")
    t.put(payloads(spark, 0, 5))
    t.ack(t.take(5))
    assert purge(t) == 5, "the 5 ingested inbox rows (their file removed whole)"
    inbox = t.context.layout.inbox("ids")
    tags = [h["tag"]["sq"] for h in t.context.layout.history(inbox, -1)]
    assert tags[-1] == "purge", "the purge's commit is tagged as sparkqueue's"
    assert ids(t.put(payloads(spark, 5, 8))) == [5, 6, 7]

    # another connection, with no cached state (as a new process starts): the next id
    # from the newest ingest's tag
    other = sparkqueue.connect(spark, root, owner="consumer-b", clock=clock).tube("ids")
    assert ids(other.put(payloads(spark, 8, 9))) == [8]
    assert ids(other.take(10)) == [5, 6, 7, 8]
    # a connection that finds no ingest in the log it reads: from the newest marker
    monkeypatch.setattr(store.schema, "CURSOR_LOOKBACK", 0)
    third = sparkqueue.connect(spark, root, owner="consumer-c", clock=clock).tube("ids")
    assert t.context.layout.cursor("ids") == third.context.layout.cursor("ids")
    assert third.put({"n": 9}).task_id == 9


def test_ids_without_file_statistics(sq: Queue, spark: SparkSession) -> None:
    """Delta keeps each file's row count in its statistics; with them turned off the
    counts come from the files (one Spark job), and ids are the same."""
    t = sq.create_tube("ids", "fifo")
    t.put(payloads(spark, 0, 4))
    spark.conf.set("spark.databricks.delta.stats.collect", "false")
    try:
        assert ids(t.put(payloads(spark, 4, 10, files=2))) == list(range(4, 10))
    finally:
        spark.conf.unset("spark.databricks.delta.stats.collect")
    log = Path(t.context.layout.inbox("ids").removeprefix("file:"), "_delta_log")
    assert "numRecords" not in max(log.glob("*.json")).read_text(), "that put kept no counts"
    assert t.put({"n": 10}).task_id == 10
    assert ids(t.take(11)) == list(range(11))


def test_an_inbox_rewritten_outside_sparkqueue_is_refused(sq: Queue, spark: SparkSession) -> None:
    """Compacting the inbox would move rows not yet ingested, and so their ids: the
    next ingest names the commit that did it instead of losing or renumbering tasks."""
    t = sq.create_tube("ids", "fifo")
    t.put({"n": 0})
    t.put({"n": 1})
    inbox = t.context.layout.inbox("ids")
    spark.sql(f"OPTIMIZE delta.`{inbox}`")
    log = Path(inbox.removeprefix("file:"), "_delta_log")
    newest = max(log.glob("*.json"))
    assert '"remove"' in newest.read_text(), "OPTIMIZE rewrote the two files into one"
    with pytest.raises(QueueError, match="OPTIMIZE.*rewrote inbox files") as err:
        t.take(2)
    assert "must not be compacted" in str(err.value)
    assert json.loads(newest.read_text().splitlines()[0])["commitInfo"]["operation"] == "OPTIMIZE"


def test_a_puts_tag_values_reach_its_tasks_exactly(sq: Queue, clock: FakeClock) -> None:
    """A put's one-value options travel in its commit tag and reach the task through
    SQL text: quotes and backslashes in a sub-queue name, and fractions, survive."""
    clock.advance(0.123456)
    t = sq.create_tube("tags", "utubettl")
    name = "it's a \\ back'slash\\'"
    t.put({"n": 1}, utube=name, ttl=1.5, ttr=0.25, pri=3)
    row = t.take(1).collect()[0]
    assert (row["utube"], row["ttl"], row["ttr"], row["pri"]) == (name, 1.5, 0.25, 3)
    assert row["created"] == 1_700_000_000.123456


def test_an_ingest_from_a_cursor_already_ingested_from_is_skipped(sq: Queue,
                                                                   spark: SparkSession) -> None:
    """A consumer that read the cursor before another ingested from it appends
    nothing (Delta's transaction id: one per tube, versioned by the cursor)."""
    t = sq.create_tube("once", "fifo")
    t.put(payloads(spark, 0, 2))
    layout = t.context.layout
    start, upto = layout.cursor("once"), layout.latest_version(layout.inbox("once"))
    late = pending_rows(t.context, spark, start, upto)  # what a late consumer would ingest
    assert late is not None
    assert ids(t.take(1)) == [0], "the first consumer ingested"
    tasks = layout.tasks("once")
    before = layout.latest_version(tasks)
    layout.write_marker("once", start, store.Cursor(upto, 2), [late])
    assert layout.latest_version(tasks) == before, "the late ingest was skipped"
    t.put({"n": 2})
    assert ids(t.take(3)) == [1, 2], "each task once; the next ingest goes on"


def test_the_portable_purge_removes_whole_files_of_ingested_puts_only(
        spark: SparkSession, root: str, clock: FakeClock) -> None:
    """Without the accelerator the purge is a DELETE by put token: it removes the
    files of ingested puts whole and leaves the rows not yet ingested in their
    places, so their ids stay what their put returned."""
    sq = sparkqueue.connect(spark, root, owner="a", clock=clock, engine="portable")
    t = sq.create_tube("p", "fifo")
    t.put(payloads(spark, 0, 6, files=2))
    ingest(t.context)  # all of it (a take of new puts would ingest the rows it leases)
    assert ids(t.take(2)) == [0, 1], "the first put is ingested"
    assert ids(t.put(payloads(spark, 6, 9, files=2))) == [6, 7, 8]
    inbox = t.context.layout.inbox("p")

    def places() -> list[tuple[int, str, int]]:
        return sorted((r["n"], r["file_name"], r["row_index"]) for r in spark.read.format("delta")
                      .load(inbox).select("data.n", "_metadata.file_name", "_metadata.row_index")
                      .collect())

    waiting = [p for p in places() if p[0] >= 6]
    assert purge(t) == 6, "the first put's rows"
    log = Path(inbox.removeprefix("file:"), "_delta_log")
    actions = [next(iter(json.loads(line))) for line in max(log.glob("*.json")).read_text()
               .splitlines()]
    assert "remove" in actions and "add" not in actions, "files removed whole, none rewritten"
    assert places() == waiting, "the second put's rows kept their files and places"
    assert purge(t) == 0, "nothing ingested is left"
    assert ids(t.take(10)) == list(range(2, 9))
    assert purge(t) == 4, "the second put's 3 rows and the cursor marker it superseded"
    assert places() == []
