"""The sparkqueue exception tree.

Every error the library raises derives from :class:`QueueError`, carries the
names or ids involved as attributes, and says what was expected and what was
found. A call that raises has written nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "QueueError",
    "TubeNotFound",
    "TubeExists",
    "TaskNotFound",
    "NotOwner",
    "InvalidState",
    "InvalidOption",
    "NotSupported",
    "CapacityExceeded",
    "SchemaMismatch",
    "StorageError",
    "Timeout",
    "UnsupportedSpark",
]


def _ids(task_ids: Iterable[int]) -> str:
    ids = sorted(task_ids)
    shown = ", ".join(str(i) for i in ids[:10])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > 10 else "")


class QueueError(Exception):
    """Base class of every error raised by sparkqueue."""


class TubeNotFound(QueueError, KeyError):
    """The named tube does not exist."""

    def __init__(self, name: str, known: Iterable[str] = ()) -> None:
        self.name = name
        known_list = sorted(known)
        hint = f"; existing tubes: {', '.join(known_list)}" if known_list else "; no tubes exist"
        super().__init__(f"tube {name!r} not found{hint}")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class TubeExists(QueueError):
    """A tube of that name already exists."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"tube {name!r} already exists (pass if_not_exists=True to reuse it)")


class TaskNotFound(QueueError, KeyError):
    """One or more task ids do not name a live task of the tube."""

    def __init__(self, tube: str, task_ids: Iterable[int]) -> None:
        self.tube = tube
        self.task_ids = sorted(task_ids)
        super().__init__(f"task(s) {_ids(self.task_ids)} not found in tube {tube!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class NotOwner(QueueError):
    """The tasks are leased to another consumer."""

    def __init__(self, tube: str, task_ids: Iterable[int], owner: str) -> None:
        self.tube = tube
        self.task_ids = sorted(task_ids)
        self.owner = owner
        super().__init__(
            f"task(s) {_ids(self.task_ids)} in tube {tube!r} are taken by another owner, "
            f"not by {owner!r}"
        )


class InvalidState(QueueError):
    """The operation is not allowed in the task's (or tube's) current state."""

    def __init__(self, message: str, task_ids: Iterable[int] = ()) -> None:
        self.task_ids = sorted(task_ids)
        super().__init__(message)


class InvalidOption(QueueError, ValueError):
    """A name, option, time or count is not acceptable."""


class NotSupported(InvalidOption):
    """The tube's driver does not support this operation or option."""


class CapacityExceeded(QueueError):
    """A limfifottl tube has no room for the tasks within the put timeout."""

    def __init__(self, tube: str, capacity: int, live: int, adding: int) -> None:
        self.tube, self.capacity, self.live, self.adding = tube, capacity, live, adding
        super().__init__(
            f"tube {tube!r} holds {live} live task(s) of capacity {capacity}; "
            f"no room for {adding} more"
        )


class SchemaMismatch(QueueError, ValueError):
    """The payload's schema conflicts with the tube's payload schema."""


class StorageError(QueueError):
    """A tube's storage is missing, damaged or not writable: sparkqueue refuses to
    go on (and never recreates a table a tube had), naming the path and the problem.
    ``transient``: the storage itself failed (an S3 error, a lost connection, its
    retries given up), which may pass; not a table missing or damaged."""

    def __init__(self, path: str, problem: str, tube: str | None = None, *,
                 transient: bool = False) -> None:
        self.path, self.problem, self.tube = path, problem, tube
        self.transient = transient
        what = f"tube {tube!r}: " if tube is not None else ""
        super().__init__(f"{what}{path}: {problem}")


class Timeout(QueueError, TimeoutError):
    """An operation could not finish (e.g. kept conflicting) within its time limit."""


class UnsupportedSpark(QueueError, ImportError):
    """The Spark or Delta found (pyspark, Databricks Connect's pyspark, delta-spark)
    is missing or not one sparkqueue runs on; the message names what was found and
    the supported lines (:mod:`sparkqueue.store.lines`)."""
