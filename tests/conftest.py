"""One SparkSession for the whole run; a fresh queue root and fake clock per test.

A missing Java, Spark or Delta jar fails the session fixture, so every test
errors loudly: nothing here skips.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube
from sparkqueue.server import ConnectServer
from sparkqueue.session import remote_session

from .jvm import SMALL_DATA, use_for_tests

#: Set in the pytest process that runs tests/connect (and only there).
CONNECT_TESTS = "SPARKQUEUE_CONNECT_TESTS"

# The contract runs on every built-in driver. limfifottl is given a capacity here,
# so that every put also checks it; utube and utubettl put each task in a sub-queue
# of its own (OwnSubQueues). fifo keeps a change feed from creation
# (change_feed=True), the others none (the default until changes() is called):
# every verb's result is read from the tasks table either way, and this keeps both
# kinds of table tested.
# It runs once more on a fifottl tube of four shards (SHARDED): every verb routed to
# its shards, takes moving from shard to shard; and once more on a utubettl tube of
# the portable store in this classic session (PORTABLE): the whole contract on each
# store, but for the tests a Spark Connect client runs on the same driver and engine
# (CLIENT_CONTRACT, tests/connect).
DRIVERS = ["fifo", "fifottl", "limfifottl", "utube", "utubettl"]
SHARDED = "fifottl-4-shards"
PORTABLE = "utubettl-portable"
CONTRACT_OPTIONS: dict[str, dict[str, Any]] = {"fifo": {"change_feed": True},
                                               "limfifottl": {"capacity": 1000},
                                               SHARDED: {"shards": 4}}
#: The contract tests a Spark Connect client runs (tests/connect, on utubettl): those
#: whose client-side code differs between a classic session and a Spark Connect
#: client (store/frames.py: a DataFrame put, a take's rows, read at its commit, DataFrames of task
#: ids, refusals, statistics). PORTABLE leaves them to it.
CLIENT_CONTRACT = {"test_put_take_ack_round_trip",
                   "test_dataframe_put_keeps_every_column_as_payload",
                   "test_take_n_lowest_ids_first_immutable_results_and_dataframes_of_tasks",
                   "test_only_the_owner_may_ack_and_a_refused_batch_writes_nothing",
                   "test_bury_kick_dig_delete", "test_statistics_canonical_script"}
#: fifo, utube and limfifottl are fifottl or utubettl with rules taken away or
#: added: they run the contract tests those rules bear on, fifottl and utubettl
#: run them all. fifo and utube have no priorities or times (takes, releases,
#: requeue and urgent, meta, statistics), and fifo's tube keeps a change feed
#: (every writing verb); limfifottl's puts check the capacity, which acks,
#: deletes, done, truncation and drops free.
UNTIMED = {"test_put_take_ack_round_trip", "test_fifo_order_and_ids_unique_forever",
           "test_take_n_lowest_ids_first_immutable_results_and_dataframes_of_tasks",
           "test_release_returns_task_to_its_place", "test_requeue_moves_task_to_the_end",
           "test_bury_kick_dig_delete", "test_meta", "test_statistics_canonical_script"}
CONTRACT_SUBSETS = {
    "fifo": UNTIMED,
    "utube": UNTIMED,
    "limfifottl": {"test_put_take_ack_round_trip",
                   "test_dataframe_put_keeps_every_column_as_payload",
                   "test_bury_kick_dig_delete", "test_requeue_moves_task_to_the_end",
                   "test_done_completes_and_keeps_the_task", "test_truncate_and_drop",
                   "test_release_all", "test_statistics_canonical_script"},
    # the sharded tube: each way ShardedTube routes work (by id: ack, bury, delete and
    # their refusals, requeue, done; across shards: release_all, statistics, truncate
    # and drop; shard after shard: takes and kick); a put's payload and the events are
    # a shard's own (tests/test_shards.py has the rest: peek, meta, tasks_by_state)
    SHARDED: {"test_put_take_ack_round_trip", "test_fifo_order_and_ids_unique_forever",
              "test_take_n_lowest_ids_first_immutable_results_and_dataframes_of_tasks",
              "test_only_the_owner_may_ack_and_a_refused_batch_writes_nothing",
              "test_bury_kick_dig_delete", "test_requeue_moves_task_to_the_end",
              "test_done_completes_and_keeps_the_task", "test_release_all",
              "test_truncate_and_drop", "test_statistics_canonical_script"},
}
#: Set by the compatibility tier (tests/compat.py): on another Spark line fifottl runs
#: the verbs of the contract on the line's classic engine (COMPAT_FIFOTTL), the other
#: drivers and the sharded tube a round trip each (their own rules are Spark SQL that
#: every line runs alike; utubettl runs the client's contract over Spark Connect
#: there, tests/connect).
COMPAT = "SPARKQUEUE_COMPAT"
COMPAT_FIFOTTL = {"test_put_take_ack_round_trip",
                  "test_dataframe_put_keeps_every_column_as_payload",
                  "test_take_n_lowest_ids_first_immutable_results_and_dataframes_of_tasks",
                  "test_release_returns_task_to_its_place",
                  "test_only_the_owner_may_ack_and_a_refused_batch_writes_nothing",
                  "test_bury_kick_dig_delete", "test_requeue_moves_task_to_the_end",
                  "test_done_completes_and_keeps_the_task", "test_release_all",
                  "test_truncate_and_drop", "test_statistics_canonical_script"}
COMPAT_SUBSETS = {driver: {"test_put_take_ack_round_trip"}
                  for driver in [*DRIVERS, SHARDED, PORTABLE] if driver != "fifottl"} | {
                  "fifottl": COMPAT_FIFOTTL}


# pyspark runs one kind of session per process (its functions build classic or
# Spark Connect columns by which it is), so the Spark Connect tests run in a pytest
# process of their own: tests/test_spark_connect.py starts it.
collect_ignore = [] if os.environ.get(CONNECT_TESTS) else ["connect"]


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM of the run (the workers', the Connect server's, the applications
    the multi-process tests start) starts the tests' way: see tests/jvm.py."""
    use_for_tests()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What tests recorded as their ``summary`` property (the counts of the faults a
    fault test injected, say), printed after the run: kept on each test's report,
    so it reaches the summary from the workers of ``pytest -n`` too."""
    found = [(report.nodeid, value) for report in terminalreporter.stats.get("passed", [])
             for key, value in getattr(report, "user_properties", ()) if key == "summary"]
    if found:
        terminalreporter.section("summaries")
        for node, value in found:
            terminalreporter.write_line(f"{node}: {value}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """fifo, utube, limfifottl and the sharded tube run their part of the contract
    (CONTRACT_SUBSETS), the portable store all but CLIENT_CONTRACT; the
    compatibility tier leaves out tests marked ``main_line_only``. The
    tests that start other processes first: each runs for minutes, so with two
    workers (pytest -n 2) they start at once and the short ones fill in after,
    rather than one long test running alone at the end."""
    compat = bool(os.environ.get(COMPAT))

    def outside_subset(item: pytest.Item) -> bool:
        if compat and item.get_closest_marker("main_line_only") is not None:
            return True  # the compatibility tier: only what differs by Spark line
        spec = getattr(item, "callspec", None)
        driver = spec.params.get("tube") if spec is not None else None
        path = item.nodeid.split("::")[0]
        subsets = COMPAT_SUBSETS if compat and path.startswith("tests/contract") else (
            CONTRACT_SUBSETS)
        name = getattr(item, "originalname", item.name)
        if "contract" not in path:
            return False
        if driver == PORTABLE and not compat:
            return name in CLIENT_CONTRACT
        return driver in subsets and name not in subsets[driver]
    dropped = [item for item in items if outside_subset(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not outside_subset(item)]
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def spark_jobs(spark: SparkSession) -> int:
    """How many Spark jobs the session has run: one more than the newest job's id (ids
    count up from 0). Not the length of the status tracker's list, which keeps the
    newest ``spark.ui.retainedJobs`` only and stops growing in a long run."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None), default=-1) + 1


@contextmanager
def one_start_at_a_time() -> Iterator[None]:
    """Held while a JVM resolves Delta's package: test workers (pytest -n) start
    their Spark sessions and the Connect server one at a time, as Ivy's cache
    is not safe for two resolutions at once."""
    with open(Path(tempfile.gettempdir()) / "sparkqueue-tests-start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    with one_start_at_a_time():
        session = _local_session()
    yield session
    session.stop()


def _local_session() -> SparkSession:
    return sparkqueue.session(
        app_name="sparkqueue-tests",
        master="local[2]",
        conf={
            **SMALL_DATA,
            # a session that lives through ~200 tests holds a Delta log (and its
            # cached state) per table it touched: 1g ran out of heap
            "spark.driver.memory": "4g",
            # catalog tubes' managed tables (tests/test_catalog.py)
            "spark.sql.warehouse.dir": tempfile.mkdtemp(prefix="sparkqueue-warehouse-"),
        },
    )


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A local Spark Connect server with Delta (from pyspark's jars), for the tests of
    the portable engine as Spark Connect clients run it; stopped at the end."""
    log = tmp_path_factory.mktemp("connect") / "server.log"
    server = ConnectServer(conf={**SMALL_DATA, "spark.driver.memory": "3g",
                                 "spark.sql.warehouse.dir": str(log.parent / "warehouse")},
                           log=log)
    with one_start_at_a_time():
        server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def remote_spark(connect_server: ConnectServer) -> Iterator[SparkSession]:
    """A Spark Connect session to :func:`connect_server`."""
    spark = remote_session(connect_server.url)
    yield spark
    spark.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path / "queues")


@pytest.fixture
def sq(spark: SparkSession, root: str, clock: FakeClock) -> Queue:
    return sparkqueue.connect(spark, root, owner="consumer-a", clock=clock)


class OwnSubQueues:
    """A utube-type tube whose puts give each task a sub-queue of its own.

    The contract suite's expectations are about single tasks (lowest id first,
    release puts a task back in its place, ...); with one sub-queue per task
    they hold for the utube types as they do for fifo, and the suite checks
    every verb against them too. Sub-queue behaviour proper is in
    tests/drivers/test_utube.py.
    """

    def __init__(self, tube: Tube) -> None:
        self._tube = tube

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tube, name)

    def put(self, data: Any, **opts: Any) -> Any:
        opts.setdefault("utube", F.expr("uuid()"))
        return self._tube.put(data, **opts)

    def urgent(self, data: Any, **opts: Any) -> Any:
        opts.setdefault("utube", F.expr("uuid()"))
        return self._tube.urgent(data, **opts)


def contract_tube(sq: Queue, name: str, type_name: str, **options: Any) -> Tube:
    """A tube of ``type_name`` for driver-independent tests (see OwnSubQueues)."""
    tube = sq.create_tube(name, type_name.split("-")[0], **options)
    return OwnSubQueues(tube) if tube.driver.uses_utube else tube  # type: ignore[return-value]


@pytest.fixture(params=[*DRIVERS, SHARDED, PORTABLE])
def tube(request: pytest.FixtureRequest, sq: Queue) -> Tube:
    """A tube of each built-in driver (the contract suite runs against all), and one
    of the portable store (PORTABLE), on a Queue of the same root and clock."""
    if request.param == PORTABLE:
        portable = sparkqueue.connect(sq.spark, sq.root, owner=sq.owner, clock=sq.clock,
                                      engine="portable")
        assert portable.engine == "portable"
        return contract_tube(portable, "t", "utubettl")
    return contract_tube(sq, "t", request.param, **CONTRACT_OPTIONS.get(request.param, {}))


def versions(t: Tube) -> tuple[int, ...]:
    """The Delta versions of a tube's tables (two per shard): unchanged means nothing
    was written.

    Read from the tables' ``_delta_log`` directories: the newest commit file.
    """
    layout = t.context.layout
    return tuple(
        max((int(f.stem) for f in Path(p.removeprefix("file:"), "_delta_log").glob("*.json")),
            default=-1)
        for part in t.parts
        for p in (layout.inbox(part.context.key), layout.tasks(part.context.key))
    )


def first_row(df: DataFrame) -> Row:
    """The first row of ``df``, which must have one."""
    row = df.first()
    assert row is not None, "expected a row, found none"
    return row


def ids(df: object) -> list[int]:
    """Sorted task ids of a DataFrame result."""
    return sorted(r["task_id"] for r in df.collect())  # type: ignore[attr-defined]


def known_ids(t: Tube, df: DataFrame) -> list[int] | None:
    """The task ids the take that returned ``df`` wrote down from its commit (None:
    it did not, or ``df`` is not a take's result): what its ack uses unread."""
    return t.context.memory.taken_ids(df)


def commit_infos(t: Tube) -> dict[int, dict[str, Any]]:
    """The ``commitInfo`` of each commit of the tube's tasks table (a shard's, for a
    part of a sharded tube), by version, with its sparkqueue tag as ``tag``."""
    log = Path(t.context.layout.tasks(t.context.key)) / "_delta_log"
    infos = {}
    for f in log.glob("*.json"):
        info = next(json.loads(line)["commitInfo"] for line in f.read_text().splitlines()
                    if line.startswith('{"commitInfo"'))
        infos[int(f.stem)] = {**info, "tag": json.loads(info.get("userMetadata") or "{}")}
    return infos


def operations(t: Tube, after: int) -> list[tuple[str, str]]:
    """(Delta operation, sparkqueue op) of the tasks table's commits after ``after``."""
    return [(info["operation"], info["tag"]["sq"])
            for version, info in sorted(commit_infos(t).items()) if version > after]
