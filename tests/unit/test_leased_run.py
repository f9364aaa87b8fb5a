"""When a take knows the ids it leased without reading them: from the statistics of
the files its commit wrote, or the count of its range. Pure logic, no JVM."""

from __future__ import annotations

from typing import Any

from sparkqueue.engine.fresh import leased_run
from sparkqueue.engine.ops import id_run


def written(status: str, lo: int, hi: int, rows: int) -> dict[str, Any]:
    """A written file's statistics, as ``stats_of`` gives them."""
    return {"min_status": status, "max_status": status, "min_task_id": lo,
            "max_task_id": hi, "rows": rows}


def test_a_range_is_known_when_every_id_of_it_was_changed() -> None:
    assert id_run(4, 7, 1, 4) == [4, 5, 6, 7]
    assert id_run(1, 9, 4, 3) == [1, 5, 9], "a shard's ids are the shard count apart"
    assert id_run(4, 7, 1, 3) is None, "one of them was not changed"


def test_the_leased_files_a_take_wrote_show_its_ids_when_they_hold_a_run() -> None:
    files = [written("ready", 3, 9, 7), written("taken", 0, 1, 2), written("taken", 2, 2, 1)]
    assert leased_run(files, 3, 1) == [0, 1, 2], "the taken files only, together"
    assert leased_run(files, 4, 1) is None, "fewer rows than the take leased"
    gap = [written("taken", 0, 3, 3)]
    assert leased_run(gap, 3, 1) is None, "three rows between 0 and 3: not a run"
    mixed = [{**written("taken", 0, 2, 3), "min_status": "ready"}]
    assert leased_run(mixed, 3, 1) is None, "a file with ready rows is not the take's"
    assert leased_run([{**written("taken", 0, 2, 3), "rows": None}], 3, 1) is None
