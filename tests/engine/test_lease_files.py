"""release, touch, bury and delete of a holder's whole leases: the files a take
wrote its leased tasks into are rewritten with the verb's SET (or removed, for
delete as for ack), one commit without a MERGE (``engine.leased``).

Whatever the path, the verb means the same: its result, its events, its call
counts, what later verbs see. Anything doubtful (another owner, an ended
lease, part of a file, a change feed to keep) goes to the MERGE, which
changes the tasks or refuses with the error it always gave.
"""

from __future__ import annotations

from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from sparkqueue import FakeClock, InvalidState, NotOwner, Queue, Tube

from ..conftest import ids, operations


def taken(sq: Queue, n: int = 5, **options: Any) -> tuple[Tube, DataFrame, int]:
    """A tube of ``n`` tasks all leased by one take (so in files of their own), the
    take's result and the tasks table's version after it."""
    t = sq.create_tube("held", "fifottl", **options)
    t.put([{"n": i} for i in range(n)])
    batch = t.take(n)
    assert len(ids(batch)) == n
    return t, batch, t.context.layout.latest_version(t.context.layout.tasks("held"))


def states(t: Tube) -> list[tuple[int, str]]:
    return sorted((r["task_id"], r["status"]) for r in t.peek(list(range(100))).collect())


def test_a_release_of_a_whole_take_rewrites_its_files_without_a_merge(
        sq: Queue, spark: SparkSession) -> None:
    t, batch, before = taken(sq)
    seen: list[tuple[str, list[int]]] = []
    t.on_task_change(lambda df, event: seen.append((event, ids(df))))
    released = t.release(batch)
    assert operations(t, before) == [("UPDATE", "release")]
    expected = spark.createDataFrame([(i, "ready", None) for i in range(5)],
                                     "task_id long, status string, owner string")
    assert_df_equality(released.select("task_id", "status", "owner"), expected,
                       ignore_row_order=True)
    assert seen == [("release", list(range(5)))]
    assert t.statistics()["calls"]["release"] == 5
    assert ids(t.take(2)) == [0, 1], "back in their order, at the head"


def test_a_delayed_release_of_a_whole_take_waits_its_delay(sq: Queue,
                                                           clock: FakeClock) -> None:
    t, batch, before = taken(sq, ttl=100)
    t.release(batch, delay=10)
    assert operations(t, before) == [("UPDATE", "release")]
    assert states(t) == [(i, "delayed") for i in range(5)]
    assert t.take(5, timeout=0).count() == 0
    clock.advance(11)
    assert ids(t.take(5)) == list(range(5))
    row = t.peek(0).first()
    assert row is not None and row["ttl"] == pytest.approx(110), "the delay extends the ttl"


def test_a_touched_whole_take_keeps_its_lease_and_its_ack_still_removes_files(
        sq: Queue, clock: FakeClock) -> None:
    t, batch, before = taken(sq, ttr=30)
    t.touch(batch, 60)
    clock.advance(45)  # past the old lease, within the touched one
    assert states(t) == [(i, "taken") for i in range(5)]
    t.ack(batch)
    assert operations(t, before) == [("UPDATE", "touch"), ("DELETE", "ack")]
    assert t.statistics()["tasks"]["total"] == 0


def test_a_bury_of_a_whole_take_rewrites_its_files_and_kick_brings_them_back(
        sq: Queue) -> None:
    t, batch, before = taken(sq)
    assert sorted(r["status"] for r in t.bury(batch).collect()) == ["buried"] * 5
    assert operations(t, before) == [("UPDATE", "bury")]
    assert t.kick(5) == 5
    assert ids(t.take(5)) == list(range(5))


def test_doubtful_verbs_go_through_the_merge_with_its_errors(sq: Queue,
                                                             clock: FakeClock) -> None:
    t, batch, before = taken(sq, ttr=30)
    with pytest.raises(NotOwner):
        t.release(batch, owner="someone-else")
    t.release([1, 3])  # part of the take
    # the take's lease record is written out as its tasks first (the refused release's)
    done = [("MERGE", "settle"), ("MERGE", "release")]
    assert operations(t, before) == done
    clock.advance(31)  # the other leases ended
    with pytest.raises(InvalidState):
        t.touch([0, 2, 4], 10)
    assert operations(t, before) == done, "nothing more committed"


def test_a_tube_that_keeps_a_change_feed_releases_through_the_merge(
        sq: Queue, spark: SparkSession) -> None:
    """The feed's rows are Delta's to write (a rewrite of files would leave them out)."""
    t, batch, before = taken(sq, change_feed=True)
    t.release(batch)
    assert operations(t, before) == [("MERGE", "release")]
    feed = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", before + 1).load(t.context.layout.tasks("held"))
            .where("_change_type = 'update_postimage'"))
    assert sorted((r["task_id"], r["status"]) for r in feed.collect()) == [
        (i, "ready") for i in range(5)]


def test_a_delete_of_a_whole_take_removes_its_files(sq: Queue) -> None:
    t, batch, before = taken(sq)
    seen: list[str] = []
    t.on_task_change(lambda df, event: seen.append(event))
    deleted = t.delete(batch)
    assert operations(t, before) == [("DELETE", "delete")]
    assert sorted((r["task_id"], r["status"]) for r in deleted.collect()) == [
        (i, "done") for i in range(5)]
    assert seen == ["delete"]
    stats = t.statistics()
    assert stats["calls"]["delete"] == 5 and stats["tasks"]["done"] == 5
    assert stats["tasks"]["total"] == 0
