"""The Delta log, read directly: versions, commit infos and tags, the inbox cursor
and put files (the commit files are Delta's public protocol; the data files'
statistics are :mod:`.filelog`'s).

Asking Delta (DESCRIBE HISTORY, a snapshot) costs one or more Spark jobs per
call; an operation needs the latest version and the version it committed, so
the JSON commit files are read through the Hadoop FileSystem instead.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ..errors import QueueError, StorageError
from . import schema
from .files import LogFiles, delta_log
from .filestats import stats_of
from .paths import Paths
from .schema import INGESTS, Cursor, PutFile, parse_tag


def commit_info(text: str) -> dict[str, Any] | None:
    """The ``commitInfo`` action of a commit file's text (None: it has none)."""
    for line in text.splitlines():
        if line.startswith('{"commitInfo"'):
            return dict(json.loads(line)["commitInfo"])
    return None



#: A data file's name as Spark and Delta write it: ``part-<task's partition>-<a UUID
#: of its own>-c<the task's file counter>`` then the extension.
_PART_NAME = re.compile(r"^part-(\d+)-.*-c(\d+)\.[^/]*$")


def is_of(key: str, ref: str) -> bool:
    """Whether the table path ``key`` is the table ``ref`` or in its folder ``ref``."""
    return key == ref or key.startswith(f"{ref}/")


def write_order(path: str) -> tuple[int, int, str]:
    """Where a file an append added comes in its rows' order: by the writing task's
    partition (the DataFrame's partition order), then by the task's file counter
    (a task that reached ``maxRecordsPerFile`` went on in a new file); its name
    alone where it is not such a name. Not the name: each file has a UUID of its
    own, so one task's files do not sort by name in the order it wrote them."""
    found = _PART_NAME.match(path.rsplit("/", 1)[-1])
    if found is None:
        return (-1, -1, path)
    return (int(found.group(1)), int(found.group(2)), path)


class LogReader(Paths):
    """The log-reading part of :class:`Layout`, with the caches it keeps per table.

    ``files`` reads the log's files: through Hadoop's FileSystem in a classic
    session's JVM, or through Spark's readers (:class:`.files.SparkFiles`).
    """

    def __init__(self, spark: SparkSession, root: str, files: LogFiles) -> None:
        super().__init__(spark, root)
        self.files = files
        self._versions: dict[str, int] = {}
        self._cursors: dict[str, tuple[int, Cursor]] = {}  # tasks path: (version seen, cursor)
        # inbox path: (anchor, version read up to, its put files, next id), see put_files
        self._put_files: dict[str, tuple[Cursor, int, list[PutFile], int]] = {}
        # inbox path: whether its rows carry their put's token, see inbox_has_tokens
        self._put_tokens: dict[str, bool] = {}
        # (table path, tag key): (version read up to, value), see last_tag_value
        self._tag_values: dict[tuple[str, str], tuple[int, int | None]] = {}
        # table path: {version: its commit file's text}, see commit_texts
        self._texts: dict[str, dict[int, str]] = {}

    def latest_version(self, path: str) -> int:
        """The newest committed version of the table at ``path``.

        A table that is not there (its ``_delta_log`` gone: deleted outside
        sparkqueue) is a :class:`StorageError`: every verb reads this before
        it writes, and a Delta append to a missing table would make a new,
        empty one in its place, losing its tasks without a word.
        """
        return self._newest_is(path, self.newest_version(path))

    def latest_versions(self, paths: list[str]) -> dict[str, int]:
        """:meth:`latest_version` of each of ``paths`` (table paths or names), in one
        look at their log files where the log's files allow it (the portable
        engine: one Spark job for a take's inbox and tasks table, not one each,
        on a catalog root too). A named table whose files are not where the
        catalog said is looked up again, on its own (:meth:`newest_version`)."""
        located = {p: where for p in paths if (where := self.location(p)) is not None}
        if len(set(located.values())) < len(paths):  # one not in the catalog: its error
            return {p: self.latest_version(p) for p in paths}
        texts: dict[str, dict[int, str]] = {}
        found = self.files.latest_versions(
            {located[p]: self._versions.get(p, -1) for p in paths}, texts)
        out = {}
        for path, where in located.items():
            if found[where] is None and where != path:  # moved: asked again
                out[path] = self.latest_version(path)
                continue
            self._keep_texts(path, texts.get(where, {}))
            out[path] = self._newest_is(path, found[where])
        return out

    def put_start(self, tube: str) -> tuple[Cursor, int]:
        """Where a put's task ids count from (a cursor), and the inbox version its
        commit comes after.

        Any cursor an ingest left counts a put's ids right (:meth:`put_files`
        reads the put commits after it), and any inbox version this process
        knows is behind the put's commit. So where this process knows both,
        the cursor at most :data:`schema.PUT_CURSOR_LAG` inbox commits behind,
        the put reads neither log first (a Spark job on the portable engine):
        it only makes sure the tasks table is there (:meth:`require`), as a put
        must not write into a tube whose tasks are gone; the inbox's append
        refuses a missing inbox itself. Otherwise it looks at both logs.
        """
        inbox, tasks = self.inbox(tube), self.tasks(tube)
        before, seen = self._versions.get(inbox), self._cursors.get(tasks)
        if (before is not None and seen is not None
                and before - seen[1].version <= schema.PUT_CURSOR_LAG):
            self.require(tasks)
            return seen[1], before
        newest = self.latest_versions([inbox, tasks])
        return self.cursor(tube, at=newest[tasks]), newest[inbox]

    def require(self, path: str) -> None:
        """Make sure the table ``path`` is there: Delta reads its schema, which is
        no Spark job. Where that fails, the table's log is read
        (:meth:`latest_version`: a missing table's :class:`StorageError`)."""
        try:
            self.read(path).schema  # noqa: B018 (the read is the check)
        except Exception:
            self.latest_version(path)
            raise

    def _newest_is(self, path: str, found: int | None) -> int:
        """Write down ``found`` as the newest version of ``path``; a table that is
        not there is an error (:meth:`latest_version`)."""
        if found is None or found < self._versions.get(path, -1):  # gone, or made anew
            self._texts.pop(path, None)
        if found is None:
            self._versions.pop(path, None)
            raise StorageError(path, "the Delta table is missing (no _delta_log): it was "
                               "deleted or moved outside sparkqueue, which never recreates "
                               "a tube's tables; restore it, or drop() the tube")
        self._versions[path] = found
        return found

    def known_version(self, path: str) -> int:
        """The version of the table at ``path`` that this process read last with
        :meth:`latest_version`, or committed itself since (:meth:`note_version`);
        read now when it knows none.

        For a reader that follows right after a write's own read of the
        newest version (a take's choice, after the ``before`` its commit is
        found from): the same answer without another probe, which is a Spark
        job on the portable engine. It may be a commit behind by then, as a
        fresh probe may be by the time the write commits: what it chooses
        is checked again inside the write's own transaction.
        """
        known = self._versions.get(path)
        return self.latest_version(path) if known is None else known

    def noted_version(self, path: str) -> int | None:
        """The version of the table at ``path`` this process knows (:meth:`known_version`),
        or None where it knows none: nothing is read."""
        return self._versions.get(path)

    def note_version(self, path: str, version: int) -> None:
        """Write down that the table at ``path`` has reached ``version`` (a commit
        this process made or found): :meth:`known_version` answers no older."""
        self._versions[path] = max(self._versions.get(path, -1), version)

    def note_first_cursor(self, path: str) -> None:
        """Write down the cursor at version 0 of the tasks table at ``path``, which
        this process has just made: the creation holds no ingest, so the cursor
        there is the first one, and :meth:`cursor` reads no commit file to learn
        it (a Spark job on the portable engine, in a new tube's first put)."""
        self._cursors[path] = (0, Cursor(0, 0))

    def newest_version(self, ref: str) -> int | None:
        """The newest version of the table ``ref``; None when there is none. (A
        named table whose files are not where they were is looked up again.)"""
        for _ in range(2):
            where = self.location(ref)
            texts: dict[int, str] = {}
            found = None if where is None else self.files.latest_version(
                where, self._versions.get(ref, -1), texts)
            if found is not None:
                self._keep_texts(ref, texts)
            if found is not None or where == ref or where is None:
                return found
            self.forget_location(ref)
        return None

    def forget(self, ref: str) -> None:
        """Drop what is cached of table ``ref``, or of the tables in folder ``ref``
        (a dropped tube)."""
        for cache in (self._versions, self._cursors, self._put_files, self._put_tokens,
                      self._texts):
            for key in [k for k in cache if is_of(k, ref)]:
                del cache[key]
        for tagged in [k for k in self._tag_values if is_of(k[0], ref)]:
            del self._tag_values[tagged]
        self.forget_location(ref)

    def log_file(self, ref: str, name: str) -> str:
        """The file ``name`` of the Delta log of the table ``ref``."""
        return delta_log(self.table_path(ref), name)

    def commit_text(self, path: str, version: int) -> str | None:
        """The JSON commit file of ``version`` of the table at ``path`` (None: not there)."""
        return self.commit_texts(path, range(version, version + 1)).get(version)

    def commit_texts(self, path: str, versions: range) -> dict[int, str]:
        """:meth:`commit_text` of each of ``versions`` that is there (one read for all).

        The newest :data:`schema.TEXTS_KEPT` commit files this reader read
        (here or in a probe of the newest version) are kept per table: a
        commit file never changes once written, and each is asked for more
        than once (a verb finds its own commit, then reads what it removed;
        the next verb's file statistics replay it). A table made anew at the
        same place is noticed when its log is found behind what was known
        (:meth:`latest_version`), and its kept texts are dropped.
        """
        kept = self._texts.get(path, {})
        found = {v: kept[v] for v in versions if v in kept}
        names = {self.log_file(path, f"{v:020d}.json"): v for v in versions if v not in found}
        if names:
            read = {names[f]: t for f, t in self.files.read_many(list(names)).items()}
            self._keep_texts(path, read)
            found.update(read)
        return found

    def _keep_texts(self, path: str, texts: dict[int, str]) -> None:
        """Keep ``texts`` (commit files of ``path`` by version), the newest
        :data:`schema.TEXTS_KEPT` of them."""
        if not texts:
            return
        kept = self._texts.setdefault(path, {})
        kept.update(texts)
        for version in sorted(kept)[:-schema.TEXTS_KEPT]:
            del kept[version]

    def read_text(self, path: str) -> str | None:
        """A small text file at ``path`` (None: not there)."""
        return self.files.read(path)

    def commit_infos(self, path: str, after_version: int,
                     upto: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        """``(version, commitInfo)`` of the commits after ``after_version``, oldest first."""
        last = self.latest_version(path) if upto is None else upto
        out = []
        texts = self.commit_texts(path, range(max(after_version + 1, 0), last + 1))
        for version, text in sorted(texts.items()):  # any gone: cleaned up by log retention
            info = commit_info(text)
            if info is not None:
                out.append((version, info))
        return out

    def commit_of(self, path: str, token: str,
                  after_version: int) -> tuple[int, dict[str, str]] | None:
        """The version and operation metrics of the commit tagged with ``token``, made
        after ``after_version``; None when there is none (Delta commits no UPDATE
        that changes nothing).

        The commit after ``after_version`` is read first: with no other writer
        between, it is the one, found without asking for the newest version.
        None there means no commit at all since (versions have no gaps).
        """
        first = after_version + 1
        text = self.commit_text(path, first)
        if text is None:
            return None
        info = commit_info(text)
        if info is not None and token in (info.get("userMetadata") or ""):
            self.note_version(path, first)
            return first, dict(info.get("operationMetrics") or {})
        for version, info in self.commit_infos(path, first):  # another writer's was first
            if token in (info.get("userMetadata") or ""):
                self.note_version(path, version)
                return version, dict(info.get("operationMetrics") or {})
        return None

    def history(self, path: str, after_version: int,
                upto: int | None = None) -> list[dict[str, Any]]:
        """sparkqueue-tagged commits after ``after_version`` (up to ``upto``; None: the
        newest): version, tag, operation metrics."""
        out = []
        for version, info in self.commit_infos(path, after_version, upto):
            tag = parse_tag(info.get("userMetadata"))
            if tag is not None:
                out.append({"version": version, "tag": tag,
                            "metrics": dict(info.get("operationMetrics") or {})})
        return out

    def cursor(self, tube: str, at: int | None = None) -> Cursor:
        """The last inbox version ingested into the tasks table, and the next task id:
        at the tasks table's version ``at`` (None: the newest).

        Ingests chain (each starts from the cursor the previous one left), so
        the newest ingest commit's tag (``upto``, ``next_id``, ``partial``) is the cursor:
        read from the log, from where this process last looked or, in a new
        process, back from the newest commit. Only when the log no longer
        holds an ingest (log retention) is the newest marker row read, with
        Spark. A tube whose whole log holds no ingest (a new one) is at
        version 0 (its creation), id 0.
        """
        path = self.tasks(tube)
        latest = self.latest_version(path) if at is None else at
        seen, cursor = self._cursors.get(path, (-1, Cursor(0, 0)))
        if seen > latest:  # this process has looked further: read back from ``at``
            seen, cursor = -1, Cursor(0, 0)
        if seen < latest:
            since = seen if seen >= 0 else max(-1, latest - schema.CURSOR_LOOKBACK)
            found = [h["tag"] for h in self.history(path, since, latest)
                     if h["tag"]["sq"] in INGESTS or "upto" in h["tag"]]  # (a truncate)
            if found and "next_id" not in found[-1]:
                raise QueueError(f"tube {tube!r} was made by an earlier sparkqueue (task ids "
                                 "from Delta row tracking), which this one does not read")
            if found:
                cursor = Cursor(int(found[-1]["upto"]), int(found[-1]["next_id"]),
                                int(found[-1].get("partial", 0)))
            elif since < 0 and self.commit_text(path, 0) is not None:
                cursor = Cursor(0, 0)  # the whole log read, no ingest in it: a new tube
            elif seen < 0:
                row = (self.read(path, version=latest)  # the newest marker: the lowest id
                       .where("task_id < 0").orderBy("task_id")
                       .select("inbox_version", "order_key", "taken_count").first())
                if row is not None:
                    cursor = Cursor(int(row[0]), int(row[1]), int(row[2] or 0))
            if latest >= self._cursors.get(path, (-1, cursor))[0]:
                self._cursors[path] = (latest, cursor)
        return cursor


    def put_files(self, tube: str, anchor: Cursor, upto: int) -> tuple[list[PutFile], int]:
        """The data files the inbox's put commits after ``anchor`` up to ``upto``
        added, in id order, each with its first task id; and the id after them.
        (The first ``anchor.partial`` rows of them are ingested already.)

        Ids count the rows put: the first file of a put commit starts where
        the previous commit's rows ended, files within a commit follow the
        order they were written in (:func:`write_order`), a row's id is its
        file's first id plus its place in the file. All of it is in
        the commit files (each ``add`` carries its row count, unless Delta's
        statistics are off: then one Spark count), so ids cost no Spark job,
        and an append needs no table feature that makes Delta read
        state at commit (row tracking does). Remembered per inbox from the last
        anchor: a producer whose puts nobody ingests yet reads each commit once.
        """
        inbox = self.inbox(tube)
        anchor = Cursor(anchor.version, anchor.next_id)  # ids count from here, whatever is partial
        known = self._put_files.get(inbox)
        if known is None or known[0] != anchor:
            known = (anchor, anchor.version, [], anchor.next_id)
        _, done, files, next_id = known
        if done >= upto:  # read further before: the files up to ``upto`` only
            later = [f.first_id for f in files if f.version > upto]
            return [f for f in files if f.version <= upto], (later[0] if later else next_id)
        files = list(files)
        texts = self.commit_texts(inbox, range(done + 1, upto + 1))
        for version in range(done + 1, upto + 1):
            text = texts.get(version)
            if text is None:
                raise QueueError(f"commit {version} of {inbox} is gone from the Delta log "
                                 "(log retention) before its puts were ingested")
            actions = [json.loads(line) for line in text.splitlines()]
            info: dict[str, Any] = next(
                (a["commitInfo"] for a in actions if "commitInfo" in a), {})
            tag = parse_tag(info.get("userMetadata"))
            if any("remove" in a for a in actions) and (tag or {}).get("sq") != "purge":
                raise QueueError(
                    f"commit {version} of {inbox} ({info.get('operation')}) rewrote inbox files: "
                    "task ids are places in the files puts wrote, so the inbox must not be "
                    "compacted or changed outside sparkqueue")
            if tag is None or tag["sq"] != "put":
                continue
            adds = sorted((a["add"] for a in actions if "add" in a),
                          key=lambda a: write_order(a["path"]))
            counts = self._row_counts(inbox, version, adds)
            for add, rows in zip(adds, counts, strict=True):
                files.append(PutFile(add["path"].rsplit("/", 1)[-1], version, next_id, tag["put"]))
                next_id += rows
        self._put_files[inbox] = (anchor, upto, files, next_id)
        return files, next_id

    def _row_counts(self, path: str, version: int, adds: list[dict[str, Any]]) -> list[int]:
        """Rows in each added file: its statistics, or (statistics off) a count with Spark."""
        counts = [stats_of(a.get("stats"))["rows"] for a in adds]
        if None not in counts:
            return [int(c) for c in counts]
        names = [a["path"].rsplit("/", 1)[-1] for a in adds]
        found: dict[str, int] = dict(self.read(path, version=version)
                                     .where(F.col("_metadata.file_name").isin(names))
                                     .groupBy("_metadata.file_name").count().collect())
        return [int(found.get(n, 0)) for n in names]

    def commit_files(self, path: str, version: int) -> tuple[list[str], list[str]] | None:
        """The data files the commit at ``version`` of ``path`` added and removed, as
        the log names them; None when its commit file is gone, or a file has
        a deletion vector (its rows are not all the file's)."""
        text = self.commit_text(path, version)
        if text is None:
            return None
        found: tuple[list[str], list[str]] = ([], [])
        for line in text.splitlines():
            action = json.loads(line)
            for kind, names in zip(("add", "remove"), found, strict=True):
                if kind in action:
                    if action[kind].get("deletionVector"):
                        return None
                    names.append(action[kind]["path"])
        return found


    def last_tag_value(self, path: str, key: str) -> int:
        """``key`` of the newest commit tag of the table at ``path`` that holds it; 0 when
        none does.

        Read back from the newest commit in a new process, then on from where
        this one last looked. Where log retention removed the commits before
        any that holds it, the latest version: a value counts commits that
        carry it, one each, so none recorded is above it (what it is for, a
        transaction id's version, needs only to grow).
        """
        latest = self.latest_version(path)
        seen, value = self._tag_values.get((path, key), (-1, None))
        if seen >= 0:
            found = [h["tag"][key] for h in self.history(path, seen) if key in h["tag"]]
            value = int(found[-1]) if found else value
        else:
            value = self._newest_tag_value(path, key, latest)
        self._tag_values[(path, key)] = (latest, value)
        return int(value or 0)

    def _newest_tag_value(self, path: str, key: str, latest: int) -> int | None:
        """:meth:`last_tag_value` read back from ``latest``, a few commits a read."""
        top = latest
        while top >= 0:
            versions = range(max(-1, top - 20) + 1, top + 1)
            texts = self.commit_texts(path, versions)
            for version in reversed(versions):
                text = texts.get(version)
                if text is None:
                    return latest
                tag = parse_tag((commit_info(text) or {}).get("userMetadata"))
                if tag is not None and key in tag:
                    return int(tag[key])
            top = versions.start - 1
        return None

    def inbox_has_tokens(self, tube: str) -> bool:
        """Whether the inbox rows of ``tube`` carry their put's token (``put_token``):
        every inbox made since the column was added does; puts write it and
        the portable purge deletes by it. Read from the table's schema, once."""
        inbox = self.inbox(tube)
        found = self._put_tokens.get(inbox)
        if found is None:
            found = self._put_tokens[inbox] = "put_token" in self.read(inbox).columns
        return found
