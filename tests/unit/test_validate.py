"""Option validation and tag sanitizing: pure logic, no JVM (``make test-fast``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sparkqueue import InvalidOption, Tube, validate
from sparkqueue.engine.ingest import tag_values
from sparkqueue.validate import MAX_BATCH, PRI_RANGE, URGENT_PRI


@pytest.mark.parametrize("value", [0, -5, PRI_RANGE[0], PRI_RANGE[1], np.int64(7), np.int8(-1)])
def test_priorities_in_range(value: object) -> None:
    assert validate.pri(value) == int(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**62, -(2**62), 1.5, "1", True, None])
def test_priorities_out_of_range_or_not_integers(value: object) -> None:
    with pytest.raises(InvalidOption, match="pri"):
        validate.pri(value)


@pytest.mark.parametrize("what", ["ttl", "ttr", "timeout"])
def test_infinity_means_never_where_never_makes_sense(what: str) -> None:
    assert validate.seconds(what, math.inf) == math.inf


@pytest.mark.parametrize("what", ["delay", "increment", "retry_delay"])
def test_infinity_is_refused_where_it_would_never_end(what: str) -> None:
    with pytest.raises(InvalidOption, match=f"{what} must be a finite"):
        validate.seconds(what, math.inf)


@pytest.mark.parametrize("value", [-1, math.nan, "10", True, None, -math.inf])
def test_bad_times(value: object) -> None:
    with pytest.raises(InvalidOption, match="ttl"):
        validate.seconds("ttl", value)


def test_numpy_times_and_counts() -> None:
    assert validate.seconds("ttl", np.float32(1.5)) == 1.5
    assert validate.count("capacity", np.int64(3)) == 3


def test_a_batch_past_what_spark_can_limit_is_all() -> None:
    assert validate.batch("n", 2**40) == MAX_BATCH
    assert validate.batch("count", 0, minimum=0) == 0
    with pytest.raises(InvalidOption, match="at least 1"):
        validate.batch("n", 0)


def test_task_ids_are_any_integral_sorted_and_distinct() -> None:
    assert validate.task_ids([np.int64(3), 1, 3]) == [1, 3]
    assert validate.task_ids(np.uint16(4)) == [4]
    for bad in (-1, True, 1.0, "1", None, 2**63, [1, None]):
        with pytest.raises(InvalidOption, match="task ids"):
            validate.task_ids(bad)


def test_a_tag_no_put_may_write_any_more_still_gives_storable_values() -> None:
    now, pri, utube, ttl, ttr, delay = tag_values(
        {"now": 5.0, "pri": 2**70, "utube": 3, "ttl": math.nan, "ttr": -1, "delay": "x"})
    assert (now, pri, utube, ttl, ttr, delay) == (5.0, PRI_RANGE[1], None, None, None, None)
    assert tag_values({"now": 1.0, "pri": URGENT_PRI})[1] == URGENT_PRI
    assert tag_values({"now": 1.0, "pri": -(2**80)})[1] == URGENT_PRI
    assert tag_values({"now": 1.0, "pri": 3, "ttl": math.inf})[1:4] == (3, None, math.inf)


def test_unbury_is_dig() -> None:
    assert Tube.unbury is Tube.dig


def test_a_new_tube_may_not_take_a_shard_s_table_names() -> None:
    assert validate.new_tube_name("jobs__shardless") == "jobs__shardless"
    assert validate.new_tube_name("shard1") == "shard1"
    with pytest.raises(InvalidOption, match="shard"):
        validate.new_tube_name("jobs__shard1")
