"""The portable store: public Spark SQL and Spark's readers only (:mod:`.protocol`),
so that it runs as a Spark Connect client, where Python has no JVM.

It commits no chosen data files (Delta's SQL cannot name files): the take's
and the settling verbs' planners then choose the statements that every Delta
runs, a MERGE or an UPDATE; the inbox is purged by a DELETE of put tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from ..errors import NotSupported
from .files import LogFiles
from .protocol import Files, Transaction
from .schema import CommitTag, Cursor, PutFile, parse_tag
from .tables import delete

if TYPE_CHECKING:
    from .log import LogReader

__all__ = ["PortableStore", "PURGE_TOKENS"]

#: Puts named by one DELETE of a purge of the inbox (:meth:`PortableStore.purge_inbox`).
PURGE_TOKENS = 1_000


class PortableStore:
    """The :class:`~sparkqueue.store.protocol.Store` of public Spark SQL, over the
    root's log reader ``log`` (a :class:`~sparkqueue.store.layout.Layout`)."""

    engine = "portable"
    commits_files = False

    def __init__(self, log: LogReader, files: LogFiles) -> None:
        self.log = log
        self.files = files

    def _cannot(self, what: str) -> NoReturn:
        raise NotSupported(f"the portable engine cannot {what}: Delta's SQL names no "
                           "data files (the planners never ask it to)")

    def begin(self, path: str, *, read_all: bool = False) -> Transaction:
        self._cannot(f"begin a transaction on {path}")

    def remove_files(self, path: str, choose: Callable[[Files], list[str] | None],
                     tag: CommitTag, rows: int | None = None) -> int | None:
        self._cannot(f"remove chosen files of {path}")

    def rewrite_files(self, path: str, names: list[str]) -> int:
        return 0

    def load_file_stats(self, path: str, latest: int) -> tuple[int, Files] | None:
        """From the log alone: its last checkpoint moved on through the commits
        since (:meth:`LogReader.checkpoint_stats`)."""
        return self.log.checkpoint_stats(path, latest)

    def listed_files(self, path: str, version: int) -> list[str] | None:
        return None  # a checksum read is a Spark job here: the table's read costs no more

    def purge_inbox(self, tube: str, cursor: Cursor, held: Sequence[PutFile] = ()) -> int:
        """A DELETE names the puts by the token each of their rows carries
        (``put_token``): a put's rows fill whole files, so Delta removes those
        files and rewrites none, and the rows not yet ingested keep their
        places (half their task ids). The tokens deleted are those in the
        table less those of the puts after ``cursor``, whose commits are read
        after the table: a put the read saw is ingested or among them (and
        when one of those commits is gone from the log, nothing is purged).
        An inbox made before its rows carried tokens is left as it is.
        ``held``: put files that lease records still read, kept whatever the
        cursor."""
        log = self.log
        if not log.inbox_has_tokens(tube):
            return 0
        inbox = log.inbox(tube)
        present = {r[0] for r in log.read(inbox).where("put_token IS NOT NULL")
                   .select("put_token").distinct().collect()}
        latest = log.latest_version(inbox)
        since = min([cursor.version, *[f.version - 1 for f in held]])
        infos = log.commit_infos(inbox, since, upto=latest)
        if [v for v, _ in infos] != list(range(since + 1, latest + 1)):
            return 0  # a commit after the cursor is gone from the log: its puts unknown
        tags = [parse_tag(info.get("userMetadata")) for _, info in infos]
        pending = {t.get("tok") for t in tags if t is not None and t["sq"] == "put"}
        done = sorted(present - pending)
        removed = 0
        for at in range(0, len(done), PURGE_TOKENS):
            chunk = ", ".join(f"'{t}'" for t in done[at:at + PURGE_TOKENS]
                              if re.fullmatch(r"[0-9a-f]{32}", t))
            if not chunk:
                continue
            tag = CommitTag.new("purge")
            before = log.latest_version(inbox)
            with log.tagged(tag) as sess:
                delete(sess, inbox, f"put_token IN ({chunk})")
            found = log.commit_of(inbox, tag.token, before)
            removed += int(found[1].get("numDeletedRows", 0)) if found else 0
        return removed
