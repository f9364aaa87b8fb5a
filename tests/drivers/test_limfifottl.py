"""limfifottl: a capacity that counts every live task."""

from __future__ import annotations

import time

import pytest

from sparkqueue import CapacityExceeded, FakeClock, InvalidOption, Queue
from tests.conftest import first_row, versions


def test_capacity_counts_every_live_state_and_frees_on_delete(sq: Queue) -> None:
    t = sq.create_tube("lim", "limfifottl", capacity=3)
    ready = t.put({"n": 1}).task_id
    t.put({"n": 2}, delay=100)
    buried = t.put({"n": 3}).task_id
    t.bury(buried)
    before = versions(t)
    with pytest.raises(CapacityExceeded) as err:
        t.put({"n": 4})
    assert (err.value.capacity, err.value.live) == (3, 3)
    assert versions(t) == before
    t.delete(ready)
    assert t.put({"n": 4}).status == "ready"


def test_a_batch_that_does_not_fit_writes_nothing(sq: Queue) -> None:
    t = sq.create_tube("lim", "limfifottl", capacity=2)
    t.put({"n": 0})
    with pytest.raises(CapacityExceeded):
        t.put([{"n": 1}, {"n": 2}])
    assert t.statistics()["tasks"]["total"] == 1


def test_put_timeout_waits_then_gives_up(sq: Queue) -> None:
    t = sq.create_tube("lim", "limfifottl", capacity=1)
    t.put({"n": 0})
    started = time.monotonic()
    with pytest.raises(CapacityExceeded):
        t.put({"n": 1}, timeout=0.5)
    assert time.monotonic() - started >= 0.5


def test_unlimited_without_capacity(sq: Queue) -> None:
    t = sq.create_tube("lim", "limfifottl")
    t.put([{"n": i} for i in range(5)])
    assert t.statistics()["tasks"]["ready"] == 5


def test_capacity_is_only_for_limfifottl(sq: Queue) -> None:
    with pytest.raises(InvalidOption, match="capacity"):
        sq.create_tube("nolim", "fifottl", capacity=3)
    with pytest.raises(InvalidOption, match="capacity"):
        sq.create_tube("neg", "limfifottl", capacity=-1)


def test_time_rules_are_fifottl_s(sq: Queue, clock: FakeClock) -> None:
    t = sq.create_tube("lim", "limfifottl", capacity=2, ttr=10)
    task = t.put({"n": 1}, ttl=100, delay=5)
    assert task.status == "delayed"
    clock.advance(5)
    t.take()
    clock.advance(10)  # ttr ended: ready again, and it still counts against capacity
    assert first_row(t.peek(task.task_id))["status"] == "ready"
    clock.advance(100)  # ttl ended: gone, room again
    assert t.statistics()["tasks"]["total"] == 0
