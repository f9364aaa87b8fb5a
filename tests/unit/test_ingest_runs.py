"""How an ingest cuts the put files it moves into runs written side by side: pure
logic, no JVM."""

from __future__ import annotations

from sparkqueue.engine.ingest import runs
from sparkqueue.store import PutFile


def test_an_ingest_cuts_put_files_into_runs_of_at_least_so_many_rows() -> None:
    files = [PutFile(f"f{i}", 1, first, {}) for i, first in enumerate([0, 10, 15, 40])]
    sizes = {"f0": 10, "f1": 5, "f2": 25, "f3": 10}  # from the first ids and the id after

    def names(least: int) -> list[list[str]]:
        return [[f.name for f in run] for run in runs(files, 50, least)]

    assert names(12) == [["f0", "f1"], ["f2"], ["f3"]]  # the last run may hold fewer
    assert names(100) == [["f0", "f1", "f2", "f3"]]  # a small ingest: one writer
    assert [sum(sizes[f.name] for f in run) for run in runs(files, 50, 1)] == [10, 5, 25, 10]
