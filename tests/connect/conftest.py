"""The tests here run as a Spark Connect client: ``spark`` is a session of a local
Spark Connect server with Delta, so every Queue runs the portable engine (no
JVM in this process is used for them)."""

from __future__ import annotations

import os

import pytest
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube

from ..conftest import COMPAT, CONTRACT_OPTIONS, contract_tube

#: The drivers whose contract runs over Spark Connect: the two take strategies
#: (fifo's head of ready tasks, utube's windowed sub-queue heads), with times.
CONNECT_DRIVERS = ["fifottl", "utubettl"]
#: The contract tests that fifottl runs here: those of take's order and choice.
#: (Every verb's other rules are the driver's own: utubettl runs them all here,
#: and every driver runs them all on the accelerated engine.)
FIFO_TAKES = {"test_fifo_order_and_ids_unique_forever",
              "test_take_n_lowest_ids_first_immutable_results_and_dataframes_of_tasks",
              "test_release_returns_task_to_its_place", "test_requeue_moves_task_to_the_end"}


#: What the compatibility tier (tests/compat.py) runs here on another Spark line, a
#: smoke test of the portable engine as a client of that line's server: the verbs
#: whose client-side code differs between lines (store/frames.py: a DataFrame put,
#: a take's frozen rows, DataFrames of task ids, refusals, statistics) on utubettl,
#: one notebook (they differ in what they do with the API, not in what Spark
#: runs), the demo and the command line, a sink, changes, a Consumer and a sweep.
#: The rest of the contract runs on the line's classic engine.
COMPAT_CONTRACT = {"test_put_take_ack_round_trip",
                   "test_dataframe_put_keeps_every_column_as_payload",
                   "test_take_n_lowest_ids_first_immutable_results_and_dataframes_of_tasks",
                   "test_only_the_owner_may_ack_and_a_refused_batch_writes_nothing",
                   "test_bury_kick_dig_delete", "test_statistics_canonical_script"}
COMPAT_NOTEBOOK = "quickstart.py"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """fifottl runs only the take tests (FIFO_TAKES) over Spark Connect; on another
    Spark line (the compatibility tier) the smoke test above."""
    compat = bool(os.environ.get(COMPAT))

    def dropped_here(item: pytest.Item) -> bool:
        spec = getattr(item, "callspec", None)
        params = spec.params if spec is not None else {}
        name = getattr(item, "originalname", item.name)
        if compat and "notebook" in params:
            return bool(params["notebook"].name != COMPAT_NOTEBOOK)
        if compat:
            return "catalog" in item.nodeid or (
                "tube" in params and (params["tube"] == "fifottl" or name not in COMPAT_CONTRACT))
        return params.get("tube") == "fifottl" and name not in FIFO_TAKES
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
