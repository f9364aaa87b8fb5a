"""What per-file statistics say about a tasks table: pure logic, no JVM."""

from __future__ import annotations

import json
import math
from typing import Any

from sparkqueue.store import (
    head_bound,
    head_files,
    head_key,
    live_files,
    may_hold,
    may_hold_ready,
    reaches,
    ready_head,
    settled_records,
    stats_of,
    whole_files,
)
from sparkqueue.store.filelog import FileLog
from sparkqueue.store.schema import LEASE, LEASED_KNOWN, SETTLED
from sparkqueue.store.sql import id_runs

NOW = 1000.0


def file(lo: int, hi: int, status: str = "ready", *, pri: int = 0, top: str | None = None,
         owner: str | None = None, lease: float | None = None, ttl_end: float = math.inf,
         rows: int | None = None) -> dict[str, Any]:
    """The statistics of a data file of ids ``lo..hi`` (order keys = ids), every row
    ``status`` (up to ``top`` when given: a file of mixed states)."""
    return {"rows": hi - lo + 1 if rows is None else rows, "min_status": status,
            "max_status": top or status, "status_nulls": 0, "min_pri": pri, "max_pri": pri,
            "min_order_key": lo, "max_order_key": hi, "min_ttl_end": ttl_end,
            "max_ttl_end": ttl_end, "ttl_end_nulls": 0,
            "min_task_id": lo, "max_task_id": hi, "min_owner": owner, "max_owner": owner,
            "owner_nulls": 0 if owner else hi - lo + 1, "min_lease_end": lease,
            "min_change_token": None, "max_change_token": None, "size": 100}


def test_a_file_may_hold_a_ready_task_by_its_status_range_and_leases() -> None:
    assert may_hold_ready(file(0, 9), NOW)
    assert may_hold_ready(file(0, 9, "delayed"), NOW)  # a delay may have passed
    assert not may_hold_ready(file(0, 9, "buried"), NOW)
    assert not may_hold_ready(file(0, 9, "taken", lease=NOW + 1), NOW)
    assert may_hold_ready(file(0, 9, "taken", lease=NOW - 1), NOW)  # a lease ended
    assert may_hold_ready(file(0, 9, "buried", top="taken", lease=NOW + 1), NOW)  # "ready" between
    assert not may_hold_ready(file(0, 9, ttl_end=NOW), NOW)  # every ttl ended: all expired
    assert may_hold_ready(file(0, 9, ttl_end=NOW) | {"max_ttl_end": NOW + 1}, NOW)
    assert may_hold_ready(file(0, 9, ttl_end=NOW) | {"ttl_end_nulls": 1}, NOW)
    assert may_hold_ready(file(0, 9, ttl_end=NOW) | {"max_ttl_end": None}, NOW)
    assert may_hold(file(0, 9) | {"rows": None}, "buried")  # unknown statistics leave room
    assert not may_hold(file(0, 9) | {"rows": 0}, "ready")


def test_head_bound_walks_whole_ready_files_until_they_hold_n() -> None:
    files = [file(0, 9), file(10, 19), file(20, 29, "taken", lease=NOW + 5)]
    assert head_bound(files, NOW, 5) == "(pri < 0 OR (pri = 0 AND order_key <= 9))"
    assert head_bound(files, NOW, 15) == "(pri < 0 OR (pri = 0 AND order_key <= 19))"
    assert head_bound(files, NOW, 25) is None  # the taken file holds no certain ready task
    assert head_bound([file(0, 9, ttl_end=NOW - 1)], NOW, 1) is None  # its ttl has passed


def test_ready_head_is_a_run_of_whole_ready_files_ahead_of_every_other() -> None:
    files = [file(0, 9), file(10, 19), file(20, 29)]
    assert ready_head(files, NOW, 20) == (0, 19)
    assert ready_head(files, NOW, 10) == (0, 9)
    assert ready_head(files, NOW, 15) is None  # part of a file: choose by reading
    assert ready_head(files, NOW, 100) == (0, 29)  # fewer than n, and no other file
    assert ready_head([file(0, 9), file(10, 19, pri=-1)], NOW, 10) is None  # more urgent after
    assert ready_head([file(0, 9), file(12, 19)], NOW, 20) is None  # ids do not run on
    assert ready_head([file(0, 9, "buried"), file(10, 19)], NOW, 10) == (10, 19)


def test_head_files_hold_the_n_lowest_ready_tasks_when_every_other_file_comes_after() -> None:
    files = {"a": file(0, 9), "b": file(10, 19), "c": file(20, 29, "taken", lease=NOW + 5)}
    assert head_files(files, NOW, 1) == (["a"], 10, 0, 9)  # part of a file: the take chooses
    assert head_files(files, NOW, 15) == (["a", "b"], 20, 0, 19)
    assert head_files(files, NOW, 100) == (["a", "b"], 20, 0, 19)  # all there is
    # a file that may hold a ready task not after all of theirs: choose by reading
    assert head_files(files | {"d": file(5, 5, "taken", lease=NOW - 1)}, NOW, 1) is None
    assert head_files(files | {"d": file(30, 30, pri=-1)}, NOW, 1) == (["d"], 1, 30, 30)  # urgent
    assert head_files(files | {"d": file(30, 30, pri=-1)}, NOW, 2) is None  # a's lowest maybe
    # a requeued task keeps its id and moves back by its order key
    assert head_files({"a": file(0, 9) | {"max_order_key": 40}, "b": file(10, 19)}, NOW, 1) is None
    assert head_files({"a": file(0, 9, ttl_end=NOW - 1)}, NOW, 1) is None  # ttl passed
    assert head_files({"a": file(0, 9, top="taken")}, NOW, 1) is None  # not all ready
    assert head_files({"a": file(0, 9, "buried"), "b": file(10, 19)}, NOW, 3) == (
        ["b"], 10, 10, 19)
    assert head_files({"c": files["c"]}, NOW, 1) is None  # nothing ready


def test_whole_files_are_exactly_the_acked_ids_taken_by_the_acker() -> None:
    taken = {"a": file(0, 9, "taken", owner="me", lease=NOW + 9),
             "b": file(10, 19, "taken", owner="me", lease=NOW + 9)}
    assert whole_files(taken, list(range(20)), "me", NOW) == ["a", "b"]
    assert whole_files(taken, list(range(10)), "me", NOW) == ["a"]
    assert whole_files(taken, list(range(5)), "me", NOW) is None  # part of a file
    assert whole_files(taken, list(range(20)), "you", NOW) is None  # another owner's
    assert whole_files(taken, list(range(10)), "me", NOW + 10) is None  # leases ended


def test_head_key_bounds_the_head_and_files_reach_below_it_by_their_minimum() -> None:
    files = [file(0, 9), file(10, 19), file(20, 29, "taken", owner="me", lease=NOW + 9)]
    assert head_key(files, NOW, 5) == (0, 9)
    assert head_key(files, NOW, 15) == (0, 19)
    assert head_key(files, NOW, 25) is None  # the taken file's rows are not certain
    assert reaches(file(0, 9), (0, 9)) and not reaches(file(10, 19), (0, 9))
    assert reaches(file(10, 19, pri=-1), (0, 9))  # a lower priority comes first
    assert not reaches(file(0, 9, pri=1), (0, 9))
    assert reaches(file(0, 9) | {"min_pri": None}, (0, 9))  # unknown statistics


def test_files_known_to_hold_ids_that_are_not_a_run_are_whole_when_all_are_acked() -> None:
    # a take of sub-queue heads leased 0, 2 and 5 into files a and b; 1, 3 and 4 are
    # another owner's tasks or ready ones, in other files
    taken = {"a": file(0, 2, "taken", owner="me", lease=NOW + 9, rows=2),
             "b": file(5, 5, "taken", owner="me", lease=NOW + 9)}
    known = {"a": (("a", "b"), (0, 2, 5)), "b": (("a", "b"), (0, 2, 5))}
    assert whole_files(taken, [0, 2, 5], "me", NOW) is None  # a's range holds 1
    assert sorted(whole_files(taken, [0, 2, 5], "me", NOW, known=known) or []) == ["a", "b"]
    assert whole_files(taken, [0, 2], "me", NOW, known=known) is None  # part of the group
    assert whole_files(taken, [0, 1, 2, 5], "me", NOW, known=known) is None  # 1 elsewhere
    assert whole_files({"a": taken["a"]}, [0, 2, 5], "me", NOW, known=known) is None  # b gone
    assert whole_files(taken, [0, 2, 5], "you", NOW, known=known) is None
    assert whole_files(taken, [0, 2, 5], "me", NOW + 10, known=known) is None  # leases ended


def test_id_runs_and_statistics_json() -> None:
    assert id_runs([1, 2, 3, 7, 9, 10]) == [(1, 3), (7, 7), (9, 10)]
    assert id_runs([4, 5, 6]) == [(4, 6)] and id_runs([3, 7, 11], 4) == [(3, 11)]
    assert id_runs([1, 3, 5], 1) == [(1, 1), (3, 3), (5, 5)] and id_runs([]) == []
    stats = stats_of(json.dumps({"numRecords": 3, "minValues": {"status": "ready",
                                                                "ttl_end": "Infinity"}}))
    assert (stats["rows"], stats["min_status"], stats["min_ttl_end"]) == (3, "ready", math.inf)
    assert stats_of(None)["rows"] is None


def test_a_shards_ids_step_by_the_shard_count() -> None:
    # shard 1 of 4: ids 1, 5, 9, ... (see TubeContext.task_id)
    assert id_runs([1, 5, 9, 17, 21], step=4) == [(1, 9), (17, 21)]
    files = [file(1, 37, rows=10), file(41, 77, rows=10)]
    assert ready_head(files, NOW, 20, step=4) == (1, 77)
    assert ready_head(files, NOW, 10, step=4) == (1, 37)
    assert ready_head(files, NOW, 20) is None  # read with a step of 1, ids do not run on
    assert ready_head([file(1, 37, rows=10), file(45, 81, rows=10)], NOW, 20, step=4) is None
    taken = {"a": file(1, 37, "taken", owner="me", lease=NOW + 9, rows=10)}
    assert whole_files(taken, list(range(1, 38, 4)), "me", NOW, step=4) == ["a"]
    assert whole_files(taken, list(range(1, 34, 4)), "me", NOW, step=4) is None


def test_a_process_keeps_the_newest_leased_groups_in_mind_and_forgets_the_oldest() -> None:
    reader = FileLog(None, "/root", None)  # type: ignore[arg-type]  # no read here
    path = "/root/tubes/t/tasks"
    groups = LEASED_KNOWN + 1  # one file each, of ids 4k and 4k + 2: not a run
    files = {f"f{k}": file(4 * k, 4 * k + 2, "taken", owner="me", lease=NOW + 9, rows=2)
             for k in range(groups)}
    for k in range(groups):
        reader.note_leased(path, [f"f{k}"], [4 * k, 4 * k + 2])
    newest, oldest = groups - 1, 0
    assert reader.whole_leased_files(path, files, [4 * newest, 4 * newest + 2], "me",
                                     NOW) == [f"f{newest}"]
    assert reader.whole_leased_files(path, files, [4, 6], "me", NOW) == ["f1"]
    assert reader.whole_leased_files(path, files, [4 * oldest, 4 * oldest + 2], "me",
                                     NOW) is None  # forgotten: its ack goes the slow way


def record(owner: str = "a", lease: float = NOW + 30, ttl_end: float = math.inf,
           token: str = "t" * 32, status: str = LEASE) -> dict[str, Any]:
    """The statistics of a lease record's file (engine.records): one row, no task id,
    the record's token; or, with ``status`` SETTLED, of the settle row closing it."""
    return {**file(0, 0, status, owner=owner, lease=lease, ttl_end=ttl_end),
            "min_task_id": None, "max_task_id": None, "min_change_token": token,
            "max_change_token": token}


def test_a_lease_records_file_holds_ready_tasks_once_its_least_lease_or_ttl_ends() -> None:
    assert not may_hold_ready(record(), NOW)
    assert may_hold_ready(record(lease=NOW), NOW)
    assert may_hold_ready(record(lease=NOW - 1, ttl_end=NOW - 1), NOW), (
        "the record's ends are the least of its tasks': some may still be ready")
    assert not may_hold(record(), "taken") and not may_hold(record(), "ready")


def test_a_lease_record_is_whole_for_its_owners_ack_of_the_ids_it_is_known_to_hold() -> None:
    files = {"r": record(), "f": file(5, 9, "taken", owner="a", lease=NOW + 30)}
    known = {"r": (("r",), (0, 1, 2, 3, 4))}
    assert whole_files(files, [0, 1, 2, 3, 4], "a", NOW, known=known) == ["r"]
    assert sorted(whole_files(files, list(range(10)), "a", NOW, known=known) or []) == ["f", "r"]
    assert whole_files(files, [0, 1, 2, 3, 4], "b", NOW, known=known) is None
    assert whole_files(files, [0, 1, 2, 3, 4], "a", NOW + 30, known=known) is None
    assert whole_files(files, [0, 1, 2, 3, 4], "a", NOW) is None, "unknown: not whole"


def test_a_settle_row_closes_its_lease_record_for_every_choice() -> None:
    """A settle row (one row, SETTLED, the record's token) closes the record it names:
    the live files leave out both, so no take finds its tasks ready once its
    lease ends, and no ack finds them whole; a record of another token stays."""
    files = {"r": record(lease=NOW - 1), "s": record(status=SETTLED),
             "o": record(token="o" * 32), "f": file(5, 9, "ready")}
    assert settled_records(files) == {"t" * 32}
    assert sorted(live_files(files)) == ["f", "o"]
    assert may_hold_ready(files["r"], NOW), "alone, its ended lease makes its tasks ready"
    known = {"r": (("r",), (0, 1, 2, 3, 4)), "o": (("o",), (10, 11))}
    files["r"] = record()
    assert whole_files(files, [0, 1, 2, 3, 4], "a", NOW, known=known) is None, "closed"
    assert whole_files(files, [10, 11], "a", NOW, known=known) == ["o"]
    assert not may_hold_ready(files["s"], NOW) and not may_hold(files["s"], LEASE)
    two = {**record(status=SETTLED), "rows": 2}  # not a settle row's file: closes nothing
    assert settled_records({"s": two, "r": record()}) == set()
