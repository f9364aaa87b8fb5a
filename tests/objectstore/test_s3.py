"""Tubes on S3 (an ``s3a://`` root on a local S3-compatible server), each scenario a Spark
application of its own (tests/objectstore/s3_app.py) whose session sparkqueue built from
the AWS environment: every verb, and several writers that lose no commit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkqueue import objectstore
from sparkqueue.s3gateway import S3Gateway
from sparkqueue.server import ConnectServer
from sparkqueue.session import submit_args
from sparkqueue.store.lines import installed

from ..jvm import short_lived
from .s3_app import GO

pytestmark = pytest.mark.slow

APP = Path(__file__).parent / "s3_app.py"
REPO = APP.parents[2]


def start(gateway: S3Gateway, out: Path, *args: str,
          submit_root: str | None = None) -> subprocess.Popen[str]:
    """One scenario of s3_app.py in a new process, with the gateway's AWS environment:
    a Python process, or with ``submit_root`` a job started by spark-submit with the
    options ``sparkqueue submit-args --root`` gives for that root."""
    run = [sys.executable]
    if submit_root is not None:
        run = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
               "--properties-file", str(REPO / "conf" / "spark-submit.conf"),
               *submit_args(submit_root)]
    return subprocess.Popen([*run, str(APP), *args, str(out)],
                            env=short_lived(PYTHONPATH=str(REPO), **gateway.env),
                            text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def pass_go(first: subprocess.Popen[str], second: subprocess.Popen[str]) -> list[str]:
    """Read the first application's output up to its go line, and give the second
    that line; the output read."""
    assert first.stdout is not None and second.stdin is not None
    seen: list[str] = []
    for line in first.stdout:
        seen.append(line)
        if line.strip() == GO:
            second.stdin.write(line)
            second.stdin.flush()
            return seen
    raise AssertionError("the first application ended before its go:\n" + "".join(seen[-80:]))


def finish(app: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    output, _ = app.communicate(timeout=900)
    assert app.returncode == 0, output[-4000:]
    seen: dict[str, Any] = json.loads(out.read_text())
    return seen


def check_verbs(seen: dict[str, Any], root: str) -> None:
    """What the first application saw of every verb on ``root`` (s3_app.verbs)."""
    assert seen["root"] == root  # given as s3://, read as s3a://
    assert seen["first_take"] == [0, 1, 2]
    assert seen["sweep"]["ttr"] == 2 and seen["sweep"]["delay"] == 1
    # 0 acked and 4 deleted; 1's delay and 2's and 3's leases ended: the rest is ready
    assert seen["statistics"]["ready"] == seen["statistics"]["total"] == 4
    assert seen["statistics"]["done"] == 2
    assert seen["consumed"] == 4 and seen["left"] == 0
    assert seen["sunk"] == [0, 1, 2, 10, 11, 12]
    # the change feed streamed from S3; the portable engine on the same tube
    assert {"put", "take", "delete", "release", "touch"} <= set(seen["events"])
    # the log store's second write of one commit file is refused, the first kept; the
    # first's sent again (its answer lost) is known for its own
    assert seen["log_store"] == [
        "written", "java.nio.file.FileAlreadyExistsException", "written", '{"first":1}']
    # the log store lists a log from a version on in one request, where a listing of
    # the whole folder takes one per 5 keys here; what it returns is the folder's
    # entries from that version's commit file on, in order
    listing = seen["listing"]
    assert listing["requests"] == 1 and listing["folder_requests"] >= len(listing["folder"]) // 5
    assert len(listing["folder"]) > 10
    assert listing["listed"] == [n for n in listing["folder"] if n >= listing["from"]]
    assert listing["listed"][0] == listing["from"]
    assert listing["missing"] == "java.io.FileNotFoundException"
    # any other folder is listed whole (VACUUM lists a table's from "\u0000"), and
    # VACUUM finds the files the verbs removed
    assert listing["data"] == listing["data_folder"] and "_delta_log" in listing["data"]
    assert seen["vacuum"] > 0
    missing, denied = seen["errors"]["missing"], seen["errors"]["denied"]
    assert missing[0] == denied[0] == "StorageError"
    assert "s3a://no-such-bucket/q" in missing[1] and "does not exist" in missing[1]
    assert "s3a://denied/q" in denied[1] and "AWS_SECRET_ACCESS_KEY" in denied[1]


def test_on_s3_every_verb_works_and_two_applications_lose_no_commit_and_share_no_task(
        gateway: S3Gateway, tmp_path: Path) -> None:
    """On S3 roots, the first application runs the verbs, the sweeper, a Consumer, a
    sink and the change feed (:func:`check_verbs`) while the second runs the demo
    (put, take, ack, release, bury, peek, kick) and the portable engine. Then each
    makes 12 appends to one table through the log store, and 2 rounds of put,
    take and ack on one tube: every
    commit lands (25 versions: the first append, then 24), every task is taken
    once. The first is a spark-submitted job (spark-submit passes its stdout,
    not its stdin), started with the options
    ``sparkqueue submit-args`` prints for an S3 root. (One test, two
    applications: each start costs a JVM and Ivy.)"""
    root, table = gateway.root("shared"), gateway.root("appends/t")
    apps = [start(gateway, tmp_path / f"{who}.json", "writer", root.replace("s3a:", "s3:"),
                  table, "2", "12", who, submit_root=root if who == "first" else None)
            for who in ("first", "second")]
    pass_go(*apps)
    seen = [finish(app, tmp_path / f"{who}.json")
            for who, app in zip(("first", "second"), apps, strict=True)]
    check_verbs(seen[0], f"{root}-verbs")
    # the demo on an S3 root (the second ran it while the first ran the verbs)
    assert f"{root}-demo" in seen[1]["demo"] and "kicked: 1" in seen[1]["demo"]
    assert "took 4 tasks; acked 4" in seen[1]["demo"]
    assert seen[1]["portable"] == ["portable", 3, 3]  # the portable engine on S3
    assert {s["session_log_store"] for s in seen} == {"sparkqueue.delta.ConditionalPutLogStore"}
    assert max(len(s["versions"]) for s in seen) == 25
    assert sorted(max(seen, key=lambda s: len(s["versions"]))["versions"]) == list(range(25))
    taken = [t for s in seen for t in s["taken"]]
    assert len(taken) == len(set(taken)) == 2 * 2 * 5


def test_s3_settings_join_the_jars_already_set() -> None:
    """A local session's and a Spark Connect server's S3 settings come from one place,
    which adds the log store's jar to a ``spark.jars`` already set (conf/'s
    ``[spark]``, a server's ``conf``) rather than replacing it."""
    env = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "SECRET"}
    merged, packages = objectstore.session_settings(
        installed().delta_release(), env, {"spark.jars": "/opt/udfs.jar", "spark.master": "x"})
    first, log_store = merged["spark.jars"].split(",")
    assert first == "/opt/udfs.jar" and log_store.endswith(objectstore.JAR_NAME)
    assert merged["spark.master"] == "x" and merged["spark.hadoop.fs.s3a.access.key"] == "AKID"
    assert packages == [objectstore.hadoop_aws_package()]
    server = ConnectServer(s3=env, conf={"spark.master": "local[1]"})
    assert server.conf["spark.jars"].endswith(objectstore.JAR_NAME)
    assert server.conf["spark.delta.logStore.s3a.impl"] == objectstore.LOG_STORE
    assert server.conf["spark.master"] == "local[1]"
    assert objectstore.hadoop_aws_package() in server.packages
