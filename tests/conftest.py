"""One SparkSession for the whole run; a fresh queue root and fake clock per test.

A missing Java, Spark or Delta jar fails the session fixture, so every test
errors loudly: nothing here skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube

DRIVERS = ["fifo", "fifottl", "limfifottl"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = sparkqueue.session(
        app_name="sparkqueue-tests",
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            # C1-only JIT (-XX:TieredStopAtLevel=1) starts faster but made each op
            # ~35% slower here; a suite of many small MERGEs wants C2.
            "spark.sql.adaptive.enabled": "false",
        },
    )
    yield session
    session.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "queues")


@pytest.fixture
def sq(spark: SparkSession, root: str, clock: FakeClock) -> Queue:
    return sparkqueue.connect(spark, root, owner="consumer-a", clock=clock)


@pytest.fixture(params=DRIVERS)
def tube(request: pytest.FixtureRequest, sq: Queue) -> Tube:
    """A tube of each built-in driver (the contract suite runs against all)."""
    return sq.create_tube("t", request.param)


def versions(t: Tube) -> tuple[int, int]:
    """The Delta versions of a tube's two tables: unchanged means nothing was written."""
    layout = t._layout
    return tuple(  # type: ignore[return-value]
        DeltaTable.forPath(layout.spark, p).history(1).first()["version"]
        for p in (layout.inbox(t.name), layout.tasks(t.name))
    )


def ids(df: object) -> list[int]:
    """Sorted task ids of a DataFrame result."""
    return sorted(r["task_id"] for r in df.collect())  # type: ignore[attr-defined]
