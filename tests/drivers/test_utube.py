"""Sub-queues (utube, utubettl): the windowed take and what blocks a sub-queue.

Tarantool behaviours 87-97 of ../shared/reference/tarantool_behaviours.md;
time moves by the Queue's injected clock.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sparkqueue import FakeClock, InvalidOption, NotSupported, Queue, Tube, UtubeDriver, store
from sparkqueue.engine.take import take
from tests.conftest import ids


# The sub-queue rules are the same code for both types: each test runs on one
# of them (utubettl where it needs ttl, ttr, delay or pri), and the contract
# suite runs every verb on both.
@pytest.fixture
def ut(sq: Queue) -> Tube:
    return sq.create_tube("u", "utube")


@pytest.fixture
def ttl_ut(sq: Queue) -> Tube:
    return sq.create_tube("u", "utubettl")


def put_in(t: Tube, utube: str | None, count: int = 1, **opts: Any) -> list[int]:
    """Put ``count`` tasks into sub-queue ``utube``; their ids."""
    return ids(t.put([{"q": utube or "-", "i": i} for i in range(count)], utube=utube, **opts))


def test_take_leases_the_heads_of_free_sub_queues(ut: Tube) -> None:
    a1, a2 = put_in(ut, "a", 2)
    b1, = put_in(ut, "b")
    c1, = put_in(ut, "c")
    assert ids(ut.take(10)) == [a1, b1, c1]  # one per sub-queue, lowest id first
    assert ut.take(10, timeout=0).count() == 0  # every sub-queue is busy (behaviour 87)
    ut.ack(a1)
    assert ids(ut.take(10)) == [a2]  # a's next task, now that a is free


def test_n_takes_the_lowest_heads_and_other_sub_queues_stay_takeable(ttl_ut: Tube) -> None:
    a1, = put_in(ttl_ut, "a")
    b1, = put_in(ttl_ut, "b")
    c1, = put_in(ttl_ut, "c")
    assert ids(ttl_ut.take(2)) == [a1, b1]
    assert ids(ttl_ut.take(2)) == [c1]  # behaviour 92: a busy sub-queue does not block others


def test_window_from_the_tube_and_per_take(sq: Queue) -> None:
    t = sq.create_tube("w", "utube", window=2)
    a = put_in(t, "a", 3)
    b = put_in(t, "b", 3)
    assert ids(t.take(10)) == a[:2] + b[:2]  # the tube's window: 2 from each head
    assert t.take(10, window=5, timeout=0).count() == 0  # both sub-queues are busy
    t.ack(a[:2] + b[:2])
    assert ids(t.take(3, window=1)) == [a[2], b[2]]  # a per-take window
    with pytest.raises(InvalidOption, match="window"):
        t.take(1, window=0)
    with pytest.raises(InvalidOption, match="window"):
        sq.create_tube("w2", "utube", window=-1)


def test_release_restores_the_head(ut: Tube) -> None:
    first, second = put_in(ut, "x", 2)
    assert ids(ut.take()) == [first]
    ut.release(first)
    assert ids(ut.take()) == [first]  # behaviour 90: FIFO inside the sub-queue is kept
    ut.ack(first)
    assert ids(ut.take()) == [second]


def test_release_with_delay_frees_the_sub_queue(ttl_ut: Tube, clock: FakeClock) -> None:
    first, second = put_in(ttl_ut, "x", 2)
    ttl_ut.take()
    ttl_ut.release(first, delay=10)
    assert ids(ttl_ut.take()) == [second]  # behaviour 91: a delayed task does not block
    ttl_ut.ack(second)
    assert ttl_ut.take(timeout=0).count() == 0
    clock.advance(10)
    assert ids(ttl_ut.take()) == [first]


def test_a_delayed_head_does_not_block(ttl_ut: Tube, clock: FakeClock) -> None:
    later, = put_in(ttl_ut, "x", delay=5)
    now, = put_in(ttl_ut, "x")
    assert ids(ttl_ut.take()) == [now]
    clock.advance(5)
    assert ttl_ut.take(timeout=0).count() == 0  # x is busy with `now`
    ttl_ut.ack(now)
    assert ids(ttl_ut.take()) == [later]


def test_a_buried_head_does_not_block_and_kicked_tasks_come_back(ttl_ut: Tube) -> None:
    a1, a2 = put_in(ttl_ut, "a", 2)
    b1, = put_in(ttl_ut, "b")
    assert ids(ttl_ut.take(5)) == [a1, b1]
    ttl_ut.bury([a1, b1])  # behaviour 89: burying the taken head frees its sub-queue
    assert ids(ttl_ut.take(5)) == [a2]
    ttl_ut.ack(a2)
    assert ttl_ut.kick(2) == 2
    assert ids(ttl_ut.take(5)) == [a1, b1]  # Tarantool's ready_buffer loses these (97): fixed


def test_ttr_expiry_frees_the_sub_queue(ttl_ut: Tube, clock: FakeClock) -> None:
    first, second = put_in(ttl_ut, "x", 2, ttr=5)
    ttl_ut.take()
    assert ttl_ut.take(timeout=0).count() == 0
    clock.advance(5)  # the lease ends: the task is ready again, still the head
    again = ttl_ut.take()
    assert [(r["task_id"], r["taken_count"]) for r in again.collect()] == [(first, 2)]
    ttl_ut.ack(first)
    assert ids(ttl_ut.take()) == [second]


def test_priority_inside_a_sub_queue(ttl_ut: Tube) -> None:
    low, = put_in(ttl_ut, "dee", pri=1)
    high, = put_in(ttl_ut, "dee", pri=0)
    assert ids(ttl_ut.take()) == [high]  # behaviour 78
    ttl_ut.release(high)
    assert ids(ttl_ut.take()) == [high]
    ttl_ut.ack(high)
    assert ids(ttl_ut.take()) == [low]


def test_tasks_put_without_utube_share_one_sub_queue(ut: Tube) -> None:
    first, second = put_in(ut, None, 2)
    named, = put_in(ut, "nil")
    assert ids(ut.take(5)) == [first, named]  # behaviour 93, without the "nil" name clash
    ut.ack(first)
    assert ids(ut.take(5)) == [second]


def test_utube_per_row_from_a_column(ut: Tube, spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [("a.com", "/1"), ("a.com", "/2"), ("b.org", "/1"), ("c.net", "/1")],
        "domain string, path string")
    created = ut.put(df, utube=F.col("domain"))
    assert sorted(r["utube"] for r in created.collect()) == ["a.com", "a.com", "b.org", "c.net"]
    got = ut.take(10)
    assert sorted((r["utube"], r["data"]["path"]) for r in got.collect()) == [
        ("a.com", "/1"), ("b.org", "/1"), ("c.net", "/1")]


def test_fifo_only_options_are_refused_on_utube(sq: Queue) -> None:
    options: list[dict[str, Any]] = [{"ttl": 5}, {"ttr": 5}, {"delay": 5}, {"pri": 1},
                                      {"capacity": 2}]
    for opt in options:
        with pytest.raises(InvalidOption):
            sq.create_tube("bad", "utube", **opt)
    t = sq.create_tube("u", "utube")
    for opt in options[:4]:
        with pytest.raises(InvalidOption, match=next(iter(opt))):
            t.put({"n": 1}, utube="a", **opt)
    with pytest.raises(InvalidOption, match="utube"):
        t.put({"n": 1}, utube=3)  # type: ignore[call-overload]
    task = t.put({"n": 1}, utube="a").task_id
    t.take()
    with pytest.raises(NotSupported):
        t.touch(task, 5)
    with pytest.raises(NotSupported):
        t.release(task, delay=5)
    fifo = sq.create_tube("f", "fifo")
    with pytest.raises(InvalidOption, match="utube"):
        fifo.put({"n": 1}, utube="a")
    with pytest.raises(InvalidOption, match="window"):
        fifo.take(1, window=2)


def test_a_take_near_the_head_still_sees_a_lease_past_it(
        ttl_ut: Tube, monkeypatch: pytest.MonkeyPatch) -> None:
    """A take on a long tube reads the ready tasks near the head (file statistics
    bound them) and every taken task: a sub-queue leased past that bound is busy."""
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)  # bound even a table of a few files
    (late,) = put_in(ttl_ut, "a", pri=9)
    assert ids(ttl_ut.take()) == [late]
    first, other = ids(ttl_ut.put([{"q": "a", "i": 0}, {"q": "b", "i": 0}],
                                  utube=F.col("q"), pri=0))
    assert ids(ttl_ut.take()) == [other]  # `first` is ahead, but a is busy
    assert ids(ttl_ut.tasks_by_state("ready")) == [first]


def test_a_take_chooses_from_all_when_the_head_holds_too_few_free_heads(
        ut: Tube, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ready tasks near the head are all of one sub-queue: a take of two looks
    further, as Tarantool's would."""
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)
    a = put_in(ut, "a", 3)
    assert ids(ut.take()) == a[:1]
    ut.release(a[0])  # one file of a's three tasks, all ready
    b = ids(ut.put([{"q": "b", "i": 0}, {"q": "c", "i": 0}], utube=F.col("q")))
    assert ids(ut.take(2)) == [a[0], b[0]]


class _StaleOnce(UtubeDriver):
    """Chooses from a snapshot taken before another consumer leased from the sub-queue.

    The first take returns the choice it was given (as a take whose choice went
    stale while it ran); later takes choose normally.
    """

    name: ClassVar[str] = "stale_once"
    stale: DataFrame | None = None

    def choose(self, live: DataFrame, n: int, window: int) -> DataFrame:
        if type(self).stale is not None:
            chosen: DataFrame = type(self).stale  # type: ignore[assignment]
            type(self).stale = None
            return chosen
        return super().choose(live, n, window)


def test_a_choice_made_before_another_lease_is_chosen_again(
        sq: Queue, spark: SparkSession, clock: FakeClock) -> None:
    """The sub-queue check runs in the take's own commit, not only when choosing."""
    sq.register_driver("stale_once", _StaleOnce)
    t = sq.create_tube("s", "stale_once")
    first, second = put_in(t, "x", 2)
    assert ids(sq.tube("s").take(owner="other")) == [first]
    # This consumer chose `second` from an older snapshot (say `first` was buried
    # then); meanwhile the other consumer leased `first`: x is busy at commit time.
    _StaleOnce.stale = spark.createDataFrame([(second, "ready", "x")],
                                             "task_id long, status string, utube string")
    assert t.take(timeout=0).count() == 0  # retried: chose again, x is busy
    assert _StaleOnce.stale is None
    assert ids(t.tasks_by_state("taken")) == [first]


@pytest.mark.parametrize("busy", ["x", None])
def test_a_stale_choice_leases_no_task_of_a_sub_queue_leased_meanwhile(
        sq: Queue, spark: SparkSession, busy: str | None) -> None:
    """A take whose choice holds a task of a sub-queue another consumer leased
    since chooses again and leases only the others; also for the sub-queue of
    tasks put without utube (its NULL must count as busy in the commit's check)."""
    sq.register_driver("stale_once", _StaleOnce)
    t = sq.create_tube("s", "stale_once")
    first, second = put_in(t, busy, 2)
    (other,) = put_in(t, "y")
    assert ids(sq.tube("s").take(owner="other")) == [first]
    _StaleOnce.stale = spark.createDataFrame([(second, "ready", busy), (other, "ready", "y")],
                                             "task_id long, status string, utube string")
    assert ids(t.take(2)) == [other]
    assert ids(t.tasks_by_state("ready")) == [second]


def test_a_take_that_acks_a_head_takes_the_next_of_its_sub_queue(sq: Queue) -> None:
    """A Consumer's take that acks the previous batch in its own commit: the acked
    heads' sub-queues are free in that commit, and still taken strictly in order."""
    t = sq.create_tube("u", "utube")
    a = ids(t.put([{"n": i} for i in range(3)], utube="a"))
    head = ids(t.take(2))
    assert head == a[:1]
    assert ids(take(t.context, 2, 0.0, sq.owner, 1, acking=head)) == a[1:2]
    assert ids(take(t.context, 2, 0.0, sq.owner, 1, acking=a[1:2])) == a[2:]
