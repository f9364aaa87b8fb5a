"""The sweeper: Queue.sweep, statistics history, maintenance, the job and the command."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import FakeClock, InvalidOption, Queue, Tube, cli
from sparkqueue.engine.records import live_tasks
from sparkqueue.session import submit_args
from sparkqueue.store import RETENTION_CHECK
from sparkqueue.sweep import cold_groups, compact, vacuum
from tests.conftest import ids, versions

from .jvm import short_lived

REPO = Path(__file__).parent.parent


def stored(spark: SparkSession, t: Tube) -> dict[int, str]:
    """The tasks table as stored (not as reads evaluate it): id -> status."""
    rows = spark.read.format("delta").load(t.context.layout.tasks(t.name)).where("task_id >= 0")
    return {r["task_id"]: r["status"] for r in rows.collect()}


def files_of(spark: SparkSession, t: Tube, where: str) -> set[str]:
    rows = (spark.read.format("delta").load(t.context.layout.tasks(t.name)).where(where)
            .select("_metadata.file_path").distinct().collect())
    return {r[0] for r in rows}


def test_sweep_writes_expiry_down_changes_no_answer_and_is_idempotent(
        spark: SparkSession, root: str, clock: FakeClock) -> None:
    # vacuum never (the spark-submit test runs it); compaction every hour
    config = dataclasses.replace(sparkqueue.load_config(), vacuum_interval=math.inf)
    sq = sparkqueue.connect(spark, root, owner="a", clock=clock, config=config)
    t = sq.create_tube("t", "fifottl")
    t.put([{"n": 0}, {"n": 1}], ttl=50)            # 0, 1: ttl ends at +50
    t.put([{"n": 2}, {"n": 3}], delay=10)          # 2, 3: delayed until +10
    t.put([{"n": 4}, {"n": 5}], ttr=5, pri=-1)     # 4, 5: taken first, leases of 5 s
    t.put({"n": 6})
    assert ids(t.take(2)) == [4, 5]
    t.bury(6)

    clock.advance(20)  # delays passed, leases ended, no ttl yet
    before = t.statistics()
    assert sq.sweep() == {"ttl": 0, "ttr": 2, "delay": 2, "purged": 7, "compacted": 0,
                          "vacuumed": 0}
    assert t.statistics() == before
    assert stored(spark, t) == {0: "ready", 1: "ready", 2: "ready", 3: "ready", 4: "ready",
                                5: "ready", 6: "buried"}

    written = versions(t)
    again = sq.sweep("t")
    assert again == dict.fromkeys(again, 0)
    assert versions(t) == written, "a second pass must change nothing"

    clock.advance(40)  # ttl of 0 and 1 ended
    before = t.statistics()
    assert before["tasks"]["done"] == 2 and before["calls"]["ttl"] == 2
    assert sq.sweep("t")["ttl"] == 2
    assert t.statistics() == before
    assert sorted(stored(spark, t)) == [2, 3, 4, 5, 6]

    history = sq.statistics_history("t").select(
        "tube", "ready", "buried", "done", "total", "tasks_expired", "leases_expired",
        "delays_ended", F.col("compacted").isNotNull().alias("compaction_due"),
        F.col("vacuumed").isNotNull().alias("vacuum_due"), F.col("calls")["ttr"].alias("ttr"))
    expected = spark.createDataFrame(
        [("t", 6, 1, 0, 7, 0, 2, 2, True, False, 2),      # compaction: first pass only
         ("t", 6, 1, 0, 7, 0, 0, 0, False, False, 2),
         ("t", 4, 1, 2, 5, 2, 0, 0, False, False, 2)],
        history.schema)
    assert_df_equality(history, expected)
    oldest = [r["oldest_ready_age"] for r in sq.statistics_history().collect()]
    assert oldest == [20.0, 20.0, 60.0]


def test_sweepers_beside_each_other_and_consumers_count_each_expiry_once(
        spark: SparkSession, root: str, clock: FakeClock) -> None:
    no_maintenance = dataclasses.replace(sparkqueue.load_config(), compact_interval=math.inf,
                                         vacuum_interval=math.inf)
    sq = sparkqueue.connect(spark, root, owner="a", clock=clock, config=no_maintenance)
    t = sq.create_tube("t", "fifottl")
    t.put([{"n": i} for i in range(12)], ttr=5)
    assert len(ids(t.take(12, owner="gone"))) == 12
    clock.advance(10)  # every lease ended: a sweeper or the next take writes each down

    other = sparkqueue.connect(spark, root, owner="sweeper-b", clock=clock, config=sq.config)
    swept: list[dict[str, int]] = []
    acked: list[int] = []
    errors: list[BaseException] = []

    def run(fn: Any) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def consume() -> None:
        while len(acked) < 12:
            got = ids(t.take(6))
            if got:
                t.ack(got)
                acked.extend(got)

    threads = [threading.Thread(target=run, args=(f,)) for f in (
        lambda: swept.append(sq.sweep("t")), lambda: swept.append(other.sweep("t")), consume)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    assert not errors, errors
    assert sorted(acked) == list(range(12)), "every task acked exactly once"
    stats = t.statistics()
    assert stats["calls"]["ttr"] == 12, "each ended lease counted once, by a sweeper or a take"
    assert sum(s["ttr"] for s in swept) <= 12
    assert stats["tasks"]["total"] == 0 and stats["calls"]["ack"] == 12


def test_compaction_rewrites_small_cold_files_only(
        sq: Queue, spark: SparkSession, clock: FakeClock) -> None:
    t = sq.create_tube("t", "fifottl", change_feed=True)
    for i in range(4):  # four ingests: four small files of buried tasks
        t.put([{"n": 2 * i}, {"n": 2 * i + 1}])
        t.bury([2 * i, 2 * i + 1])
    t.put([{"n": 8}, {"n": 9}])
    t.put({"n": 10})
    assert ids(t.take(1)) == [8]                 # 8 taken, 9 and 10 ready
    hot = files_of(spark, t, "status IN ('ready', 'taken')")
    cold = files_of(spark, t, "status = 'buried'")
    assert len(cold) >= 4
    everything = (live_tasks(t.context, clock()).select("task_id", "status", "data")
                  .orderBy("task_id"))
    before = everything.localCheckpoint()
    version = t.context.layout.latest_version(t.context.layout.tasks("t"))

    assert compact(t) == len(cold)
    assert len(files_of(spark, t, "status = 'buried'")) == 1, "one file for the run"
    assert files_of(spark, t, "status IN ('ready', 'taken')") == hot, "hot files untouched"
    assert_df_equality(everything, before)
    assert compact(t) == 0, "nothing left to compact"
    log = Path(t.context.layout.tasks("t").removeprefix("file:"), "_delta_log")
    newest = max(log.glob("*.json"))
    actions = [json.loads(line) for line in newest.read_text().splitlines()]
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    assert files and not any(a["dataChange"] for a in files), "a commit that changes no data"
    feed = (t.changes(starting_version=version + 1).writeStream.format("memory")
            .queryName("after_compaction").trigger(availableNow=True).start())
    feed.awaitTermination()
    assert spark.table("after_compaction").count() == 0, "compaction is no transition"
    assert t.statistics()["calls"]["bury"] == 8, "compaction counts as no call"


def test_cold_groups_are_small_cold_files_behind_the_head() -> None:
    def f(name: str, lo: int, hi: int, top: str = "buried", n: int = 10,
          live: int | None = None, soonest: float | None = None) -> dict[str, Any]:
        return {"file": name, "lo": lo, "hi": hi, "top": top, "n": n, "soonest": soonest,
                "live": live}

    files = [f("a", 0, 9), f("b", 10, 19, "delayed", soonest=5000.0), f("c", 20, 29, n=4_000),
             f("d", 30, 39, n=12_000), f("e", 40, 49, "done"), f("f", 50, 59, "taken", live=55),
             f("g", 60, 69), f("h", 70, 79, "ready", live=70)]
    # d is not small, f and h hold live tasks, g lies above the head (55)
    assert cold_groups(files, now=0.0) == [["a", "b", "c", "e"]]
    assert cold_groups(files, now=4990.0) == [["a", "c", "e"]], "b's delay ends within a minute"
    assert cold_groups([f("a", 0, 9), f("b", 10, 19)], now=0.0) == [["a", "b"]], "no head"
    many = [f(str(i), 10 * i, 10 * i + 9, n=4_000) for i in range(6)]
    assert cold_groups(many, now=0.0) == [["0", "1", "2", "3", "4"]], "at most 20,000 rows"


def _write_conf(path: Path, **sweeper: float) -> Path:
    lines = ["[sweeper]", *[f"{k} = {v}" for k, v in sweeper.items()]]
    path.write_text("\n".join(lines) + "\n")
    return path


def _submit(root: str, conf: Path, *args: str) -> subprocess.Popen[str]:
    env = short_lived(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    cmd = [str(Path(sys.executable).parent / "spark-submit"),
           "--properties-file", str(REPO / "conf" / "spark-submit.conf"), *submit_args(root),
           "--conf", f"{RETENTION_CHECK}=false",
           "--conf", "spark.sql.shuffle.partitions=2",
           str(REPO / "jobs" / "sweeper.py"), "--root", root, "--conf", str(conf), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _kill_after(proc: subprocess.Popen[str], marker: str) -> str:
    """SIGKILL ``proc`` as soon as it prints a line containing ``marker``."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)
    return "".join(seen)


@pytest.mark.slow
def test_sweeper_job_through_spark_submit_survives_sigkill(
        spark: SparkSession, root: str, tmp_path: Path) -> None:
    # tasks made due in real time by putting them with a clock 1,000 s in the past
    past = FakeClock(time.time() - 1000)
    sq = sparkqueue.connect(spark, root, owner="w", clock=past)
    t = sq.create_tube("jobs", "fifottl")
    for i in range(3):  # buried tasks in three small files; three cursor markers
        t.put({"n": i}, ttl=5000)
        t.bury(i)
    t.put([{"n": 3}, {"n": 4}], ttl=100, ttr=10)           # ttl ended
    t.put([{"n": 5}, {"n": 6}, {"n": 7}], ttl=5000, ttr=10)
    t.put({"n": 8}, ttl=5000, delay=10)                    # delay ended
    assert ids(t.take(4)) == [3, 4, 5, 6]                  # leases ended
    jobs = sparkqueue.connect(spark, root, owner="w").tube("jobs")  # the real clock
    expected = jobs.statistics()
    assert expected["calls"]["ttl"] == 2 and expected["calls"]["ttr"] == 2

    conf = _write_conf(tmp_path / "sweeper.toml", interval=0, compact_interval=0,
                       vacuum_interval=0, vacuum_retention_hours=0)
    # killed once its expiry committed: the next run purges, compacts, vacuums, snapshots
    _kill_after(_submit(root, conf, "--interval", "0"), "jobs: expired")
    done = _submit(root, conf, "--once")
    out, _ = done.communicate(timeout=300)
    assert done.returncode == 0, out
    assert "jobs: snapshot written" in out

    assert jobs.statistics() == expected, "sweeps and kills change no answer"
    assert stored(spark, jobs) == {0: "buried", 1: "buried", 2: "buried", 5: "ready",
                                   6: "ready", 7: "ready", 8: "ready"}
    assert len(files_of(spark, jobs, "status = 'buried'")) == 1, "buried files compacted"
    tables = jobs.context.layout
    assert spark.read.format("delta").load(tables.inbox("jobs")).count() == 0, "inbox purged"
    markers = spark.read.format("delta").load(tables.tasks("jobs")).where("task_id < 0")
    assert markers.count() == 1, "superseded cursor markers purged"
    history = sparkqueue.connect(spark, root).statistics_history("jobs").collect()
    assert len(history) == 1, "killed passes wrote no snapshot"
    row = history[0]
    assert (row["tasks_expired"], row["leases_expired"], row["delays_ended"]) == (0, 0, 0), \
        "the killed pass had written expiry down"
    assert (row["purged"], row["compacted"]) == (12, 3), "9 inbox rows, 3 markers; 3 files"
    assert (row["ready"], row["buried"], row["total"]) == (4, 3, 7)


def test_sweeper_command_line(sq: Queue, root: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    t = sq.create_tube("mail", "fifottl")
    t.put([{"to": "a"}, {"to": "b"}])
    t.bury(0)
    assert cli.main(["tubes", "--root", root]) == 0
    assert capsys.readouterr().out.split() == ["mail"]
    assert cli.main(["stats", "--root", root, "mail"]) == 0
    out = capsys.readouterr().out
    assert "tube mail" in out and "buried" in out
    assert cli.main(["peek", "--root", root, "mail", "0", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["0\tburied\t{'to': 'a'}",
                                                     "1\tready\t{'to': 'b'}"]
    assert cli.main(["kick", "--root", root, "mail", "5"]) == 0
    assert capsys.readouterr().out.strip() == "1"
    conf = _write_conf(tmp_path / "c.toml", compact_interval=3600, vacuum_interval=86400)
    assert cli.main(["sweep", "--root", root, "--once", "--conf", str(conf)]) == 0
    assert "swept: ttl=0" in capsys.readouterr().out

    assert cli.main(["peek", "--root", root, "nosuch", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "TubeNotFound" in err and "nosuch" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweeper]\nintervall = 5\n")
    assert cli.main(["tubes", "--root", root, "--conf", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert str(bad) in err and "intervall" in err and err.count("\n") == 0


@pytest.mark.parametrize("text, words", [
    ("[sweeper]\ninterval = -1\n", ["'interval'", "non-negative"]),
    ("[sweeper]\ncompact_interval = 'hourly'\n", ["'compact_interval'"]),
    ("[queue]\nroot = 5\n", ["'root'"]),
    ("[sweepr]\n", ["[sweepr]"]),
    ("[sweeper\n", ["not valid TOML"]),
])
def test_bad_conf_files_name_the_file_and_the_key(tmp_path: Path, text: str,
                                                  words: list[str]) -> None:
    path = tmp_path / "conf.toml"
    path.write_text(text)
    with pytest.raises(InvalidOption) as e:
        sparkqueue.load_config(path)
    for word in [str(path), *words]:
        assert word in str(e.value)
    with pytest.raises(InvalidOption, match="does not exist"):
        sparkqueue.load_config(tmp_path / "missing.toml")


def test_statistics_history_before_any_sweep_is_empty(sq: Queue) -> None:
    sq.create_tube("t")
    history = sq.statistics_history()
    assert history.count() == 0 and "leases_expired" in history.columns


def test_a_retention_under_deltas_guard_is_an_invalid_option(sq: Queue,
                                                              spark: SparkSession) -> None:
    """VACUUM with a retention Delta's check refuses (0 hours), where the session
    keeps the check: a typed error naming the setting, and no file deleted."""
    t = sq.create_tube("kept", "fifottl")
    t.put([{"n": 1}])
    was = spark.conf.get(RETENTION_CHECK, "true") or "true"
    spark.conf.set(RETENTION_CHECK, "true")
    try:
        with pytest.raises(InvalidOption, match="retention of 0 hours .*vacuum_retention_hours"):
            vacuum(t, 0.0)
    finally:
        spark.conf.set(RETENTION_CHECK, was)
    assert vacuum(t, 168.0) == 0
