"""The sweeper as a Spark Connect client runs it (the portable engine): expiry is
written down once and changes no answer; the statistics history is kept."""

from __future__ import annotations

import dataclasses
import math

from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock

from ..conftest import ids


def test_a_sweep_over_connect_writes_expiry_down_once(
        spark: SparkSession, root: str, clock: FakeClock) -> None:
    config = dataclasses.replace(sparkqueue.load_config(), vacuum_interval=math.inf)
    sq = sparkqueue.connect(spark, root, owner="a", clock=clock, config=config)
    assert sq.engine == "portable"
    t = sq.create_tube("t", "fifottl")
    t.put([{"n": 0}, {"n": 1}], ttl=50)            # 0, 1: ttl ends at +50
    t.put([{"n": 2}], delay=10)                    # 2: delayed until +10
    t.put([{"n": 3}], ttr=5, pri=-1)               # 3: taken first, a lease of 5 s
    assert ids(t.take(1)) == [3]

    clock.advance(20)  # the delay passed, the lease ended, no ttl yet
    before = t.statistics()
    counts = sq.sweep()
    assert {k: counts[k] for k in ("ttl", "ttr", "delay")} == {"ttl": 0, "ttr": 1, "delay": 1}
    assert counts["compacted"] == 0, "no compaction without the accelerator"
    assert counts["purged"] == 4, "the ingested puts' inbox rows, by a DELETE"
    assert t.statistics() == before
    again = sq.sweep("t")
    assert {k: again[k] for k in ("ttl", "ttr", "delay")} == {"ttl": 0, "ttr": 0, "delay": 0}

    clock.advance(40)  # the ttl of 0 and 1 ended
    assert sq.sweep("t")["ttl"] == 2
    assert sorted(r["task_id"] for r in t.peek([2, 3]).collect()) == [2, 3]
    history = sq.statistics_history("t").select("ready", "done", "total").collect()
    assert [tuple(r) for r in history] == [(4, 0, 4), (4, 0, 4), (2, 2, 2)]
