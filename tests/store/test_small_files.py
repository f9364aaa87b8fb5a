"""A take that commits only a lease record and the cursor's marker writes those
one-row files from the driver (``store.smallfiles``): no Spark job, and the very
statistics a Spark write of the same rows gives them, on which file skipping and
the verbs' file statistics rest. What it cannot write so, Spark writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from sparkqueue import Queue
from sparkqueue import store as st

from ..conftest import ids, operations, spark_jobs


def last_adds(table: str) -> dict[str, dict[str, Any]]:
    """The statistics of the files the newest commit of the local Delta table at
    ``table`` added, by the status of their row."""
    log = Path(table.removeprefix("file:")) / "_delta_log"
    newest = max(log.glob("*.json"))
    adds = [json.loads(line)["add"] for line in newest.read_text().splitlines()
            if line.startswith('{"add"')]
    stats = [json.loads(a["stats"]) for a in adds]
    return {s["minValues"]["status"]: s for s in stats}


@pytest.mark.parametrize("owner", ["consumer-a", "a-consumer-whose-name-is-long-indeed"])
def test_a_recorded_take_writes_record_and_marker_with_the_statistics_of_a_spark_write(
        sq: Queue, spark: SparkSession, tmp_path: Path, owner: str) -> None:
    t = sq.create_tube("small", "fifottl")
    t.put([{"n": i} for i in range(5)])
    tasks = t.context.layout.tasks("small")
    jobs = spark_jobs(spark)
    batch = t.take(5, owner=owner)
    if len(owner) <= 32:
        assert spark_jobs(spark) == jobs, "written from the driver"
    ours = last_adds(tasks)
    assert set(ours) == {st.LEASE, st.MARKER}
    rows = spark.read.format("delta").load(tasks)
    spark.sql(f"CREATE TABLE delta.`{tmp_path}/spark` USING delta TBLPROPERTIES "
              f"('delta.dataSkippingStatsColumns' = '{','.join(st.STATS_COLUMNS)}', "
              "'delta.dataSkippingNumIndexedCols' = '0') "
              f"AS SELECT * FROM delta.`{tasks}` WHERE false")
    for status in (st.LEASE, st.MARKER):
        rows.where(f"status = '{status}'").write.format("delta").mode("append").save(
            f"{tmp_path}/spark")
        assert ours[status] == last_adds(f"{tmp_path}/spark")[status]
    assert ids(batch) == [0, 1, 2, 3, 4]
    assert ids(t.ack(batch, owner=owner)) == [0, 1, 2, 3, 4]
    assert t.statistics()["tasks"]["total"] == 0


def test_a_new_tubes_first_put_gives_its_inbox_the_payload_column_alone(
        sq: Queue, spark: SparkSession) -> None:
    """An append that adds the payload column leaves the list of files out of its
    checksum, and the next put would rebuild the inbox's state in Spark jobs; the
    first put's commit of the column alone keeps it: the second put costs as many
    Spark jobs as the third."""
    t = sq.create_tube("first", "fifottl")
    t.put([{"n": 1}])
    inbox = t.context.layout.inbox(t.context.key)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{inbox}`").orderBy("version")
    assert [r[0] for r in history.select("operation").collect()] == [
        "CREATE TABLE", "ADD COLUMNS", "WRITE"]
    jobs = []
    for n in (2, 3):
        before = spark_jobs(spark)
        t.put([{"n": n}])
        jobs.append(spark_jobs(spark) - before)
    assert jobs[0] == jobs[1], jobs
    assert [r["data"]["n"] for r in t.peek([0, 1, 2]).orderBy("task_id").collect()] == [1, 2, 3]
    assert t.statistics()["calls"]["put"] == 3


def test_a_new_tubes_first_put_gives_its_tasks_table_the_payload_column_alone(
        sq: Queue, spark: SparkSession) -> None:
    """A commit that adds the column and files both leaves the list of files out of
    its checksum, and the next commit rebuilds the table's state in Spark jobs;
    the first put's commit of the column alone keeps it, so the first ack of a
    new tube's first take runs no Spark job, as every later one."""
    t = sq.create_tube("first", "fifottl")
    t.put([{"n": i, "odd`name": [str(i)], "m": {"k": 1.5}} for i in range(4)])
    layout = t.context.layout
    assert operations(t, 0) == [("ADD COLUMNS", "payload")]
    put = spark.read.format("delta").load(layout.inbox("first")).schema["data"].dataType
    assert spark.read.format("delta").load(layout.tasks("first")).schema["data"].dataType == (
        T.StructType.fromJson(st.nullable(put.jsonValue())))
    batch = t.take(4)
    jobs = spark_jobs(spark)
    acked = t.ack(batch)
    assert spark_jobs(spark) == jobs
    assert ids(acked) == [0, 1, 2, 3]
    assert operations(t, 0) == [("ADD COLUMNS", "payload"), ("WRITE", "ingest+take"),
                                ("DELETE", "ack")]
    calls = t.statistics()["calls"]
    assert (calls["put"], calls["take"], calls["ack"]) == (4, 4, 4) and "payload" not in calls
