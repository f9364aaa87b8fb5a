"""Damaged storage: a typed error that names the path and what is wrong, and no verb
ever recreates a table that a registered tube had (its tasks would vanish silently)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, Queue, StorageError, Tube, TubeNotFound, store
from sparkqueue.store.txn import AcceleratedStore

#: what py4j shows of S3A's error after its retries
S3A_DOWN = ("An error occurred while calling o1.save.\n: org.apache.hadoop.fs.s3a."
            "AWSClientIOException: PUT on s3a://b/q: Unable to execute HTTP request: "
            "Connection refused\n\tat org.apache.hadoop.fs.s3a.S3AUtils.translateException")


def unreachable(*args: object, **kwargs: object) -> None:
    """Raise S3A's error after its retries, in place of a store function."""
    raise RuntimeError(S3A_DOWN)


def local(path: str) -> Path:
    return Path(path.removeprefix("file:"))


def with_tasks(sq: Queue, name: str = "t") -> Tube:
    t = sq.create_tube(name, "fifottl")
    t.put([{"n": i} for i in range(10)])
    t.take(1)
    return t


def every_verb_says(t: Tube, path: str) -> None:
    """Each verb that reads or writes the table at ``path`` raises StorageError naming
    it and the tube (an ack or a kick never reads the inbox)."""
    tasks_only = [lambda: t.ack(0), lambda: t.kick(1), t.release_all]
    for verb in [lambda: t.put({"n": 1}), lambda: t.take(1), t.statistics,
                 lambda: t.peek([0]).count(), t.truncate,
                 *(tasks_only if path == t.context.layout.tasks(t.name) else [])]:
        with pytest.raises(StorageError) as err:
            verb()
        assert err.value.tube == t.name and path in str(err.value), err.value


@pytest.mark.parametrize("table", ["tasks", "inbox"])
def test_a_table_deleted_under_a_running_queue_is_an_error_not_a_new_table(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock, table: str) -> None:
    t = with_tasks(sq)
    path = getattr(t.context.layout, table)(t.name)
    shutil.rmtree(local(path))
    every_verb_says(t, path)
    other = sparkqueue.connect(spark, root, owner="b", clock=clock).tube("t")
    with pytest.raises(StorageError, match="missing"):
        other.statistics()
    assert not local(path).exists()  # nothing made a new, empty table in its place


def test_a_missing_delta_log_or_tube_folder_is_an_error(sq: Queue) -> None:
    t = with_tasks(sq, "a")
    shutil.rmtree(local(t.context.layout.tasks("a")) / "_delta_log")
    every_verb_says(t, t.context.layout.tasks("a"))
    u = with_tasks(sq, "b")
    shutil.rmtree(local(u.context.layout.tube_dir("b")))
    with pytest.raises(StorageError, match="missing"):
        u.take(1)
    with pytest.raises(StorageError, match="missing"):
        sq.tube("b").put({"n": 1})
    assert not local(u.context.layout.tube_dir("b")).exists()
    assert sq.tubes() == ["a", "b"]


def test_drop_finishes_a_damaged_tube_and_its_name_is_free_again(sq: Queue) -> None:
    t = with_tasks(sq)
    shutil.rmtree(local(t.context.layout.tasks("t")))
    sq.tube("t").drop()
    assert sq.tubes() == []
    with pytest.raises(TubeNotFound):
        t.take(1)
    fresh = sq.create_tube("t", "fifottl")
    assert fresh.statistics()["tasks"]["total"] == 0


def test_a_dropped_tube_says_not_found_and_names_those_that_exist(sq: Queue) -> None:
    t = with_tasks(sq)
    sq.create_tube("other")
    t.release_all()
    sq.tube("t").drop()
    with pytest.raises(TubeNotFound, match="existing tubes: other"):
        t.take(1)


def test_a_missing_registry_is_an_error_while_tubes_exist(sq: Queue, spark: SparkSession,
                                                         root: str) -> None:
    with_tasks(sq)
    shutil.rmtree(local(sq.layout.registry))
    with pytest.raises(StorageError, match=r"registry of tubes is missing.*\(t\)"):
        sparkqueue.connect(spark, root)
    assert not local(sq.layout.registry).exists()


def test_a_root_that_cannot_be_written_is_an_error_naming_it(spark: SparkSession,
                                                            tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(StorageError, match="cannot create a Delta table") as err:
        sparkqueue.connect(spark, str(blocker / "queues"))
    assert str(blocker / "queues") in err.value.path
    assert "Py4J" not in str(err.value) and "\tat " not in str(err.value)


def test_a_put_whose_commit_landed_before_the_storage_failed_returns_its_rows_once(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The append commits, then the storage fails before its answer comes back (S3A
    gave up on a lost answer): the put finds its commit by its token and returns
    its rows, put once."""
    t = sq.create_tube("lost", "fifottl")
    append = store.append

    def commits_then_fails(*args: Any, **kwargs: Any) -> None:
        append(*args, **kwargs)
        raise RuntimeError("An error occurred while calling o1.save.\n: "
                           "java.io.IOException: the answer was lost")

    monkeypatch.setattr(store, "append", commits_then_fails)
    assert sorted(r["data"]["n"] for r in t.put([{"n": i} for i in range(3)]).collect()) == [
        0, 1, 2]
    monkeypatch.undo()
    assert sorted(r["data"]["n"] for r in t.take(10).collect()) == [0, 1, 2]


def test_a_failure_of_the_storage_is_a_storage_error_and_nothing_is_written(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """S3A's error after its retries (here raised where the append would write) reaches
    the caller as a StorageError naming the tube, its folder and the storage's words."""
    t = sq.create_tube("down", "fifottl")
    monkeypatch.setattr(store, "append", unreachable)
    with pytest.raises(StorageError) as err:
        t.put([{"n": 1}])
    assert err.value.tube == "down" and "Connection refused" in str(err.value)
    assert t.context.layout.tube_dir("down") in str(err.value)
    monkeypatch.undo()
    assert t.statistics()["tasks"]["total"] == 0


def test_a_storage_failure_reading_or_writing_the_registry_is_a_storage_error(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Queue's own calls (tube, tubes, create_tube) raise the storage's failure
    reading or writing the registry as a StorageError naming it; a tube whose
    registration failed is not registered."""
    sq.create_tube("kept", "fifo")
    registry = sq.tube("kept").context.layout.registry
    monkeypatch.setattr(store.Layout, "registry_at", unreachable)
    for call in (lambda: sq.tube("kept"), sq.tubes, lambda: sq.create_tube("new", "fifo")):
        with pytest.raises(StorageError) as err:
            call()
        assert err.value.path == registry and "Connection refused" in err.value.problem
    monkeypatch.undo()
    monkeypatch.setattr(store, "merge", unreachable)  # the registration's own write:
    monkeypatch.setattr(AcceleratedStore, "append_if", unreachable)  # by either way
    with pytest.raises(StorageError, match="Connection refused"):
        sq.create_tube("new", "fifo")
    monkeypatch.undo()
    assert sorted(sq.tubes()) == ["kept"]


def test_a_consumer_records_a_storage_failure_and_goes_on(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Consumer whose take meets a failure of the storage records it in
    ``last_error`` and takes again: a short S3 fault does not end a worker."""
    t = sq.create_tube("c", "fifottl")
    t.put([{"n": i} for i in range(5)])
    failures = [unreachable]  # the next look at a table's log fails, once
    failed_at: list[str] = []
    for name in ("latest_version", "latest_versions"):
        real = getattr(store.Layout, name)

        def flaky(self: store.Layout, *args: Any, _real: Any = real, _name: str = name,
                  **kwargs: Any) -> Any:
            if failures:
                failed_at.append(_name)
                failures.pop()()
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(store.Layout, name, flaky)
    seen: list[int] = []

    def handle(batch: Any) -> None:
        seen.extend(int(r["task_id"]) for r in batch.collect())
        if len(seen) == 5:
            consumer.stop()

    consumer = sparkqueue.Consumer(t, handle, batch_size=5, take_timeout=0, idle_timeout=30)
    progress = consumer.run()
    assert failed_at == ["latest_versions"]  # the take's first look at the logs
    assert "StorageError" in str(progress.last_error)
    assert "Connection refused" in str(progress.last_error)
    assert sorted(seen) == list(range(5)) and progress.done == 5
    assert t.statistics()["tasks"]["total"] == 0


def test_connect_raises_a_storage_failure_opening_the_root_as_a_storage_error(
        spark: SparkSession, root: str, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``connect`` creates the root's registry where there is none: a failure of the
    storage there is a StorageError naming the root."""
    monkeypatch.setattr(store.Layout, "create_registry", unreachable)
    with pytest.raises(StorageError) as err:
        sparkqueue.connect(spark, f"{root}/elsewhere", owner="a", clock=clock)
    assert err.value.path == f"{root}/elsewhere" and "Connection refused" in err.value.problem


def test_a_consumer_ends_on_a_missing_table(sq: Queue) -> None:
    """A table missing is no failure to wait out: the Consumer's run raises it."""
    t = with_tasks(sq, "gone")
    shutil.rmtree(local(t.context.layout.tasks("gone")))
    consumer = sparkqueue.Consumer(t, lambda batch: None, take_timeout=0, idle_timeout=30)
    net = threading.Timer(120, consumer.stop)  # were it waited out: the run ends, and fails
    net.start()
    try:
        with pytest.raises(StorageError, match="missing") as err:
            consumer.run()
    finally:
        net.cancel()
    assert not err.value.transient


def test_a_registry_version_without_its_checksum_is_read_by_time_travel(sq: Queue) -> None:
    """The registry at a version is read as the files that version's checksum
    lists; where that checksum is gone (a writer that writes none), as
    Delta's time travel reads it: the same tubes, as of that version."""
    layout = sq.layout
    sq.create_tube("a", "fifo")
    first = layout.latest_version(layout.registry)
    sq.create_tube("b", "fifo")
    second = layout.latest_version(layout.registry)

    def names(version: int) -> list[str]:
        at, rows = layout.registry_at(version)
        assert at == version
        return sorted(r["name"] for r in rows.select("name").collect())

    listed = {v: names(v) for v in (first, second)}
    assert listed == {first: ["a"], second: ["a", "b"]}
    for version in (first, second):
        (local(layout.registry) / "_delta_log" / f"{version:020d}.crc").unlink()
        assert layout.store.listed_files(layout.registry, version) is None
    assert {v: names(v) for v in (first, second)} == listed


def test_a_put_into_a_tube_made_anew_elsewhere_returns_its_rows_with_their_ids(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock) -> None:
    """A Queue that knew a tube's inbox and cursor puts to it again (a Tube opened
    anew) after another Queue dropped the tube and created it anew in the same
    folder, with fewer commits: the put finds its commit in the new inbox, and
    its ids count from the new tube's start."""
    t = with_tasks(sq)
    t.put([{"n": i} for i in range(10, 20)])
    t.release_all()
    other = sparkqueue.connect(spark, root, owner="b", clock=clock)
    other.tube("t").drop()
    other.create_tube("t", "fifottl")
    assert t.context.layout.tasks("t") == other.tube("t").context.layout.tasks("t")
    put = sq.tube("t").put([{"n": 1}, {"n": 2}])
    assert [(r["task_id"], r["data"]["n"]) for r in put.collect()] == [(0, 1), (1, 2)]
    assert [r["task_id"] for r in other.tube("t").take(2).collect()] == [0, 1]
