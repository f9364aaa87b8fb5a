"""The take's plan on real tubes: ``explain_take`` names the strategy the next take
commits with, and that commit's tag names it too (``plan``); the table itself is
tested without a JVM (tests/unit/test_plan.py)."""

from __future__ import annotations

from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube
from sparkqueue.engine.ingest import ingest

from ..conftest import commit_infos, ids


def last_plan(t: Tube) -> str | None:
    """The strategy the newest commit of the tube's tasks table names (None: none)."""
    infos = commit_infos(t)
    plan: str | None = infos[max(infos)]["tag"].get("plan")
    return plan


def test_each_take_commits_with_the_strategy_explain_take_named(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock) -> None:
    t = sq.create_tube("plan", "fifottl")
    t.put([{"n": i} for i in range(5)])
    said = t.explain_take(5)
    assert said["strategy"] == "new-puts" and said["facts"]["puts_waiting"] is True
    assert said["then"] == ["head-files", "update-or-merge"]
    assert ids(t.take(5)) == [0, 1, 2, 3, 4] and last_plan(t) == "new-puts"

    t.put([{"n": i} for i in range(5, 10)])
    ingest(t.context)  # every put ingested: the head of the tasks table is where to take
    said = t.explain_take(2)
    assert said["strategy"] == "head-files" and said["facts"]["puts_waiting"] is False
    assert ids(t.take(2)) == [5, 6] and last_plan(t) == "head-files"

    portable = sparkqueue.connect(spark, root, owner="b", clock=clock, engine="portable")
    other = portable.tube("plan")
    said = other.explain_take(2)  # puts this Queue has not seen ingested yet: new-puts
    assert (said["strategy"], said["then"]) == ("new-puts", ["update-or-merge"])
    assert said["facts"]["engine"] == "portable"
    assert ids(other.take(2)) == [7, 8] and last_plan(other) == "update-or-merge"
    assert t.statistics()["tasks"]["taken"] == 9, "explaining took nothing"


def test_a_take_of_sub_queue_heads_and_a_sharded_tube_explain_their_plan(sq: Queue) -> None:
    u = sq.create_tube("heads", "utubettl")
    u.put([{"n": i} for i in range(4)], utube="a")
    u.put([{"n": i} for i in range(4)], utube="b")
    ingest(u.context)
    said = u.explain_take(10)
    assert said["strategy"] == "sub-queue-heads"
    assert len(ids(u.take(10))) == 2 and last_plan(u) == "sub-queue-heads"

    s = sq.create_tube("sharded", "fifottl", shards=2)
    s.put([{"n": i} for i in range(3)])
    said = s.explain_take(3)  # the shard the owner's take starts at, as a take sees it
    assert said["shard"] in (0, 1) and said["then"][-1] == "update-or-merge", said


def test_each_settling_verb_commits_with_its_plans_strategy(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock) -> None:
    """An ack or a release of a take's whole batch removes or rewrites its files
    (``whole-files``); part of a batch, or the portable store, is a MERGE, but
    the portable store's ack of one task is one guarded DELETE (``one-task``)."""
    t = sq.create_tube("settle", "fifottl")
    t.put([{"n": i} for i in range(7)])
    ingest(t.context)
    batch = t.take(3)
    assert ids(t.ack(batch)) == [0, 1, 2] and last_plan(t) == "whole-files"
    assert ids(t.take(3)) == [3, 4, 5]
    assert ids(t.release([3])) == [3] and last_plan(t) == "merge"  # part of the batch

    portable = sparkqueue.connect(spark, root, owner=sq.owner, clock=clock, engine="portable")
    other = portable.tube("settle")
    assert ids(other.ack([4, 5])) == [4, 5] and last_plan(other) == "merge"
    assert ids(other.take(1)) == [3]
    assert ids(other.ack([3])) == [3] and last_plan(other) == "one-task"
    assert t.statistics()["tasks"]["total"] == 1


def test_a_take_carrying_acks_it_cannot_commit_acks_them_apart_first(sq: Queue) -> None:
    """A utubettl take of more than one query chooses (``n`` over ``COLLECT_UPTO``)
    carrying acks of whole files of the taker's leases: the plan is ``acks-apart``
    (the acks removed alone, no data read), then the take planned again without
    them (an ingest, then the MERGE)."""
    from sparkqueue.engine import plan
    from sparkqueue.engine.take import take_facts, take_once

    t = sq.create_tube("apart", "utubettl")
    t.put([{"n": i} for i in range(3)], utube="a")
    ingest(t.context)
    first = ids(t.take(1))
    assert first == [0]
    t.put([{"n": 9}], utube="b")
    facts, _ = take_facts(t.context, 20_000, first)
    assert plan.take_order(facts) == [plan.Strategy.ACKS_APART, plan.Strategy.STATEMENT]
    before = max(commit_infos(t))
    got = take_once(t.context, 20_000, t.context.who(None), 1, first)
    assert got is not None and ids(got) == [1, 3]
    after = [(info["operation"], info["tag"]["sq"], info["tag"].get("plan"))
             for v, info in sorted(commit_infos(t).items()) if v > before]
    assert after == [("DELETE", "ack", "whole-files"), ("WRITE", "ingest", None),
                     ("MERGE", "take", "update-or-merge")], after
