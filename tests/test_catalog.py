"""Tubes in a catalog: ``connect(spark, "catalog.schema")`` keeps every table as a
managed table of that schema, named, on both engines (Spark's own catalog here)."""

from __future__ import annotations

import dataclasses
import math
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, InvalidOption, StorageError, TubeExists, TubeNotFound

from .conftest import first_row, ids


def catalog_root() -> str:
    return f"spark_catalog.sq_{uuid.uuid4().hex[:12]}"


def tables(spark: SparkSession, root: str) -> list[str]:
    return sorted(str(r["tableName"]) for r in spark.sql(f"SHOW TABLES IN {root}").collect()
                  if not r["isTemporary"])


def managed(spark: SparkSession, name: str) -> bool:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    return any(r[0] == "Type" and r[1] == "MANAGED" for r in rows)


def walk_a_catalog_tube(spark: SparkSession, engine: str | None, clock: FakeClock) -> None:
    """Every kind of write and read a tube makes, on a catalog root: puts, takes
    (fresh and from the tasks table), acks, release, bury and kick, statistics,
    a sweep with its history, drop and a new tube of the same name."""
    root = catalog_root()
    config = dataclasses.replace(sparkqueue.load_config(), vacuum_interval=math.inf)
    sq = sparkqueue.connect(spark, root, owner="a", clock=clock, config=config, engine=engine)
    t = sq.create_tube("jobs", "utubettl")
    assert tables(spark, root) == ["jobs__inbox", "jobs__tasks", "sq_registry"]
    assert all(managed(spark, f"{root}.{n}") for n in tables(spark, root))
    with pytest.raises(TubeExists):                  # the catalog's names ignore case
        sq.create_tube("JOBS", "fifo")
    assert sq.tube("JOBS").name == "jobs"
    assert sq.create_tube("Jobs", "utubettl", if_not_exists=True).name == "jobs"

    first = ids(t.put([{"n": i} for i in range(4)], utube="u", ttr=5))
    assert first == [0, 1, 2, 3]
    assert ids(t.take(2)) == [0]                     # one sub-queue: one task at a time
    assert ids(t.ack(0)) == [0]
    assert ids(t.take(1)) == [1]
    t.bury(2)
    clock.advance(10)                                # 1's lease ended
    assert sq.sweep("jobs")["ttr"] == 1
    assert t.kick(5) == 1
    assert ids(t.take(3)) == [1]
    assert ids(t.release(1, delay=1)) == [1]
    assert t.statistics()["tasks"] == {"ready": 2, "taken": 0, "done": 1, "buried": 0,
                                       "delayed": 1, "total": 3}
    assert [r["total"] for r in sq.statistics_history("jobs").collect()] == [3]
    assert "sq_stats" in tables(spark, root)
    assert t.changes().isStreaming

    other = sparkqueue.connect(spark, root, owner="b", clock=clock, engine=engine)
    assert other.tubes() == ["jobs"]    # the registry, read by name
    assert first_row(other.tube("jobs").peek(3))["status"] == "ready"

    t.drop()
    assert tables(spark, root) == ["sq_registry", "sq_stats"]
    with pytest.raises(TubeNotFound):
        sq.tube("jobs")
    again = sq.create_tube("jobs", "fifottl")
    assert ids(again.put([{"n": 9}])) == [0]
    assert ids(again.take()) == [0]


def test_a_catalog_tube_on_the_accelerated_engine(spark: SparkSession, clock: FakeClock) -> None:
    """(The portable engine's run is tests/connect/test_catalog_over_connect.py.)"""
    walk_a_catalog_tube(spark, None, clock)


def test_a_dropped_table_is_a_storage_error_and_nothing_is_made_in_its_place(
        spark: SparkSession, clock: FakeClock) -> None:
    root = catalog_root()
    sq = sparkqueue.connect(spark, root, owner="a", clock=clock)
    t = sq.create_tube("t", "fifo")
    t.put([{"n": 1}])
    spark.sql(f"DROP TABLE {root}.t__inbox")
    with pytest.raises(StorageError, match="t__inbox"):
        t.put([{"n": 2}])
    assert "t__inbox" not in tables(spark, root)
    t.drop()                                         # a damaged tube can still be dropped
    assert tables(spark, root) == ["sq_registry"]


@pytest.mark.parametrize("root", ["queues.", "a.b.c.d", "my queues", "x;DROP"])
def test_a_root_that_is_neither_a_path_nor_a_schema_is_refused(
        spark: SparkSession, root: str) -> None:
    with pytest.raises(InvalidOption, match="catalog schema"):
        sparkqueue.connect(spark, root)


@pytest.mark.parametrize("engine", ["accelerated", "portable"])
def test_a_table_the_catalog_moved_is_found_where_it_now_is(
        spark: SparkSession, clock: FakeClock, engine: str, tmp_path: Path) -> None:
    """A tube's tasks table moved (its files copied elsewhere, the catalog pointed
    there, the old folder deleted) after this Queue remembered where it was: the
    next take looks where the catalog now says, takes from the moved table, and
    writes nothing where the table was."""
    root = catalog_root()
    sq = sparkqueue.connect(spark, root, owner="a", clock=clock, engine=engine)
    t = sq.create_tube("m", "fifo")
    t.put([{"n": i} for i in range(3)])
    assert ids(t.take(1)) == [0]
    name = f"{root}.m__tasks"
    old = Path(urlparse(location(spark, name)).path)
    moved = tmp_path / "moved_tasks"
    shutil.copytree(old, moved)
    spark.sql(f"ALTER TABLE {name} SET LOCATION '{moved.as_uri()}'")
    shutil.rmtree(old)
    assert ids(t.take(1)) == [1]
    assert ids(t.ack([0, 1])) == [0, 1]
    assert not old.exists(), "nothing written where the table was"
    assert urlparse(location(spark, name)).path == str(moved)
    assert t.statistics()["tasks"]["done"] == 2
    assert ids(t.take(1)) == [2]


def location(spark: SparkSession, name: str) -> str:
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {name}").collect()
    return next(str(r[1]) for r in rows if r[0] == "Location")
