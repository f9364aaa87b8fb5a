"""Delta and Spark failures: conflicts to retry, guards that failed, missing tables."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import (
    InvalidState,
    NotOwner,
    QueueError,
    StorageError,
    TaskNotFound,
    Timeout,
    TubeNotFound,
)

CONFLICT_MARKERS = (
    "ConcurrentAppendException", "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException", "ConcurrentTransactionException",
    "MetadataChangedException", "ProtocolChangedException", "ConcurrentWriteException",
    "DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED",
    "sparkqueue:Stale", "FileAlreadyExistsException",
)


GUARD = re.compile(r"sparkqueue:(\w+):(-?\d+)")


class StaleChoice(Exception):
    """A choice that a concurrent commit made stale before it committed anything:
    choose again (retried like a conflict)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"stale choice: {what}")


def is_conflict(e: BaseException) -> bool:
    """Whether ``e`` is a Delta commit conflict (or a stale choice) worth retrying."""
    if isinstance(e, StaleChoice):
        return True
    text = f"{type(e).__name__} {e}"
    return any(m in text for m in CONFLICT_MARKERS)


#: What a catalog says of a table that is not there.
NO_TABLE = ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND", "NoSuchTableException")


def is_missing_table(e: BaseException) -> bool:
    """Whether ``e`` says a table is not there: at its path, or in its catalog."""
    text = str(e)
    return any(m in text for m in ("DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND",
                                   "is not a Delta table", "PATH_NOT_FOUND", *NO_TABLE))


def guard_failure(e: BaseException) -> tuple[str, int] | None:
    """The (kind, task_id) of a guard that failed inside a MERGE, if that is what ``e`` is."""
    m = GUARD.search(str(e))
    if m is None or m.group(1) == "Stale":
        return None
    return m.group(1), int(m.group(2))


R = TypeVar("R")


def retrying(fn: Callable[[], R], *, deadline: float, what: str,
             on_conflict: Callable[[], None] | None = None) -> R:
    """Run ``fn`` until it does not hit a Delta conflict, with jittered backoff.

    Conflicts never reach the caller while ``deadline`` (monotonic seconds)
    allows; after it, :class:`Timeout` says what kept conflicting. Each
    conflict retried is told to ``on_conflict``.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except QueueError:
            raise
        except Exception as e:
            if not is_conflict(e):
                raise
            attempt += 1
            if on_conflict is not None:
                on_conflict()
            pause = min(2.0, 0.05 * (2 ** min(attempt, 6))) * (0.5 + random.random())
            if time.monotonic() + pause > deadline:
                raise Timeout(
                    f"{what} kept conflicting with concurrent commits ({attempt} attempts)"
                ) from e
            time.sleep(pause)


#: What a file system says when a table cannot be written where it was asked for.
NOT_WRITABLE = ("DELTA_CANNOT_CREATE_LOG_PATH", "AccessDenied", "Permission denied",
                "ParentNotDirectory", "Not a directory", "Mkdirs failed", "Read-only file system")


#: A Java exception of the storage's (Hadoop's file systems, S3A, the AWS SDK, the
#: network) in an error's text: the line it starts, to its end.
STORAGE_CAUSE = re.compile(
    r"((?:[\w$]+\.)+[\w$]*(?:IOException|AWS\w*Exception|SdkClientException|S3Exception|"
    r"SocketException|SocketTimeoutException|ConnectException|UnknownHostException|"
    r"NoHttpResponseException)\b[^\n]*)")


def storage_failure(e: BaseException) -> str | None:
    """What failed in the storage, when ``e`` is a failure to read or write it (an S3
    error, a reset connection, an unreachable endpoint, retries given up): the
    deepest cause the storage raised, its first line. None for any other error."""
    if isinstance(e, QueueError):
        return None
    found = STORAGE_CAUSE.findall(str(e))
    return found[-1].strip()[:300] if found else None


#: What the storage says when waiting will not help: access refused, a bucket that
#: is not there, a file that is not the Parquet file the log names.
LASTING = ("AccessDenied", "Access Denied", "Status Code: 403", "Forbidden", "NoSuchBucket",
           "Permission denied", "is not a Parquet file")


def storage_error(where: str, e: BaseException, tube: str | None = None,
                  ) -> StorageError | None:
    """The :class:`StorageError` naming ``where`` (and ``tube``) for ``e`` when it is
    a failure of the storage (:func:`storage_failure`); None for any other error.
    It is ``transient`` unless the storage's words say waiting will not help
    (:data:`LASTING`)."""
    failed = storage_failure(e)
    if failed is None:
        return None
    lasting = any(m in str(e) for m in LASTING)
    return StorageError(where, f"the storage failed: {failed}", tube, transient=not lasting)


def storage_guarded(where: str, fn: Callable[[], R], tube: str | None = None,
                    explain: Callable[[BaseException], StorageError | None] | None = None,
                    ) -> R:
    """``fn()``, with a failure of the storage raised as the :class:`StorageError`
    naming ``where`` (and ``tube``) that :func:`storage_error` makes, or the one
    ``explain`` finds first (a more specific reading of the same failure); any
    other error goes through unchanged."""
    try:
        return fn()
    except Exception as e:
        failed = (explain(e) if explain is not None else None) or storage_error(where, e, tube)
        if failed is not None:
            raise failed from e
        raise


def first_line(e: BaseException) -> str:
    """The first line of an error's message, without a Java stack (for a Java
    exception through py4j, the Java exception's own)."""
    java = getattr(e, "java_exception", None)
    text = str(java.toString() if java is not None else e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def typed_guard_error(tube: str, kind: str, ids: list[int], owner: str,
                      states: dict[int, str]) -> QueueError:
    """The API error for a failed guard, with every offending id found by diagnosis."""
    if kind == "TaskNotFound":
        return TaskNotFound(tube, ids)
    if kind == "NotOwner":
        return NotOwner(tube, ids, owner)
    found = ", ".join(f"{i}: {states.get(i, '?')}" for i in ids[:10])
    return InvalidState(f"task(s) in tube {tube!r} are not in a state that allows this "
                        f"({found})", ids)


def missing_table_error(tube: str, where: str, e: BaseException,
                        known: list[str]) -> QueueError:
    """The error for an operation on a tube whose tables are gone: dropped (it is no
    longer in ``known``, the registered tubes), or missing under a registered tube
    (``e`` a :class:`StorageError` naming the table, or Delta's own error)."""
    if tube not in known:
        return TubeNotFound(tube, known)
    if isinstance(e, StorageError):
        return StorageError(e.path, e.problem, tube, transient=e.transient)
    return StorageError(where, f"a table of the tube is missing: {first_line(e)}", tube)
