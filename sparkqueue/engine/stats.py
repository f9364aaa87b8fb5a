"""statistics: task counts by state at the clock's now, call counts from the Delta log."""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import functions as F

from ..task import LIVE_STATES
from .context import TubeContext
from .ops import EXPIRY_COUNTS
from .records import live_tasks

#: Tarantool's statistics keys, always present.
CALL_KEYS = ("put", "take", "ack", "release", "bury", "kick", "delete", "touch", "ttl", "ttr",
             "delay")

#: How operations count in ``calls`` (others count under their own name).
CALL_NAME = {"release_all": "release", "dig": "kick"}

#: How a commit's rows count, for commits that are not one verb's MERGE (its rows
#: updated and deleted), DELETE (an ack that removed whole files, its rows deleted)
#: or UPDATE (a release, touch or bury that rewrote whole files, its rows updated):
#: a put counts the rows it wrote; a take that also acked a consumer's previous
#: batch counts its updates as takes and its deletes as acks; a take that replaced
#: whole files (``engine.take.take_files``) or ingested new puts (an append, with
#: maybe a consumer's acked files removed) counts what its tag says. A commit
#: whose rows are not its tasks (a lease record's settle row, or the DELETE of its
#: row) says how many tasks it changed in its tag's ``tasks``; a settle row that
#: closed nothing (:func:`closed`) counts none.
CALL_METRICS: dict[str, dict[str, tuple[str, ...]]] = {
    "put": {"put": ("numOutputRows",)},
    "take": {"take": ("numTargetRowsUpdated", "numUpdatedRows", "take")},
    "take+ack": {"take": ("numTargetRowsUpdated", "take"),
                 "ack": ("numTargetRowsDeleted", "ack")},
    "ingest+take": {"take": ("take",), "ack": ("ack",)},
}

#: Commits of the machinery, not of a Tarantool verb: they count no calls.
NOT_CALLS = frozenset({"ingest", "create", "payload", "truncate", "sweep", "purge", "settle"})

#: Operations whose tasks count as completed (``tasks.done``).
COMPLETING = ("ack", "delete", "done", "ttl")


def census(ctx: TubeContext, now: float) -> tuple[dict[str, dict[str, int]], float | None]:
    """Statistics at ``now``, and the creation time of the oldest ready task."""
    return census_of([ctx], now)


def census_of(contexts: list[TubeContext], now: float
              ) -> tuple[dict[str, dict[str, int]], float | None]:
    """:func:`census` of a tube's shards (one context each) added up, counted in
    one Spark job."""
    live = reduce(lambda a, b: a.unionByName(b), [
        live_tasks(ctx, now).select("eff", "status", "created") for ctx in contexts])
    rows = (live.groupBy("eff").agg(
        F.count("*").alias("n"),
        *[F.sum(F.when(F.col("status") == s, 1).otherwise(0)).alias(k)
          for k, s in EXPIRY_COUNTS.items() if k != "ttl"],
        F.min("created").alias("oldest"),
    ).collect())
    by_state = {r["eff"]: int(r["n"]) for r in rows}
    calls = dict.fromkeys(CALL_KEYS, 0)
    for ctx in contexts:
        for key, value in logged_calls(ctx).items():
            calls[key] = calls.get(key, 0) + value
    # expiries that happened but were not yet written down count at once
    for r in rows:
        if r["eff"] == "ready":
            calls["ttr"] += int(r["ttr"])
            calls["delay"] += int(r["delay"])
    calls["ttl"] += by_state.get("expired", 0)
    tasks = {s.value: by_state.get(s.value, 0) for s in LIVE_STATES}
    tasks["done"] = sum(calls.get(k, 0) for k in COMPLETING)
    tasks["total"] = sum(by_state.get(s.value, 0) for s in LIVE_STATES)
    oldest = next((float(r["oldest"]) for r in rows if r["eff"] == "ready"), None)
    return {"tasks": tasks, "calls": calls}, oldest


def logged_calls(ctx: TubeContext) -> dict[str, int]:
    """Call counts from both tables' commit logs, read incrementally.

    A commit counts the tasks it changed under its operation's name: the
    count its tag holds (``tasks``: a commit on a lease record's row changes
    one row for all its tasks), else the rows its metrics say it changed;
    and the expiries it wrote down (its tag's ttl, ttr and delay); commits
    of the machinery (ingest, sweep, purge, ...) count only the latter.
    """
    total: dict[str, int] = {}
    for path in (ctx.layout.inbox(ctx.key), ctx.layout.tasks(ctx.key)):
        seen, counts = ctx.stats_cache.get(path, (-1, {}))
        counts = dict(counts)
        for h in ctx.layout.history(path, seen):
            op = h["tag"]["sq"]
            seen = max(seen, h["version"])
            for k in EXPIRY_COUNTS:
                counts[k] = counts.get(k, 0) + int(h["tag"].get(k, 0))
            if op in NOT_CALLS:
                continue
            if "closes" in h["tag"] and not closed(ctx, path, h):
                continue  # a settle row that closed nothing: the verb went the MERGE's way
            if "tasks" in h["tag"]:  # its rows are not its tasks: a lease record's
                name = CALL_NAME.get(op, op)
                counts[name] = counts.get(name, 0) + int(h["tag"]["tasks"])
                continue
            found = {**h["metrics"], **h["tag"]}
            for name, keys in CALL_METRICS.get(op, {CALL_NAME.get(op, op): (
                    "numTargetRowsUpdated", "numTargetRowsDeleted", "numDeletedRows",
                    "numUpdatedRows")}).items():
                counts[name] = counts.get(name, 0) + sum(int(found.get(k, 0)) for k in keys)
        ctx.stats_cache[path] = (seen, counts)
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return total


def closed(ctx: TubeContext, path: str, commit: dict[str, Any]) -> bool:
    """Whether the settle row that ``commit`` (a :meth:`Layout.history` entry)
    appended closed its lease record: no commit between the version its verb
    read the record at (its tag's ``since``) and its own removed the record's
    file (its tag's ``closes``). A commit file gone (log retention) counts as
    none."""
    name = commit["tag"]["closes"]
    for version in range(int(commit["tag"]["since"]) + 1, commit["version"]):
        files = ctx.layout.commit_files(path, version)
        if files is not None and name in files[1]:
            return False
    return True
