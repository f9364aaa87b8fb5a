"""A Spark application of its own for the S3 tests: its session is the one sparkqueue
builds for an S3 root from the AWS environment the test gives it.

    python s3_app.py writer ROOT TABLE ROUNDS APPENDS first|second OUT

one of two applications writing at once (see writer). Before that the first
runs the verbs, the sweeper, the Consumer, a sink and the change feed on an S3
root, checks the log store's listing and its refusal of a second writer, and
the typed errors for roots it cannot reach (see verbs); the second runs the
demo and the portable engine on S3 roots of their own.

Each writes what it saw to OUT as JSON, for the test to check. (pyspark runs
one JVM per process, and the test session's has no S3A: hence a process.)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import sparkqueue
from sparkqueue import FakeClock, QueueError
from sparkqueue.store import RETENTION_CHECK
from tests.conftest import one_start_at_a_time

#: one core and one shuffle partition per application: two run at once beside the tests
SMALL = {"spark.sql.shuffle.partitions": "1"}
#: what the first writer prints when the table and the tube are there
GO = "sparkqueue-s3-go"


def verbs(root: str) -> dict[str, Any]:
    bucket = root.split("/")[2]
    # a bucket of its own whose secret is wrong, as a second set of credentials would be
    with one_start_at_a_time():  # Ivy resolves S3A's and Delta's packages
        spark = sparkqueue.session(root=root, master="local[1]", conf={
            "spark.hadoop.fs.s3a.bucket.denied.secret.key": "wrong",
            # listings of 5 keys a request: a listing of a whole log folder shows
            "spark.hadoop.fs.s3a.paging.maximum": "5", **SMALL})
    seen: dict[str, Any] = {"errors": {}}
    for name, where in (("missing", "s3a://no-such-bucket/q"), ("denied", "s3a://denied/q")):
        try:
            sparkqueue.connect(spark, where)
        except QueueError as e:
            seen["errors"][name] = [type(e).__name__, str(e)]
    clock = FakeClock(1_700_000_000.0)
    sq = sparkqueue.connect(spark, root, owner="s3", clock=clock)
    seen.update(engine=sq.engine, root=sq.root, bucket=bucket)
    root = sq.root  # as Hadoop reads it (s3a://)
    t = sq.create_tube("jobs", "fifottl", ttr=30, change_feed=True)
    t.put([{"n": i} for i in range(6)])
    taken = t.take(3)
    seen["first_take"] = sorted(r["task_id"] for r in taken.collect())
    t.ack([0])
    t.release([1], delay=10)
    t.touch(t.take(1), 60)  # takes 3 (bury, peek and kick: the demo's, on S3 too)
    t.delete([4])
    clock.advance(100)  # the leases of 2 and 3 and the delay of 1 end
    seen["sweep"] = {k: v for k, v in sq.sweep().items() if isinstance(v, int)}
    seen["statistics"] = t.statistics()["tasks"]
    done = sparkqueue.Consumer(t, lambda batch: None, batch_size=10, take_timeout=0,
                               idle_timeout=0).run()
    seen["consumed"] = done.done
    seen["left"] = t.statistics()["tasks"]["total"]
    with tempfile.TemporaryDirectory() as landing:  # a sink, its checkpoint on S3
        for i in range(2):
            Path(landing, f"{i}.json").write_text("".join(
                json.dumps({"n": 10 * i + j}) + "\n" for j in range(3)))
        stream = spark.readStream.schema("n long").json(landing)
        t.sink(stream, f"{root}/checkpoints/jobs",
               trigger={"availableNow": True}).awaitTermination()
    seen["sunk"] = sorted(r["data"]["n"] for r in t.tasks_by_state("ready").collect())
    seen["listing"] = log_listing(spark, t.context.layout.tasks("jobs"))
    seen["vacuum"] = removable(spark, t.context.layout.tasks("jobs"))
    seen["events"] = change_events(spark, t)
    t.drop()
    seen["log_store"] = second_writer_refused(spark, f"{root}/probe/_delta_log/0.json")
    return seen


def portable(root: str) -> list[Any]:
    """The portable engine's put, take and ack on a tube of ``root``, in the second
    application's session: the engine, how many tasks it took and acked."""
    sq = sparkqueue.connect(None, root, owner="s3-portable", engine="portable")
    p = sq.create_tube("portable", "fifottl")
    p.put([{"n": i} for i in range(3)])
    got = [r["task_id"] for r in p.take(10).collect()]
    return [sq.engine, len(got), p.ack(got).count()]


def demo(root: str) -> str:
    """jobs/demo.py (what ``make demo`` runs) on ``root``, in this application: its output."""
    import contextlib
    import io
    import runpy

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = runpy.run_path(str(Path(__file__).parents[2] / "jobs" / "demo.py"))["main"](
            ["--root", root])
    assert code == 0
    return out.getvalue()


def removable(spark: Any, table: str) -> int:
    """How many files VACUUM with no retention would delete from ``table`` (a dry run):
    those the takes and acks removed."""
    spark.conf.set(RETENTION_CHECK, "false")
    try:
        return int(spark.sql(f"VACUUM delta.`{table}` RETAIN 0 HOURS DRY RUN").count())
    finally:
        spark.conf.unset(RETENTION_CHECK)


def change_events(spark: Any, t: sparkqueue.Tube) -> list[str]:
    """The events ``t.changes()`` streams (its change feed read from S3) up to now."""
    query = (t.changes(0).select("event").writeStream.format("memory").queryName("s3_changes")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return sorted({str(r[0]) for r in spark.table("s3_changes").collect()})


def log_listing(spark: Any, table: str) -> dict[str, Any]:
    """The log store's listing of ``table``'s log from its newest commit on (what
    Delta asks on every snapshot update) beside a listing of the whole log folder:
    the S3 LIST requests of each (S3A's statistics), what each returned, and what
    a listing of a log folder that is not there raised."""
    from py4j.protocol import Py4JJavaError

    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    log = jvm.org.apache.hadoop.fs.Path(f"{table}/_delta_log")
    fs = log.getFileSystem(conf)
    store = jvm.sparkqueue.delta.ConditionalPutLogStore(conf)

    def lists() -> int:  # a listing's first request, and those that continue it
        counters = fs.getIOStatistics().counters()
        return sum(int(counters.get(c) or 0)
                   for c in ("object_list_request", "object_continue_list_request"))

    before = lists()
    folder = sorted(str(f.getPath().getName()) for f in fs.listStatus(log))
    folder_requests, before = lists() - before, lists()
    newest = max(n for n in folder if n.endswith(".json") and n[:20].isdigit())
    listed = store.listFrom(jvm.org.apache.hadoop.fs.Path(log, newest), conf)
    names = []
    while listed.hasNext():
        names.append(str(listed.next().getPath().getName()))
    seen: dict[str, Any] = {"folder": folder, "folder_requests": folder_requests,
                            "from": newest, "listed": names, "requests": lists() - before}
    try:
        store.listFrom(jvm.org.apache.hadoop.fs.Path(f"{table}-gone/_delta_log/0.json"), conf)
    except Py4JJavaError as e:
        seen["missing"] = str(e.java_exception.getClass().getName())
    # a table's own folder from its first name on: what VACUUM lists
    data = store.listFrom(jvm.org.apache.hadoop.fs.Path(table, "\u0000"), conf)
    seen["data"] = sorted(str(data.next().getPath().getName()) for _ in iter(data.hasNext, False))
    seen["data_folder"] = sorted(str(f.getPath().getName()) for f in fs.listStatus(
        jvm.org.apache.hadoop.fs.Path(table)))
    return seen


def second_writer_refused(spark: Any, file: str) -> list[str]:
    """Write ``file`` through the log store twice, the second time as another writer
    would (a store of its own, nothing cached): what the second write raised, and
    the file's text after. The store checks nothing before its PUT: a refusal is
    the server's answer to ``If-None-Match: *``. Then the first's write once more,
    as S3A sends a PUT again whose answer was lost: refused by the server, and
    taken by the store as written (the file holds its text)."""
    from py4j.protocol import Py4JJavaError

    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(file)

    def write(text: str) -> str:
        store = jvm.sparkqueue.delta.ConditionalPutLogStore(conf)
        actions = jvm.java.util.ArrayList()
        actions.add(text)
        try:
            store.write(path, actions.iterator(), False, conf)
        except Py4JJavaError as e:
            return str(e.java_exception.getClass().getName())
        return "written"

    first, second = write('{"first":1}'), write('{"second":2}')
    again = write('{"first":1}')  # the first's PUT sent again: refused, and it is its own
    lines = jvm.sparkqueue.delta.ConditionalPutLogStore(conf).read(path, conf)
    return [first, second, again, str(lines.next())]


def writer(root: str, table: str, rounds: int, appends: int, first: bool) -> dict[str, Any]:
    """One of two applications writing at once: ``appends`` one-row Delta appends to
    ``table`` and ``rounds`` of put, take and ack on the tube ``jobs`` of ``root``,
    interleaved, then takes until the tube is empty. The ``first`` runs
    :func:`verbs` on a root of its own, makes the table and the tube, then
    prints :data:`GO`, which the other waits for on its stdin (one
    application start fewer than a test each)."""
    seen = verbs(f"{root}-verbs") if first else {}
    with one_start_at_a_time():  # Ivy resolves S3A's and Delta's packages
        sparkqueue.session(master="local[1]", conf=SMALL, root=root)  # unless verbs made it
        sq = sparkqueue.connect(None, root)  # the session for it, from the AWS environment
    spark = sq.spark
    if first:
        spark.range(1).write.format("delta").mode("append").save(table)
        sq.create_tube("jobs", "fifottl")
        print(GO, flush=True)  # the test passes it on to the second's stdin
    else:  # while the first runs the verbs: what `make demo DEMO_ROOT=s3a://...` runs
        seen["demo"] = demo(f"{root}-demo")
        seen["portable"] = portable(f"{root}-portable")
        assert sys.stdin.readline().strip() == GO
    t = sq.tube("jobs")
    taken: list[int] = []

    def take_and_ack() -> int:
        got = [int(r["task_id"]) for r in t.take(5).collect()]
        if got:
            t.ack(got)
        taken.extend(got)
        return len(got)

    for step in range(max(rounds, appends)):
        if step < appends:
            spark.range(1).write.format("delta").mode("append").save(table)
        if step < rounds:
            t.put([{"n": i} for i in range(5)])
            take_and_ack()
    while take_and_ack():  # and what the other application left
        pass
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("version").collect()
    return {**seen, "taken": taken, "versions": sorted(int(r[0]) for r in history),
            "session_log_store": spark.conf.get("spark.delta.logStore.s3a.impl")}


def main(argv: list[str]) -> int:
    what, *args = argv
    if what == "writer":
        seen = writer(args[0], args[1], int(args[2]), int(args[3]), args[4] == "first")
    else:
        raise SystemExit(f"unknown scenario {what!r}")
    with open(args[-1], "w") as f:
        json.dump(seen, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
