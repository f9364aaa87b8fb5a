"""The portable engine's ack of one task: one DELETE whose condition holds the
ack's guard (the caller holds the task's live lease) deletes its row or
nothing, so it is all or nothing without the MERGE's join. Deleting nothing,
it commits nothing, and the MERGE acks the task or says why not.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, InvalidState, NotOwner, Queue, TaskNotFound, Tube

from ..conftest import commit_infos, ids


def portable(sq: Queue, name: str, n: int = 3, **options: Any) -> tuple[Tube, int]:
    """A portable engine's tube with ``n`` tasks taken, and its tasks table's version."""
    pq = sparkqueue.connect(sq.spark, sq.root, owner=sq.owner, clock=sq.clock,
                            engine="portable")
    t = pq.create_tube(name, "fifottl", **options)
    t.put([{"n": i} for i in range(n)])
    assert len(ids(t.take(n))) == n
    return t, version(t)


def version(t: Tube) -> int:
    return t.context.layout.latest_version(t.context.layout.tasks(t.context.key))


def plans(t: Tube, after: int) -> list[tuple[str, str, str | None]]:
    """(Delta operation, sparkqueue op, plan) of the tasks table's commits after ``after``."""
    return [(info["operation"], info["tag"]["sq"], info["tag"].get("plan"))
            for v, info in sorted(commit_infos(t).items()) if v > after]


def test_an_ack_of_one_task_is_one_delete(sq: Queue, spark: SparkSession) -> None:
    t, before = portable(sq, "one", change_feed=True)
    result = t.ack([1])
    assert plans(t, before) == [("DELETE", "ack", "one-task")]
    assert [(r["task_id"], r["status"], r["data"]["n"]) for r in result.collect()] == [
        (1, "done", 1)]
    assert result.collect() == result.collect(), "the result reads the same rows again"
    assert sorted((r["task_id"], r["status"]) for r in t.peek([0, 1, 2]).collect()) == [
        (0, "taken"), (2, "taken")]
    stats = t.statistics()
    assert stats["calls"]["ack"] == 1 and stats["tasks"]["done"] == 1
    feed = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", before + 1).load(t.context.layout.tasks("one"))
            .where("task_id >= 0"))
    assert [(r["task_id"], r["_change_type"]) for r in feed.collect()] == [(1, "delete")]


def test_an_ack_of_several_tasks_goes_through_the_merge(sq: Queue) -> None:
    """Part of a batch that one lease record holds: the record written out as its
    tasks first, then the MERGE."""
    t, before = portable(sq, "several")
    assert ids(t.ack([0, 2])) == [0, 2]
    assert plans(t, before) == [("MERGE", "settle", None), ("MERGE", "ack", "merge")]


def test_an_ack_of_a_batch_taken_as_a_lease_record_is_one_append_of_its_settle_row(
        sq: Queue, spark: SparkSession) -> None:
    t, before = portable(sq, "batch", n=1)
    t.put([{"n": i} for i in range(1, 5)])
    batch = t.take(4)
    taken = version(t)
    assert plans(t, before) == [("WRITE", "ingest+take", "new-puts")]
    result = t.ack(batch)
    assert plans(t, taken) == [("WRITE", "ack", "one-record")]
    assert sorted((r["task_id"], r["status"], r["data"]["n"]) for r in result.collect()) == [
        (i, "done", i) for i in range(1, 5)]
    stats = t.statistics()
    assert stats["tasks"]["total"] == 1 and stats["tasks"]["done"] == 4
    assert stats["calls"]["ack"] == 4
    acked = version(t)
    assert ids(t.ack([0])) == [0], "a take of one new put: a record of one task"
    assert plans(t, acked) == [("WRITE", "ack", "one-record")]


@pytest.mark.parametrize("case", ["another owner", "no such task", "lease ended", "acked"])
def test_a_refused_ack_of_one_task_gets_the_merges_error_and_changes_nothing(
        sq: Queue, clock: FakeClock, case: str) -> None:
    t, _ = portable(sq, case.replace(" ", "_"), ttr=30)
    if case == "acked":
        t.ack([0])
    before = version(t)
    error, task, owner = {"another owner": (NotOwner, 0, "someone-else"),
                          "no such task": (TaskNotFound, 7, None),
                          "lease ended": (InvalidState, 0, None),
                          "acked": (TaskNotFound, 0, None)}[case]
    if case == "lease ended":
        clock.advance(31)
    with pytest.raises(error):
        t.ack([task], owner=owner)
    assert version(t) == before, "nothing committed"
    assert [r["status"] for r in t.peek([1]).collect()] == [
        "ready" if case == "lease ended" else "taken"]



def test_a_delete_of_tasks_the_caller_holds_is_one_delete_counted_as_a_delete(
        sq: Queue) -> None:
    """The DELETE of one task's row, or a lease record's settle row, serves a delete as
    it serves an ack: the commit is the delete's, counted and sent as a delete."""
    events: list[tuple[str, list[int]]] = []
    for name, change_feed, deleted, plan, kind in (
            ("rows", True, [1], "one-task", "DELETE"),
            ("record", False, [0, 1, 2], "one-record", "WRITE")):
        t, before = portable(sq, name, change_feed=change_feed)
        t.on_task_change(lambda tasks, kind: events.append((kind, ids(tasks))))
        result = t.delete(deleted)
        assert sorted((r["task_id"], r["status"]) for r in result.collect()) == [
            (i, "done") for i in deleted]
        assert plans(t, before) == [(kind, "delete", plan)]
        calls = t.statistics()["calls"]
        assert calls["delete"] == len(deleted) and not calls.get("ack")
    assert events == [("delete", [1]), ("delete", [0, 1, 2])]


def test_an_ack_after_commits_this_queue_has_not_seen_finds_its_own_commit(
        sq: Queue) -> None:
    """The DELETE starts from the version this Queue knows, without a look at the
    log; other Queues' commits since come before its own, which it finds after
    them."""
    t, _ = portable(sq, "unseen", n=4, change_feed=True)
    other = sparkqueue.connect(sq.spark, sq.root, owner=sq.owner, clock=sq.clock,
                               engine="portable").tube("unseen")
    known = t.context.layout.known_version(t.context.layout.tasks("unseen"))
    assert ids(other.ack([0])) == [0] and ids(other.ack([1])) == [1]
    assert ids(t.ack([2])) == [2]
    assert plans(t, known) == [("DELETE", "ack", "one-task")] * 3
    assert t.statistics()["calls"]["ack"] == 3
    with pytest.raises(TaskNotFound):
        t.ack([0])
