"""Hostile input: every bad value is a typed error that writes nothing, and leaves
the tube fully usable; values a put could once write do not break ingest."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkqueue import FakeClock, InvalidOption, Queue, TaskNotFound, Tube, store
from sparkqueue.tube import URGENT_PRI
from sparkqueue.validate import MAX_BATCH, PRI_RANGE
from tests.conftest import ids, versions


def still_usable(t: Tube) -> None:
    """The tube takes a put and gives it back: the bad call broke nothing."""
    before = t.statistics()["tasks"]["ready"]
    task = t.put({"n": 99})
    assert t.statistics()["tasks"]["ready"] == before + 1
    t.delete(task.task_id)


@pytest.fixture
def t(sq: Queue) -> Tube:
    tube = sq.create_tube("t", "fifottl")
    tube.put({"n": 0})
    return tube


def test_a_priority_out_of_range_is_refused_before_anything_is_written(
        sq: Queue, t: Tube) -> None:
    before = versions(t)
    for pri in (2**63, -(2**63) - 1, 2**62, -(2**62), 10**30):
        with pytest.raises(InvalidOption, match="pri must be"):
            t.put({"n": 1}, pri=pri)
        with pytest.raises(InvalidOption, match="pri must be"):
            sq.create_tube("d", "fifottl", pri=pri)
    assert versions(t) == before
    assert sq.tubes() == ["t"]
    still_usable(t)


def test_the_priority_range_ends_are_fine_and_urgent_is_ahead_of_them(t: Tube) -> None:
    low = t.put({"n": 1}, pri=PRI_RANGE[0]).task_id
    t.put({"n": 2}, pri=PRI_RANGE[1])
    urgent = t.urgent({"n": 3}).task_id
    assert ids(t.take(2)) == sorted([urgent, low])


def test_ingest_survives_a_put_tag_no_put_may_write_any_more(t: Tube, spark: SparkSession,
                                                             clock: FakeClock) -> None:
    """An inbox commit whose tag holds a priority past BIGINT and a NaN ttl (as an
    earlier release let through): the tube still takes, counts and peeks."""
    tag = store.CommitTag.new("put", put={"now": clock(), "pri": 2**63, "ttl": float("nan")})
    (spark.createDataFrame([({"n": 7},)], "data struct<n: bigint>").write.format("delta")
     .mode("append").option("userMetadata", tag.json()).save(t.context.layout.inbox(t.name)))
    assert t.statistics()["tasks"]["ready"] == 2
    taken = t.take(5).collect()
    assert [(r["data"]["n"], r["pri"], r["ttl"]) for r in taken] == [
        (0, 0, float("inf")), (7, PRI_RANGE[1], float("inf"))]
    still_usable(t)


def test_take_and_kick_of_more_than_spark_can_limit_mean_all(t: Tube) -> None:
    t.put([{"n": 1}, {"n": 2}])
    assert len(ids(t.take(2**31))) == 3
    t.bury(ids(t.tasks_by_state("taken")))
    assert t.kick(2**40) == 3
    assert MAX_BATCH == 2**31 - 1


def test_an_empty_dataframe_put_is_a_no_op_with_an_empty_result(
        sq: Queue, t: Tube, spark: SparkSession) -> None:
    empty = spark.createDataFrame([], "n long")
    before = versions(t)
    out = t.put(empty)
    assert_df_equality(out, t.peek([]))
    assert versions(t) == before
    assert t.statistics()["calls"]["put"] == 1
    limited = sq.create_tube("lim", "limfifottl", capacity=1)
    assert limited.put(empty).count() == 0
    assert limited.statistics()["calls"]["put"] == 0
    still_usable(t)


BAD_ROWS = [
    ("pri", "'x'", "x"),
    ("pri", "CAST('100000000000000000000000000' AS DECIMAL(38,0))",
     "100000000000000000000000000"),
    ("pri", "CAST(9223372036854775807 AS BIGINT)", "9223372036854775807"),
    ("ttl", "'x'", "x"),
    ("ttr", "-1.0D", "-1.0"),
    ("delay", "CAST('Infinity' AS DOUBLE)", "Infinity"),
    ("delay", "NULL", "NULL"),
]


def test_a_bad_per_row_option_names_the_option_and_the_value(
        sq: Queue, spark: SparkSession) -> None:
    """Each bad value in one row of three fails the whole put, naming the option
    and the value; the same Column of good values puts."""
    t = sq.create_tube("o", "fifottl")
    before = versions(t)
    for option, value, shown in BAD_ROWS:
        rows = spark.range(3).selectExpr(
            "id AS n", f"CASE WHEN id = 1 THEN CAST({value} AS STRING) ELSE '1' END AS v")
        per_row: dict[str, Any] = {option: F.col("v")}
        with pytest.raises(InvalidOption, match=f"a row's {option} must be .*got {shown}"):
            t.put(rows, **per_row)
    assert versions(t) == before
    good = spark.range(1).selectExpr("id AS n", "'1' AS v")
    for option in ("pri", "ttl", "ttr", "delay"):
        good_opts: dict[str, Any] = {option: F.col("v")}
        assert t.put(good, **good_opts).count() == 1


def test_infinity_means_never_and_only_a_ttl_ttr_or_timeout_may_be_it(sq: Queue,
                                                                      t: Tube) -> None:
    inf = float("inf")
    before = versions(t)
    for call in (lambda: t.put({"n": 1}, delay=inf), lambda: sq.create_tube("d", "fifottl",
                                                                            delay=inf)):
        with pytest.raises(InvalidOption, match="delay must be a finite number"):
            call()
    taken = t.take(1)
    with pytest.raises(InvalidOption, match="increment must be a finite number"):
        t.touch(taken, inf)
    with pytest.raises(InvalidOption, match="delay must be a finite number"):
        t.release(taken, delay=inf)
    assert versions(t)[0] == before[0]
    assert t.put({"n": 2}, ttl=inf, ttr=inf).status == "ready"
    assert t.take(1, timeout=inf).count() == 1


def test_ids_are_any_integral_but_never_null(t: Tube, spark: SparkSession) -> None:
    task = t.take(1).first()
    assert task is not None
    ident = np.int64(task["task_id"])
    assert ids(t.peek(ident)) == [int(ident)]
    assert ids(t.peek([np.int32(ident)])) == [int(ident)]
    assert t.meta(ident)["status"] == "taken"
    before = versions(t)
    for bad in ([(None,)], [("x",)]):
        frame = spark.createDataFrame(bad, "task_id string")
        with pytest.raises(InvalidOption, match="task_id column holds"):
            t.ack(frame)
        with pytest.raises(InvalidOption, match="task_id column holds"):
            t.release(frame)
    assert versions(t) == before
    assert ids(t.ack(ident)) == [int(ident)]


@pytest.mark.parametrize("kind", ["fifottl", "utubettl"])
def test_every_verb_on_a_tube_that_never_had_a_put(sq: Queue, kind: str) -> None:
    t = sq.create_tube("new", kind)
    before = versions(t)
    assert t.take(1).count() == 0
    assert t.peek([1]).count() == 0
    assert t.tasks_by_state("ready").count() == 0
    assert t.kick(5) == 0
    assert t.release_all() == 0
    assert t.statistics()["tasks"]["total"] == 0
    for verb in (t.peek, t.meta, t.ack, t.release, t.bury, t.delete, t.dig,
                 lambda i: t.touch(i, 1), lambda i: t.done(i, {"n": 1})):
        with pytest.raises(TaskNotFound):
            verb(1)
    assert versions(t) == before
    t.truncate()
    assert sq.sweep(t.name)["ttl"] == 0
    still_usable(t)


def test_urgent_is_the_most_urgent_priority_there_is() -> None:
    assert URGENT_PRI < PRI_RANGE[0] and URGENT_PRI >= -(2**63)
