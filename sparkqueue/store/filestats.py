"""What Delta's per-file statistics say about a tasks table: pure functions, no Spark.

A data file's statistics (row count, min and max per column, null counts)
bound what it may hold, so a take can find its choice, or that there is
nothing to choose, without reading data.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .schema import LEASE, MARKER, SETTLED
from .sql import id_runs

#: What :func:`head_bound` reads of a data file's statistics: key -> (kind, column).
FILE_STATS = {
    "min_status": ("minValues", "status"),
    "max_status": ("maxValues", "status"),
    "status_nulls": ("nullCount", "status"),
    "min_pri": ("minValues", "pri"),
    "max_pri": ("maxValues", "pri"),
    "min_order_key": ("minValues", "order_key"),
    "max_order_key": ("maxValues", "order_key"),
    "min_ttl_end": ("minValues", "ttl_end"),
    "max_ttl_end": ("maxValues", "ttl_end"),
    "ttl_end_nulls": ("nullCount", "ttl_end"),
    # and what :func:`whole_files` reads
    "min_task_id": ("minValues", "task_id"),
    "max_task_id": ("maxValues", "task_id"),
    "min_owner": ("minValues", "owner"),
    "max_owner": ("maxValues", "owner"),
    "owner_nulls": ("nullCount", "owner"),
    "min_lease_end": ("minValues", "lease_end"),
    # and what :func:`live_files` reads: the record a settle row closes
    "min_change_token": ("minValues", "change_token"),
    "max_change_token": ("maxValues", "change_token"),
}


#: The tasks table's columns whose per-file statistics Delta keeps: what FILE_STATS
#: reads, and the columns operations filter on (Delta skips files by them). Not
#: the payload, tokens, counters: collecting statistics costs every write, in
#: proportion to the columns it covers.
STATS_COLUMNS = sorted({col for _, col in FILE_STATS.values()}
                       | {"next_event", "delay_end", "change_token"})


def is_marker(f: dict[str, Any]) -> bool:
    """Whether a data file's statistics show a file of cursor markers alone."""
    return bool(f["min_status"] == MARKER == f["max_status"])


def is_record(f: dict[str, Any]) -> bool:
    """Whether a data file's statistics show a lease record's file (its one row)."""
    return bool(f["rows"] == 1 and f["min_status"] == LEASE == f["max_status"])


def is_settle_row(f: dict[str, Any]) -> bool:
    """Whether a data file's statistics show a settle row's file (its one row)."""
    return bool(f["rows"] == 1 and f["min_status"] == SETTLED == f["max_status"])


def settled_records(files: Mapping[str, dict[str, Any]]) -> set[str]:
    """The tokens of the lease records that settle rows among ``files`` (statistics
    per data file) close: a settle row's file holds it alone, and its
    ``change_token`` is the record's (a token is 32 characters, which Delta's
    statistics keep whole)."""
    return {f["min_change_token"] for f in files.values()
            if is_settle_row(f) and f["min_change_token"] is not None
            and f["min_change_token"] == f["max_change_token"]}


def live_files(files: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``files`` without settle rows' files and the files of the lease records they
    close: the files that may hold a live task or lease."""
    closed = settled_records(files)
    return {name: f for name, f in files.items()
            if not is_settle_row(f) and not (is_record(f) and f["min_change_token"] in closed)}


def may_hold_ready(f: dict[str, Any], now: float) -> bool:
    """Whether a data file's statistics (:meth:`Layout.files_at`) leave room for a
    row that :func:`ready_when` selects at ``now``: stored ``ready``, a delay
    that may have passed, or a lease that may have ended (a lease record's
    too: its tasks are then ready once it is written out). Unknown statistics
    leave room. A file whose every row's ttl has ended holds expired tasks
    only (the sweeper has not purged them yet), none ready. A take on a
    table where no file does finds nothing without reading it (a drain's
    last take, a consumer polling an empty tube).
    """
    lease = f["min_lease_end"]
    if f["min_status"] == LEASE == f["max_status"]:  # a record's ends are its tasks' least
        return lease is None or lease <= now
    ended = f["max_ttl_end"]
    if ended is not None and f["ttl_end_nulls"] == 0 and ended <= now:
        return False
    return may_hold(f, "ready") or may_hold(f, "delayed") or (
        (may_hold(f, "taken") or may_hold(f, LEASE)) and (lease is None or lease <= now))


def may_hold(f: dict[str, Any], status: str) -> bool:
    """Whether a data file's statistics leave room for a row stored with ``status``
    (unknown statistics do)."""
    lo, hi = f["min_status"], f["max_status"]
    if f["rows"] is None or lo is None or hi is None or f["status_nulls"]:
        return True
    return bool(f["rows"]) and lo <= status <= hi


#: The statistics :func:`all_ready` needs to place a file's ready tasks.
HEAD_KEYS = ("rows", "min_task_id", "max_task_id", "min_pri", "max_pri", "min_order_key",
             "max_order_key", "min_ttl_end")


def all_ready(f: dict[str, Any], now: float) -> bool:
    """Whether a data file's statistics show every row of it stored ``ready`` with
    its ttl running (so ready at ``now``), and where they are (:data:`HEAD_KEYS`)."""
    return (all(f[k] is not None for k in HEAD_KEYS) and bool(f["rows"])
            and f["min_status"] == "ready" == f["max_status"] and f["status_nulls"] == 0
            and f["min_ttl_end"] > now)


def ready_ahead(files: Iterable[dict[str, Any]], now: float, pri: int, key: int) -> int:
    """How many rows file statistics show ready at ``now`` and ahead of every task of
    priority ``pri`` or more whose order key is ``key`` or more (a put's tasks
    not yet ingested: their order key is their id, above every id stored):
    the rows of the files all ready (:func:`all_ready`) whose greatest ``pri``
    is below ``pri``, or equal to it with every ``order_key`` below ``key``."""
    return sum(f["rows"] for f in files if all_ready(f, now) and (
        f["max_pri"] < pri or (f["max_pri"] == pri and f["max_order_key"] < key)))


def head_bound(files: list[Any], now: float, n: int) -> str | None:
    """SQL bounding ``(pri, order_key)`` to where the ``n`` lowest ready tasks must be
    (:func:`head_key`), so that data skipping reads only the files that reach
    below it. None when the statistics show no such key."""
    key = head_key(files, now, n)
    return None if key is None else bound_sql(key)


def bound_sql(key: tuple[int, int]) -> str:
    """SQL: the row's ``(pri, order_key)`` is at or below ``key``."""
    pri, order_key = key
    return f"(pri < {pri} OR (pri = {pri} AND order_key <= {order_key}))"


def head_key(files: Iterable[dict[str, Any]], now: float, n: int) -> tuple[int, int] | None:
    """A ``(pri, order_key)`` at or below which the ``n`` lowest ready tasks must be.

    ``files`` are the tasks table's file statistics (:meth:`Layout.file_stats`).
    A file whose rows are all stored ``ready`` with no ttl passed holds
    ``numRecords`` ready tasks, none above its ``(max pri, max order_key)``.
    Walking such files by that upper bound until they hold ``n`` tasks gives
    a key with at least ``n`` ready tasks at or below it: the ``n`` lowest are
    there too. None when the statistics show no such key (few files, or none
    all ready).
    """
    certain = sorted((f["max_pri"], f["max_order_key"], f["rows"])
                     for f in files if all_ready(f, now))
    held = 0
    for pri, order_key, rows in certain:
        held += rows
        if held >= n:
            return int(pri), int(order_key)
    return None


def reaches(f: dict[str, Any], key: tuple[int, int]) -> bool:
    """Whether a data file's statistics leave room for a row at or below ``(pri,
    order_key)`` ``key`` (unknown statistics do)."""
    lo_pri, lo_key = f["min_pri"], f["min_order_key"]
    if lo_pri is None:
        return True
    return bool(lo_pri < key[0] or (lo_pri == key[0] and (lo_key is None or lo_key <= key[1])))


def ready_head(files: Iterable[dict[str, Any]], now: float, n: int,
               step: int = 1) -> tuple[int, int] | None:
    """The task ids ``lo..hi`` of the ``n`` lowest ``(pri, order_key, task_id)``
    tasks ready at ``now`` when file statistics alone show them: None otherwise.

    They show them when the lowest ready tasks fill whole files of every row
    stored ``ready`` (ttl running, so ready at ``now``) at one ``pri``, whose
    ids are each file's whole range and run on from file to file (ids ``step``
    apart: a shard's, see ``TubeContext.task_id``), ``n`` rows
    in all (or fewer when no other file can hold a ready task), and every
    other file that may hold a ready task (:func:`may_hold_ready`) comes
    after all of them: a higher ``pri``, or the same with ``order_key`` and
    ids above theirs. A drain's take on ingested files is so: it then needs
    no Spark job to choose, and the ids are one range (see ``engine.ops.update_range``).
    """
    ready = sorted((f for f in files if may_hold_ready(f, now)),
                   key=lambda f: (f["min_task_id"] is None, f["min_task_id"] or 0))
    if not ready or any(ready[0][k] is None for k in HEAD_KEYS):
        return None
    pri, lo = ready[0]["min_pri"], ready[0]["min_task_id"]
    hi, top_key, rows = lo - step, None, 0
    for at, f in enumerate(ready):
        whole = (all_ready(f, now) and f["min_pri"] == pri == f["max_pri"]
                 and f["min_task_id"] == hi + step
                 and f["max_task_id"] - f["min_task_id"] + step == f["rows"] * step)
        if not whole or rows + f["rows"] > n:
            rest = ready[at:]
            break
        hi, rows = f["max_task_id"], rows + f["rows"]
        top_key = f["max_order_key"] if top_key is None else max(top_key, f["max_order_key"])
        if rows == n:
            rest = ready[at + 1:]
            break
    else:
        rest = []
    if not rows or (rows < n and rest):
        return None
    for f in rest:  # after every chosen task
        if f["min_pri"] is None or f["min_order_key"] is None or f["min_task_id"] is None:
            return None
        if not (f["min_pri"] > pri or (f["min_pri"] == pri and f["min_order_key"] >= top_key
                                       and f["min_task_id"] > hi)):
            return None
    return lo, hi


def head_files(files: dict[str, dict[str, Any]], now: float, n: int,
               ) -> tuple[list[str], int, int, int] | None:
    """The data files that hold the ``n`` lowest ``(pri, order_key, task_id)`` tasks
    ready at ``now``, when file statistics alone show it: their names, how many
    rows they hold (all ready; at least ``n`` unless no other file may hold a
    ready task) and the least and greatest task id in them. None otherwise.

    Unlike :func:`ready_head`, the last file may hold more than the ones
    wanted: the choice among its rows is then the take's to make, in the
    job that writes it. They show it when these files hold every row
    stored ``ready`` with ttl running (so ready at ``now``), and every
    other file that may hold a ready task (:func:`may_hold_ready`) has its
    least ``(pri, order_key, task_id)`` above the greatest of theirs
    (column by column: every row of it then comes after every row of
    theirs). Ingest gives every task a ``pri`` and an ``order_key``, so
    their minimum and maximum bound every row.
    """
    ready = [(name, f) for name, f in files.items() if may_hold_ready(f, now)]
    if not ready or any(f[k] is None for _, f in ready for k in HEAD_KEYS):
        return None
    ready.sort(key=lambda nf: (nf[1]["min_pri"], nf[1]["min_order_key"], nf[1]["min_task_id"]))
    chosen, rows = [], 0
    for _, f in ready:
        if rows >= n:
            break
        if not all_ready(f, now):
            return None
        chosen.append(f)
        rows += f["rows"]
    top = (max(f["max_pri"] for f in chosen), max(f["max_order_key"] for f in chosen),
           max(f["max_task_id"] for f in chosen))
    if any((f["min_pri"], f["min_order_key"], f["min_task_id"]) <= top
           for _, f in ready[len(chosen):]):
        return None
    return ([name for name, _ in ready[:len(chosen)]], rows,
            min(f["min_task_id"] for f in chosen), top[2])


#: A group of data files a process wrote and the task ids they hold together (and no
#: others): see :func:`whole_files`.
FileGroup = tuple[tuple[str, ...], tuple[int, ...]]


def whole_files(files: dict[str, dict[str, Any]], ids: list[int], owner: str,
                now: float, step: int = 1, known: Mapping[str, FileGroup] | None = None,
                ) -> list[str] | None:
    """The data files whose rows are exactly the tasks ``ids``, all taken by
    ``owner`` with leases live at ``now``; None when ``ids`` are not such files'
    rows all together.

    An ack of ``ids`` may then remove those files whole, reading and writing
    no data (a take that flipped whole files, as a big take or a drain's does,
    leaves its tasks so). ``files``: the statistics per data file
    (:meth:`Layout.files_at`). A file qualifies when they show every row
    stored ``taken`` by ``owner`` (minimum = maximum; Delta keeps only a
    32-character prefix of strings, so a longer owner never matches), every
    lease and ttl ending after ``now``, and either its task ids between a
    minimum and maximum with every id between them in ``ids``, or it is one
    of a group of files ``known`` to hold certain ids together, all of them
    in ``ids`` (``known``: file name -> the group's files and their ids, as
    this process wrote them: a take of sub-queue heads leases ids that need
    not be a run); then all its rows are in ``ids``. Ids are distinct across
    files, so when the files' rows add up to ``len(ids)``, they are ``ids``
    exactly. A shard's ids are ``step`` apart. A lease record that a settle row
    closes (:func:`live_files`) holds no lease.
    """
    files = live_files(files)
    runs = id_runs(ids, step)
    starts = [lo for lo, _ in runs]
    names: list[str] = []
    covered = 0
    wanted: set[int] | None = None
    for name, f in files.items():
        if name in names or not held_by(f, owner, now):
            continue
        lo, hi = f["min_task_id"], f["max_task_id"]
        at = bisect.bisect_right(starts, lo) - 1 if lo is not None else -1
        if at >= 0 and hi <= runs[at][1]:
            names.append(name)
            covered += f["rows"]
            continue
        group, group_ids = (known or {}).get(name, ((), ()))
        wanted = set(ids) if wanted is None and group else wanted
        if group and wanted is not None and wanted.issuperset(group_ids) and all(
                g in files and g not in names and held_by(files[g], owner, now)
                for g in group):
            names.extend(group)
            covered += len(group_ids)
    return names if names and covered == len(ids) else None


def held_by(f: dict[str, Any], owner: str, now: float) -> bool:
    """Whether a data file's statistics show every row of it stored ``taken`` by
    ``owner``, its lease and ttl running at ``now``, and its ids' bounds; or
    that it is a lease record (one row, ``LEASE``) of ``owner``'s, running."""
    record = is_record(f)
    tasks = (f["min_task_id"] is not None and f["max_task_id"] is not None
             and f["min_status"] == "taken" == f["max_status"])
    return bool(f["rows"] and (record or tasks) and f["status_nulls"] == 0
                and f["min_owner"] == owner == f["max_owner"] and f["owner_nulls"] == 0
                and f["min_lease_end"] is not None and f["min_lease_end"] > now
                and f["min_ttl_end"] is not None and f["min_ttl_end"] > now)


def file_entry(add: dict[str, Any]) -> dict[str, Any]:
    """What :meth:`Layout.files_at` keeps of an ``add`` action: statistics and size.

    A file with a deletion vector has statistics of all its rows, deleted ones
    too, and reading it as Parquet would bring those back: its statistics
    are kept as unknown (``rows`` None), which no choice from statistics
    takes on trust."""
    entry = {**stats_of(add.get("stats")), "size": add.get("size")}
    if add.get("deletionVector") or '"tightBounds":false' in (add.get("stats") or ""):
        entry["rows"] = None
    return entry


def stats_of(stats_json: str | None) -> dict[str, Any]:
    """A file's :data:`FILE_STATS` from an ``add`` action's statistics JSON; no
    statistics: ``rows`` None. Delta writes non-finite doubles as the strings
    "Infinity", "-Infinity" and "NaN" (no status is spelled so)."""
    stats = json.loads(stats_json) if stats_json else {}
    out: dict[str, Any] = {"rows": stats.get("numRecords")}
    for key, (kind, col) in FILE_STATS.items():
        value = (stats.get(kind) or {}).get(col)
        out[key] = float(value) if value in ("Infinity", "-Infinity", "NaN") else value
    return out
