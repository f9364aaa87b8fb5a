"""Takes whose chosen tasks are consecutive ids run as one UPDATE of that id range
(no MERGE join), with the same result as the MERGE: the tasks leased to the
taker, counted as takes, never leased twice when a concurrent take got there first.

The accelerator's take of whole head files (``take.take_files``, its own tests
in test_take_files.py) would go first; these tests turn it off.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkqueue import Queue, QueueError, Tube, store
from sparkqueue.engine import ops
from sparkqueue.engine import take as taking
from sparkqueue.engine.ingest import ingest

from ..conftest import ids, known_ids, operations, spark_jobs


@pytest.fixture(autouse=True)
def by_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """Takes go the UPDATE or MERGE way, not the accelerator's file rewrite nor
    its ingest+take (a new tube's first take), and acks riding along go in the
    MERGE, not apart."""
    monkeypatch.setattr(taking, "take_files", lambda *args, **kwargs: None)
    monkeypatch.setattr(taking, "take_fresh", lambda *args, **kwargs: None)
    monkeypatch.setattr(taking, "acks_apart", lambda *args, **kwargs: None)


def test_a_take_of_consecutive_ids_is_an_update_and_a_gap_a_merge(sq: Queue,
                                                                  spark: SparkSession) -> None:
    t = sq.create_tube("range", "fifottl", ttr=30, change_feed=True)
    t.put([{"n": i} for i in range(6)])
    t.take(1)  # ingests the puts; its one task is a range of one id
    t.release(0)
    before = t.context.layout.latest_version(t.context.layout.tasks("range"))

    batch = t.take(3)
    assert operations(t, before) == [("UPDATE", "take")]
    assert known_ids(t, batch) == [0, 1, 2], "every id of the range leased: known, not read"
    rows = sorted((r["task_id"], r["status"], r["data"]["n"]) for r in batch.collect())
    assert rows == [(0, "taken", 0), (1, "taken", 1), (2, "taken", 2)]
    assert t.meta(1)["owner"] == "consumer-a" and t.meta(1)["ttr"] == 30
    feed = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", before + 1).load(t.context.layout.tasks("range"))
            .where("_change_type = 'update_postimage'"))
    assert sorted((r["task_id"], r["status"]) for r in feed.collect()) == [
        (0, "taken"), (1, "taken"), (2, "taken")]

    # ready are 1, 3, 4, 5: the two lowest are not consecutive, so a MERGE takes them
    t.release(1)
    before = t.context.layout.latest_version(t.context.layout.tasks("range"))
    assert ids(t.take(2)) == [1, 3]
    assert operations(t, before) == [("MERGE", "take")]
    assert t.statistics()["calls"]["take"] == 1 + 3 + 2


def racing(t: Tube, steal: int, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Make ``t``'s next range UPDATE find that another consumer took the ``steal``
    lowest ready tasks after the choice and before its commit; what the other got."""
    original = ops.update_range
    stolen: list[list[int]] = []

    def update_range(*args: Any, **kwargs: Any) -> tuple[int, int]:
        if not stolen:  # the other consumer's own take goes straight through
            stolen.append([])
            stolen[0] = ids(t.take(steal, owner="consumer-b"))
        return original(*args, **kwargs)

    monkeypatch.setattr(ops, "update_range", update_range)
    return stolen


def test_a_take_whose_choice_a_concurrent_take_got_first_never_leases_twice(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    t = sq.create_tube("race", "fifo")
    t.put(list(range(5)))
    stolen = racing(t, 1, monkeypatch)
    batch = t.take(3)
    assert stolen == [[0]]
    assert ids(batch) == [1, 2], "the rows still ready in the chosen range, none twice"
    assert t.meta(0)["owner"] == "consumer-b" and t.meta(1)["owner"] == "consumer-a"
    assert known_ids(t, batch) is None, "not the whole range: its ids are read, not assumed"
    assert ids(t.ack(batch)) == [1, 2] and t.meta(0)["status"] == "taken"

    # all of the chosen range gone: Delta commits nothing and the take chooses again
    stolen = racing(t, 2, monkeypatch)
    got = ids(t.take(2))
    assert stolen == [[3, 4]]
    assert got == [], "nothing else is ready"
    assert {t.meta(i)["owner"] for i in (3, 4)} == {"consumer-b"}


def jobs_when_called(spark: SparkSession, monkeypatch: pytest.MonkeyPatch,
                     name: str, module: Any = ops) -> tuple[list[int], int]:
    """Spark jobs run so far each time ``<module>.<name>`` (default ``ops``) is called
    from now on, and now."""
    jobs: list[int] = []
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        jobs.append(spark_jobs(spark))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return jobs, spark_jobs(spark)


def test_a_take_of_whole_files_of_ready_tasks_chooses_without_a_spark_job(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """When file statistics show the lowest ready tasks fill whole files, the
    take's choice is their id range, read from the statistics alone."""
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)  # statistics even for a few files
    t = sq.create_tube("whole", "fifottl")
    t.put([{"n": i} for i in range(6)])
    ingest(t.context)
    layout = t.context.layout
    layout.file_stats(layout.tasks("whole"))  # read once per process, then replayed
    jobs, before = jobs_when_called(spark, monkeypatch, "update_range")
    batch = t.take(10)
    assert jobs == [before], "chosen from file statistics"
    assert sorted((r["task_id"], r["status"]) for r in batch.collect()) == [
        (i, "taken") for i in range(6)]
    assert t.take(1).count() == 0


def test_a_take_that_acks_in_its_commit_chooses_whole_files_from_statistics(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer's take that carries the previous batch's acks chooses its range
    from file statistics too (no Spark job before its MERGE); an ack of a task
    in that range, which the acker does not hold, is refused with a typed error."""
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)  # statistics even for a few files
    t = sq.create_tube("riding", "fifottl")
    t.put([{"n": i} for i in range(3)])
    who = t.context.who(None)
    assert ids(t.take(3)) == [0, 1, 2]  # a file of their own, all taken
    t.put([{"n": i} for i in range(3, 6)])
    ingest(t.context)
    layout = t.context.layout
    layout.file_stats(layout.tasks("riding"))  # read once per process, then replayed
    jobs, before = jobs_when_called(spark, monkeypatch, "merge_source")
    batch = taking.take(t.context, 3, 0.0, who, 1, acking=[0, 1, 2])
    assert jobs == [before], "chosen from file statistics"
    assert sorted((r["task_id"], r["status"]) for r in batch.collect()) == [
        (3, "taken"), (4, "taken"), (5, "taken")]
    assert t.peek([0, 1, 2]).count() == 0, "acked in the same commit"

    t.put([{"n": 6}, {"n": 7}])
    ingest(t.context)
    with pytest.raises(QueueError, match="6"):
        taking.take(t.context, 2, 0.0, who, 1, acking=[6])
    assert t.meta(6)["status"] == "ready" and t.meta(7)["status"] == "ready"
