"""Input validation: one place for each rule, run before any Spark job."""

from __future__ import annotations

import math
import re
from typing import Any

from pyspark.sql import Column, DataFrame

from .errors import InvalidOption

__all__ = ["tube_name", "seconds", "count", "task_ids", "owner"]

NAME = re.compile(r"[A-Za-z0-9_]{1,32}")


def tube_name(name: Any) -> str:
    """A tube name: 1 to 32 ASCII letters, digits or ``_``."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidOption(
            f"invalid tube name {name!r}: expected 1 to 32 ASCII letters, digits or '_'"
        )
    return name


def seconds(what: str, value: Any, *, allow_inf: bool = True) -> float:
    """A non-negative time in seconds (int or float, not NaN, not bool, not str)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidOption(f"{what} must be a number of seconds, got {value!r}")
    v = float(value)
    if math.isnan(v) or v < 0 or (math.isinf(v) and not allow_inf):
        raise InvalidOption(f"{what} must be a non-negative number of seconds, got {value!r}")
    return v


def time_option(what: str, value: Any) -> float | Column:
    """A time option: seconds, or a Column of per-row seconds (checked as rows are written)."""
    return value if isinstance(value, Column) else seconds(what, value)


def integer(what: str, value: Any, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(f"{what} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidOption(f"{what} must be at least {minimum}, got {value!r}")
    return value


def count(what: str, value: Any) -> int:
    """A count of tasks: an integer >= 0."""
    return integer(what, value, minimum=0)


def owner(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidOption(f"owner must be a non-empty string, got {value!r}")
    return value


def task_ids(tasks: Any) -> list[int] | DataFrame:
    """Normalize ``tasks``: an id, a list of ids, or a DataFrame with ``task_id``."""
    if isinstance(tasks, DataFrame):
        if "task_id" not in tasks.columns:
            raise InvalidOption(
                f"a DataFrame of tasks needs a task_id column; it has {tasks.columns}"
            )
        return tasks
    items = [tasks] if not isinstance(tasks, (list, tuple, set, frozenset)) else list(tasks)
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise InvalidOption(f"task ids must be non-negative integers, got {item!r}")
        out.append(int(item))
    return sorted(set(out))
