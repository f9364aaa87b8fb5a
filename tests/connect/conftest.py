"""The tests here run as a Spark Connect client: ``spark`` is a session of a local
Spark Connect server with Delta, so every Queue runs the portable engine (no
JVM in this process is used for them)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube

from ..conftest import CLIENT_CONTRACT, CONTRACT_OPTIONS, contract_tube

#: The driver whose contract runs over Spark Connect: utube's windowed sub-queue
#: heads, with times.
CONNECT_DRIVERS = ["utubettl"]

#: The contract tests that run here: CLIENT_CONTRACT (tests/conftest.py). The
#: portable store runs the rest of the contract in a classic session (PORTABLE there).
#: On another Spark line (the compatibility tier, tests/compat.py) the same, but none
#: marked ``main_line_only`` (tests/conftest.py leaves those out: the catalog, the
#: demo and the command line; the client's verbs are what differs by line).


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The contract's client-side tests only (CLIENT_CONTRACT)."""

    def dropped_here(item: pytest.Item) -> bool:
        spec = getattr(item, "callspec", None)
        params = spec.params if spec is not None else {}
        name = getattr(item, "originalname", item.name)
        return "tube" in params and name not in CLIENT_CONTRACT
    dropped = [item for item in items if dropped_here(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not dropped_here(item)]


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
