"""Truncate on the accelerated engine: one commit that has read the whole tasks table,
no Spark job. With puts waiting in the inbox it moves the cursor past them (an
ingest of no rows); without, it removes every file but the cursor's markers."""

from __future__ import annotations

from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import Queue, Tube

from ..conftest import ids, operations, spark_jobs
from .test_partial_ingest import stored_ids


def with_a_waiting_put(sq: Queue) -> tuple[Tube, list[int]]:
    """A fifottl tube of four tasks put, two of them taken, and one more put waiting
    in the inbox (the truncate moves the cursor past it); the first four ids."""
    t = sq.create_tube("t", "fifottl")
    first = ids(t.put([{"n": i} for i in range(4)]))
    t.take(2)
    t.put([{"n": 9}])
    return t, first


def test_a_truncate_is_one_commit_and_no_spark_job_and_ids_go_on(
        sq: Queue, spark: SparkSession) -> None:
    t, first = with_a_waiting_put(sq)
    before = t.context.layout.latest_version(t.context.layout.tasks("t"))
    jobs = spark_jobs(spark)
    t.truncate()
    assert spark_jobs(spark) == jobs
    assert operations(t, before) == [("WRITE", "truncate")]
    assert stored_ids(t) == []
    assert t.statistics()["tasks"]["total"] == 0
    assert t.statistics()["calls"]["put"] == 5, "the counters stay"
    later = ids(t.put([{"n": 10}]))
    assert later[0] > max(first) + 1, "no id given again"
    assert ids(t.take(5)) == later


def test_a_truncate_with_no_puts_waiting_keeps_the_cursor_for_either_engine(
        sq: Queue, spark: SparkSession) -> None:
    """Every put ingested: the truncate removes the tasks' files alone. The cursor
    stays, so the portable engine's next ingest from it (an idempotent append
    that records its transaction version) is not skipped."""
    t = sq.create_tube("t", "fifottl")
    t.put([{"n": i} for i in range(3)])
    t.release(t.take(3))  # ingested, ready
    before = t.context.layout.latest_version(t.context.layout.tasks("t"))
    jobs = spark_jobs(spark)
    t.truncate()
    assert spark_jobs(spark) == jobs
    assert operations(t, before) == [("DELETE", "truncate")]
    assert t.peek([0, 1, 2]).count() == 0
    portable = sparkqueue.connect(spark, sq.root, owner="b", clock=sq.clock,
                                  engine="portable").tube("t")
    put = ids(portable.put([{"n": 3}, {"n": 4}]))
    assert ids(portable.take(5)) == put  # an ingest from the cursor, by an append
    assert t.statistics()["tasks"]["taken"] == 2


def test_a_truncate_whose_marker_the_driver_cannot_write_has_spark_write_it(
        sq: Queue, spark: SparkSession) -> None:
    """A tasks table whose files keep statistics of every column (its
    ``delta.dataSkippingStatsColumns`` unset) gets no file written from the
    driver: the truncate's marker, its only row, is Spark's write, in the same
    one commit, and the cursor moves past the puts all the same."""
    t, first = with_a_waiting_put(sq)
    layout = t.context.layout
    tasks = layout.tasks("t")
    spark.sql(f"ALTER TABLE delta.`{tasks}` UNSET TBLPROPERTIES "
              "('delta.dataSkippingStatsColumns')")
    before = layout.latest_version(tasks)
    jobs = spark_jobs(spark)
    t.truncate()
    assert spark_jobs(spark) > jobs, "Spark wrote the marker"
    assert operations(t, before) == [("WRITE", "truncate")]
    assert stored_ids(t) == []
    files = layout.commit_files(tasks, layout.latest_version(tasks))
    assert files is not None and len(files[0]) == 1, "the commit adds the marker alone"
    marker = layout.read(tasks).where(f"_metadata.file_name = '{files[0][0]}'").collect()
    assert [(r["task_id"] < 0, r["inbox_version"]) for r in marker] == [
        (True, layout.latest_version(layout.inbox("t")))], "past the waiting put"
    later = ids(t.put([{"n": 10}]))
    assert later[0] > max(first) + 1, "no id given again"
    assert ids(t.take(5)) == later
