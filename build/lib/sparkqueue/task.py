"""Task states and the Task value: the one state table."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["TaskState", "Task", "LIVE_STATES"]


class TaskState(str, Enum):
    """The five task states (Tarantool's ``r t - ! ~``)."""

    READY = "ready"
    TAKEN = "taken"
    DONE = "done"
    BURIED = "buried"
    DELAYED = "delayed"

    @classmethod
    def parse(cls, value: str | TaskState) -> TaskState:
        """Accept a state name or one of Tarantool's one-letter codes."""
        from .errors import InvalidOption

        codes = {"r": cls.READY, "t": cls.TAKEN, "-": cls.DONE, "!": cls.BURIED, "~": cls.DELAYED}
        if isinstance(value, TaskState):
            return value
        if isinstance(value, str):
            if value in codes:
                return codes[value]
            try:
                return cls(value)
            except ValueError:
                pass
        raise InvalidOption(
            f"unknown task state {value!r}; expected one of "
            f"{', '.join(s.value for s in cls)} (or r t - ! ~)"
        )


#: States that count as live tasks (statistics ``total``, limfifottl capacity).
LIVE_STATES = (TaskState.READY, TaskState.TAKEN, TaskState.BURIED, TaskState.DELAYED)


@dataclass(frozen=True)
class Task:
    """One task, as returned by a single-task ``put``."""

    task_id: int
    status: str
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Any) -> Task:
        """Build from a Row with ``task_id``, ``status`` and ``data`` columns, by name."""
        data = row["data"]
        return cls(
            task_id=int(row["task_id"]),
            status=str(row["status"]),
            data=data.asDict(recursive=True) if data is not None else {},
        )
