"""A table's data files: their statistics from the Delta log alone (the checksum
file Delta writes beside a commit, the last checkpoint, and the commit files
since: each ``add`` carries its file's statistics), the columns they hold, and
the groups of them that this process's takes leased."""

from __future__ import annotations

import json
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from . import schema
from .files import LogFiles
from .filestats import FileGroup, file_entry, live_files, whole_files
from .log import LogReader, is_of
from .schema import TASK_TABLE_COLUMNS


class FileLog(LogReader):
    """:class:`LogReader` with each table's data files and their statistics, kept
    per table from this process's last look, and the files its takes leased."""

    def __init__(self, spark: SparkSession, root: str, files: LogFiles) -> None:
        super().__init__(spark, root, files)
        # tasks path: (version, {data file: its statistics}), see files_at
        self._stats_by_file: dict[str, tuple[int, dict[str, dict[str, Any]]]] = {}
        # tasks path: {data file: (its group of files, their task ids)}, see note_leased
        self._leased: dict[str, dict[str, FileGroup]] = {}
        # tasks path: its columns as its data files hold them, see task_file_schema
        self._file_schemas: dict[str, T.StructType] = {}

    def forget(self, ref: str) -> None:
        super().forget(ref)
        for cache in (self._stats_by_file, self._file_schemas):
            for key in [k for k in cache if is_of(k, ref)]:
                del cache[key]

    def note_files(self, path: str, version: int, files: dict[str, dict[str, Any]]) -> None:
        """Write down ``files`` (:meth:`files_at`, every file) as the data files of
        ``path`` at ``version``, read otherwise (a snapshot's state)."""
        self._stats_by_file[path] = (version, files)

    def files_at(self, path: str, version: int, live: bool = True,
                 ) -> dict[str, dict[str, Any]] | None:
        """Per data file of ``path`` at ``version``: its statistics (``rows`` and
        :data:`FILE_STATS`) and ``size``; None when they are not known without
        a Spark job. ``live``: without the files of settle rows and of the
        lease records they close (:func:`filestats.live_files`), which hold
        no task and no lease: every choice reads these.

        Known from this process's last look, moved on through the commit
        files since (each ``add`` carries its file's statistics, each
        ``remove`` names a file gone), or from the checksum file Delta writes
        beside the commit (it lists every file of a table of few enough
        files): no Spark job, so a consumer does not pay the state job once
        per batch.
        """
        cached = self._stats_by_file.get(path)
        files = self._replay(path, *cached, version) if cached is not None else None
        if files is None:
            files = self._checksum_files(path, version)
        if files is not None and (cached is None or version >= cached[0]):
            self._stats_by_file[path] = (version, files)
        return live_files(files) if files is not None and live else files

    def task_file_schema(self, path: str, spark: SparkSession) -> T.StructType | None:
        """The columns of the tasks table at ``path``, for reading its data files
        without a Spark job to infer them from a file; None until the table
        has its payload column (the first put gives it, and no later one
        changes it). Read from the Delta table's schema, once."""
        found = self._file_schemas.get(path)
        if found is None:
            fields = self.read(path, spark).schema.fields
            if "data" not in [f.name for f in fields]:
                return None
            found = T.StructType([f for f in fields if f.name in TASK_TABLE_COLUMNS])
            self._file_schemas[path] = found
        return found

    def note_leased(self, path: str, names: list[str], ids: list[int]) -> None:
        """Write down that the data files ``names`` of the tasks table at ``path``,
        which this process wrote, hold the tasks ``ids`` together and no others
        (a take's leased tasks, whose ids need not be a run): their ack may
        then remove them whole (:meth:`whole_leased_files`). The newest
        ``schema.LEASED_KNOWN`` files are kept."""
        known = self._leased.setdefault(path, {})
        group = (tuple(names), tuple(ids))
        for name in names:
            known[name] = group
        while len(known) > schema.LEASED_KNOWN:
            known.pop(next(iter(known)))

    def whole_leased_files(self, path: str, files: dict[str, dict[str, Any]], ids: list[int],
                           owner: str, now: float, step: int = 1) -> list[str] | None:
        """:func:`filestats.whole_files` of the tasks table at ``path``, with the
        groups of files this process knows the rows of (:meth:`note_leased`)."""
        return whole_files(files, ids, owner, now, step, self._leased.get(path))

    def checkpoint_stats(self, path: str, latest: int | None = None,
                         ) -> tuple[int, dict[str, dict[str, Any]]] | None:
        """Version ``latest`` of ``path`` (None: the newest) and :meth:`files_at` of
        it, from the Delta log alone: its last checkpoint (a Parquet file
        listing every file with its statistics, read in one Spark job) moved
        on through the commits since. What the portable engine has where the
        accelerator reads a snapshot's state. None where the checkpoint is not
        one classic Parquet file (multi-part, V2), is newer than ``latest``,
        or a file it needs is gone."""
        if latest is None:
            latest = self.latest_version(path)
        text = self.files.read(self.log_file(path, "_last_checkpoint"))
        base, files = -1, dict[str, dict[str, Any]]()
        if text is not None:
            last = json.loads(text)
            if last.get("parts") or last.get("v2Checkpoint"):
                return None
            base = int(last["version"])
            try:
                adds = (self.spark.read
                        .parquet(self.log_file(path, f"{base:020d}.checkpoint.parquet"))
                        .where("add IS NOT NULL").select("add.*"))
                rows = adds.select("path", "size", "stats", *(
                    ["deletionVector"] if "deletionVector" in adds.columns else [])).collect()
            except AnalysisException:  # gone, or written without statistics as JSON
                return None
            files = {str(r["path"]): file_entry(r.asDict()) for r in rows}
        found = self._replay(path, base, files, latest)
        return None if found is None else (latest, found)

    def _checksum_files(self, path: str, version: int) -> dict[str, dict[str, Any]] | None:
        """:meth:`files_at` from the checksum file of ``version``, when it lists the files."""
        text = self.files.read(self.log_file(path, f"{version:020d}.crc"))
        if text is None:
            return None
        summary = json.loads(text)
        listed = summary.get("allFiles")
        if listed is None or len(listed) != summary.get("numFiles"):
            return None
        return {a["path"]: file_entry(a) for a in listed}

    def _replay(self, path: str, version: int, files: dict[str, dict[str, Any]],
                upto: int) -> dict[str, dict[str, Any]] | None:
        """``files`` (the statistics at ``version``) moved on to ``upto`` by the
        commits between; None when a commit file is gone (log retention) or
        the log is behind ``version`` (the table was made anew at this path)."""
        if upto < version:
            return None
        if upto == version:
            return files
        files = dict(files)
        texts = self.commit_texts(path, range(version + 1, upto + 1))
        for v in range(version + 1, upto + 1):
            text = texts.get(v)
            if text is None:
                return None
            actions = [json.loads(line) for line in text.splitlines()]
            # removes first: a deletion vector re-adds the file it removes, by its path
            for action in actions:
                if "remove" in action:
                    files.pop(action["remove"]["path"], None)
            for action in actions:
                if "add" in action:
                    files[action["add"]["path"]] = file_entry(action["add"])
        return files

    def file_count(self, path: str, latest: int | None = None) -> int:
        """About how many data files the table has (at version ``latest``, None: the
        newest): the count in the newest of the last few commits' checksum
        files (-1: none of them has one).

        Delta writes ``<version>.crc`` with the table's file count beside most
        commits; reading it costs no Spark job (Delta's own accessor,
        ``numOfFilesIfKnown``, computes the snapshot's whole state for it).
        """
        if latest is None:
            latest = self.latest_version(path)
        for version in range(latest, max(-1, latest - 5), -1):
            text = self.files.read(self.log_file(path, f"{version:020d}.crc"))
            if text is not None:
                return int(json.loads(text).get("numFiles", -1))
        return -1
