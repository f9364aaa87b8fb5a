"""The tests here run as a Spark Connect client: ``spark`` is a session of a local
Spark Connect server with Delta, so every Queue runs the portable engine (no
JVM in this process is used for them)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube

from ..conftest import CONTRACT_OPTIONS, contract_tube

#: The drivers whose contract runs over Spark Connect: the two take strategies
#: (fifo's head of ready tasks, utube's windowed sub-queue heads), with times.
CONNECT_DRIVERS = ["fifottl", "utubettl"]


@pytest.fixture
def spark(remote_spark: SparkSession) -> SparkSession:
    return remote_spark


@pytest.fixture
def sq(remote_spark: SparkSession, root: str, clock: FakeClock) -> Queue:
    queue = sparkqueue.connect(remote_spark, root, owner="consumer-a", clock=clock)
    assert queue.engine == "portable"
    return queue


@pytest.fixture(params=CONNECT_DRIVERS)
def tube(request: pytest.FixtureRequest, sq: Queue) -> Tube:
    return contract_tube(sq, "t", request.param, **CONTRACT_OPTIONS.get(request.param, {}))
