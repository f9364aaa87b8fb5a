"""The Queue (registry of tubes, drivers) and bad input: typed errors, nothing written."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import sparkqueue
from sparkqueue import (
    FifoDriver,
    InvalidOption,
    NotOwner,
    NotSupported,
    Queue,
    QueueError,
    SchemaMismatch,
    TubeExists,
    TubeNotFound,
    store,
)
from sparkqueue.store import Layout
from sparkqueue.store.schema import COMMITS_PER_CHECKPOINT
from sparkqueue.store.txn import AcceleratedStore
from tests.conftest import first_row, versions

BAD_NAMES = ["", "x" * 33, "it's", "a;b", "a.b", "a/b", "a b", "tübe", "'; DROP", None, 7, b"ab"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_tube_names_are_refused_before_anything_is_written(sq: Queue, name: object) -> None:
    with pytest.raises(InvalidOption, match="tube name"):
        sq.create_tube(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption):
        sq.tube(name)  # type: ignore[arg-type]
    assert sq.tubes() == []


def test_name_of_32_characters_is_fine(sq: Queue) -> None:
    sq.create_tube("x" * 32)
    assert sq.tubes() == ["x" * 32]


def test_unknown_type_lists_the_known_ones(sq: Queue) -> None:
    with pytest.raises(InvalidOption, match="fifo, fifottl, limfifottl"):
        sq.create_tube("t", "nosuch")


@pytest.mark.parametrize("kind, opts", [
    ("fifo", {"ttl": 5}), ("fifo", {"pri": 1}), ("fifo", {"delay": 1}),
    ("fifottl", {"capacity": 3}), ("fifottl", {"window": 2}), ("fifo", {"bogus": 1}),
])
def test_options_a_driver_does_not_support(sq: Queue, kind: str, opts: dict[str, Any],
                                           ) -> None:
    with pytest.raises(NotSupported, match=next(iter(opts))):  # an InvalidOption
        sq.create_tube("t", kind, **opts)
    assert sq.tubes() == []


def test_put_and_take_options_a_driver_does_not_support(sq: Queue) -> None:
    t = sq.create_tube("t", "fifo")
    before = versions(t)
    with pytest.raises(NotSupported, match="ttl"):
        t.put({"n": 1}, ttl=5)
    with pytest.raises(NotSupported, match="sub-queue window"):
        t.take(window=2)
    assert versions(t) == before


@pytest.mark.parametrize("value", [-1, float("nan"), "10", True, None])
def test_bad_times(sq: Queue, value: object) -> None:
    if value is not None:
        with pytest.raises(InvalidOption):
            sq.create_tube("t", "fifottl", ttl=value)  # type: ignore[arg-type]
    t = sq.create_tube("t2", "fifottl")
    before = versions(t)
    for kwargs in ({"ttl": value}, {"ttr": value}, {"delay": value}):
        if value is None:
            continue
        with pytest.raises(InvalidOption):
            t.put({"n": 1}, **kwargs)  # type: ignore[call-overload]
    with pytest.raises(InvalidOption):
        t.take(timeout=-1)
    assert versions(t) == before


def test_bad_counts(sq: Queue) -> None:
    t = sq.create_tube("t", "fifottl")
    for bad in (0, -1, "3", 1.5, True):
        with pytest.raises(InvalidOption):
            t.take(bad)  # type: ignore[arg-type]
    for bad_count in (-1, "2", None):
        with pytest.raises(InvalidOption):
            t.kick(bad_count)  # type: ignore[arg-type]
    for bad_id in (-1, "1", 1.0, [1, "x"]):
        with pytest.raises(InvalidOption):
            t.ack(bad_id)  # type: ignore[arg-type]


def test_payload_schema_must_fit_the_tube(sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("t", "fifo")
    t.put({"url": "a.com", "depth": 1})
    t.take()
    before = versions(t)
    with pytest.raises(SchemaMismatch, match="depth"):
        t.put({"url": "b.com", "depth": "deep"})
    with pytest.raises(SchemaMismatch, match="extra"):
        t.put(spark.createDataFrame([("c", 1, 2)], "url string, depth long, extra int"))
    with pytest.raises(SchemaMismatch):
        t.put(5)
    assert versions(t) == before
    # a subset of the fields, and a narrower integer, are fine
    assert t.put({"url": "d.com"}).data == {"url": "d.com", "depth": None}
    assert t.put(spark.createDataFrame([("e", 2)], "url string, depth int")).count() == 1


def test_tube_registry(sq: Queue, spark: SparkSession) -> None:
    sq.create_tube("a", "fifo")
    sq.create_tube("b", "fifottl", ttl=10)
    assert sq.tubes() == ["a", "b"]
    with pytest.raises(TubeExists):
        sq.create_tube("a")
    again = sq.create_tube("a", "fifottl", if_not_exists=True)
    assert again.type == "fifo"  # the existing tube keeps its type
    events: list[str] = []
    found = sparkqueue.connect(spark, sq.root).create_tube(
        "a", if_not_exists=True, on_task_change=lambda _, event: events.append(event))
    found.put({"n": 1})
    assert events == ["put"], "an existing tube's callback is set all the same"
    with pytest.raises(TubeNotFound, match="existing tubes: a, b"):
        sq.tube("c")
    other = sparkqueue.connect(spark, sq.root)
    assert other.tube("b").options["ttl"] == 10
    with pytest.raises(TubeNotFound):
        other.statistics("nosuch")


def test_a_callback_hears_the_changes_made_through_any_queue_of_the_process(
        sq: Queue, spark: SparkSession) -> None:
    events: list[str] = []
    sq.create_tube("a").on_task_change(lambda _, event: events.append(event))
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b")
    other.tube("a").put({"n": 1})
    assert events == ["put"], "a change through another Queue of the root"
    assert other.tube("a").on_task_change(None) is not None, "one callback, shared"
    sq.tube("a").put({"n": 2})
    assert events == ["put"]


def test_racing_creators_end_with_one_tube_and_one_tube_exists(
        sq: Queue, spark: SparkSession) -> None:
    outcomes: list[str] = []

    def create() -> None:
        q = sparkqueue.connect(spark, sq.root)
        try:
            q.create_tube("race", "fifo")
            outcomes.append("created")
        except TubeExists:
            outcomes.append("exists")

    threads = [threading.Thread(target=create) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(outcomes) == ["created", "exists"]
    assert sq.tubes() == ["race"]


def test_a_creator_whose_registry_snapshot_misses_a_tube_registered_meanwhile_gets_tube_exists(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """The accelerated engine appends a new tube's registry row in a commit that read
    the whole registry: a tube registered after its snapshot makes it conflict,
    and the retry finds the name."""
    other = sparkqueue.connect(spark, sq.root)
    real = AcceleratedStore.append_if
    calls: list[str] = []

    def racing(self: AcceleratedStore, path: str, row: dict[str, Any], tag: Any,
               absent: Callable[[int], bool]) -> bool | None:
        calls.append(json.loads(row["options"])["temporary"] and "other" or row["type"])

        def then_another(version: int) -> bool:
            found = absent(version)
            other.create_tube("race", "fifottl", temporary=True)  # commits after the snapshot
            return found
        return real(self, path, row, tag, then_another if len(calls) == 1 else absent)

    monkeypatch.setattr(AcceleratedStore, "append_if", racing)
    with pytest.raises(TubeExists):
        sq.create_tube("race", "fifo")
    assert calls == ["fifo", "other", "fifo"], "the first append conflicted, the retry found it"
    assert sq.tube("race").type == "fifottl", "the other creator's tube"
    registry = spark.read.format("delta").load(f"{sq.root}/_registry")
    assert registry.where("name = 'race'").count() == 1


def test_a_create_reads_the_registry_once_where_nothing_registered_since(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """create_tube's first read of the registry answers whether the name is free at
    the version it read: the registering commit, checked against that same
    version, reads no more."""
    sq.create_tube("first", "fifo")
    reads: list[int | None] = []
    real = Layout.registry_at

    def counted(self: Layout, version: int | None = None) -> Any:
        reads.append(version)
        return real(self, version)

    monkeypatch.setattr(Layout, "registry_at", counted)
    sq.create_tube("second", "fifo")
    assert reads == [None], "one read, of the newest version"
    with pytest.raises(TubeExists):
        sq.create_tube("second", "fifottl")
    assert sq.tubes() == ["first", "second"]


def test_the_registry_checkpoints_as_rarely_as_a_tubes_tables(
        sq: Queue, spark: SparkSession) -> None:
    """Each create and drop is a registry commit; the commit that writes a checkpoint
    costs many times a plain one, so the registry is not left at Delta's every 10."""
    sq.create_tube("a", "fifo")
    for table in ("_registry", "tubes/a/tasks"):
        found = spark.sql(f"SHOW TBLPROPERTIES delta.`{sq.root}/{table}` "
                          "('delta.checkpointInterval')").first()
        assert found is not None and found["value"] == str(COMMITS_PER_CHECKPOINT), table


def test_a_registry_made_without_plain_files_still_registers_tubes(
        spark: SparkSession, root: str) -> None:
    """A registry whose settings let no file be written from the driver (one made
    before they were set) gets its rows by an insert-only MERGE."""
    spark.sql(f"CREATE TABLE delta.`{root}/_registry` (name string, type string, "
              "options string, created double) USING delta")
    sq = sparkqueue.connect(spark, root, engine="accelerated")
    sq.create_tube("a")
    with pytest.raises(TubeExists):
        sq.create_tube("a")
    assert sq.tubes() == ["a"]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{root}/_registry`").select("operation")
    assert {r[0] for r in history.collect()} == {"CREATE TABLE", "MERGE"}


class NewestFirst(FifoDriver):
    name = "newest"

    def choose(self, live: DataFrame, n: int, window: int) -> DataFrame:
        return live.where("eff = 'ready'").orderBy(live["task_id"].desc()).limit(n)


def test_custom_driver(sq: Queue) -> None:
    sq.register_driver("newest", NewestFirst)
    with pytest.raises(InvalidOption, match="already registered"):
        sq.register_driver("newest", NewestFirst)
    with pytest.raises(InvalidOption):
        sq.register_driver("bad", object)  # type: ignore[arg-type]
    t = sq.create_tube("n", "newest")
    first, second = (t.put({"n": i}).task_id for i in range(2))
    assert first_row(t.take())["task_id"] == second
    assert first < second


def test_errors_form_one_tree() -> None:
    for err in (TubeNotFound("x"), InvalidOption("x"), SchemaMismatch("x")):
        assert isinstance(err, QueueError)
    assert issubclass(InvalidOption, ValueError)


def test_owner_and_clock_are_validated(spark: SparkSession, root: str) -> None:
    with pytest.raises(InvalidOption):
        sparkqueue.connect(spark, root, owner="")
    with pytest.raises(InvalidOption):
        sparkqueue.connect(spark, root, clock=5)  # type: ignore[arg-type]
    q = sparkqueue.connect(spark, root)
    assert len(q.owner) == 32 and q.owner != sparkqueue.connect(spark, root).owner


def test_non_owner_release_touch_bury_are_refused(sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("own", "fifottl")
    task = t.put({"n": 1}).task_id
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock)
    other.tube("own").take()
    before = versions(t)
    verbs: list[Callable[[], Any]] = [
        lambda: t.release(task), lambda: t.touch(task, 5), lambda: t.bury(task),
        lambda: t.requeue(task), lambda: t.ack(task)]
    for verb in verbs:
        with pytest.raises(NotOwner) as err:
            verb()
        assert err.value.task_ids == [task]
    assert versions(t) == before
    assert first_row(t.peek(task))["owner"] == "consumer-b"


def test_bad_ids_write_nothing_even_with_puts_waiting_to_be_ingested(sq: Queue) -> None:
    t = sq.create_tube("ing", "fifo")
    t.put({"n": 1})  # still in the inbox: bury and delete would ingest it first
    before = versions(t)
    for verb in (t.bury, t.delete):
        with pytest.raises(InvalidOption):
            verb([1, -5])
    assert versions(t) == before


def test_id_lists_become_a_frame_of_exactly_those_ids(spark: SparkSession) -> None:
    """Ids (sorted, distinct) become a task_id frame holding exactly them, gaps and all."""
    ids = [0, 1, 2, 5, 7, 8, 9, 2**40]
    frame = store.id_frame(spark, ids)
    assert sorted(r.task_id for r in frame.collect()) == ids
    assert store.id_frame(spark, []).count() == 0


@pytest.mark.parametrize("runs_inline", [64, 1])
def test_id_lists_leave_exactly_those_ids_out(spark: SparkSession, runs_inline: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Left out as range filters (few runs) or by an anti-join (many): the same rows."""
    monkeypatch.setattr(store.schema, "RUNS_INLINE", runs_inline)
    frame = spark.range(12).withColumnRenamed("id", "task_id")
    kept = store.without_ids(frame, [0, 1, 2, 5, 7, 8, 11], spark)
    assert sorted(r.task_id for r in kept.collect()) == [3, 4, 6, 9, 10]
    assert store.without_ids(frame, [], spark).count() == 12
