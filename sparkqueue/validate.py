"""Input validation: one place for each rule, run before any Spark job.

Numbers are checked for their type and their range here, so that no value a
tube cannot store or compute with ever reaches a Delta table: a priority
outside ``PRI_RANGE`` or a delay of infinity written into an inbox would break
every later ingest of the tube.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

from pyspark.sql import Column, DataFrame

from . import store as st
from .errors import InvalidOption

__all__ = ["tube_name", "seconds", "count", "batch", "pri", "integer", "task_ids", "one_id",
           "owner",
           "PRI_RANGE", "URGENT_PRI", "MAX_BATCH", "NEVER_ENDS"]

NAME = re.compile(r"[A-Za-z0-9_]{1,32}")
#: Priorities users may give: ``urgent`` puts use ``PRI_RANGE[0] - 1``, ahead of all of them,
#: and every stored priority fits a Spark BIGINT.
PRI_RANGE = (-(2**62) + 1, 2**62 - 1)
#: The priority of ``urgent`` puts: ahead of every one a user may give.
URGENT_PRI = PRI_RANGE[0] - 1
#: The most tasks one take or kick handles (Spark's LIMIT is an INT); a larger ``n``
#: asks for every task there is, which is what it gets.
MAX_BATCH = 2**31 - 1
#: Times that may be ``inf``, meaning never: a ttl or ttr that never ends, a timeout
#: that waits for ever. A delay or a touch increment of ``inf`` would make a task that
#: can never be taken or a lease that never ends, so those must be finite.
NEVER_ENDS = frozenset({"ttl", "ttr", "timeout", "take_timeout", "idle_timeout",
                        "max_retry_delay"})
#: The largest count a tube option may hold (a Spark BIGINT).
MAX_COUNT = 2**63 - 1


def tube_name(name: Any) -> str:
    """A tube name: 1 to 32 ASCII letters, digits or ``_``."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidOption(
            f"invalid tube name {name!r}: expected 1 to 32 ASCII letters, digits or '_'"
        )
    return name


#: The end of a name the tables of a tube's shards use (``<tube>__shard<k>`` in a
#: catalog): no new tube may have it, or it would take another tube's shard tables.
SHARD_NAME = re.compile(r".*__shard[0-9]+", re.IGNORECASE)  # as catalogs


def new_tube_name(name: Any) -> str:
    """A name for a new tube: a :func:`tube_name` not ending in ``__shard<k>``."""
    tube_name(name)
    if SHARD_NAME.fullmatch(name):
        raise InvalidOption(f"invalid tube name {name!r}: a name ending in '__shard<k>' "
                            "names the tables of a sharded tube's shard")
    return str(name)


def seconds(what: str, value: Any) -> float:
    """A non-negative time in seconds (any real number but bool, not NaN); ``inf``
    only for the times in :data:`NEVER_ENDS`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidOption(f"{what} must be a number of seconds, got {value!r}")
    v = float(value)
    if math.isnan(v) or v < 0:
        raise InvalidOption(f"{what} must be a non-negative number of seconds, got {value!r}")
    if math.isinf(v) and what not in NEVER_ENDS:
        raise InvalidOption(f"{what} must be a finite number of seconds, got {value!r}: "
                            "only a ttl, a ttr or a timeout may be infinite (never)")
    return v


def time_option(what: str, value: Any) -> float | Column:
    """A time option: seconds, or a Column of per-row seconds (checked as rows are written)."""
    return value if st.is_column(value) else seconds(what, value)


def integer(what: str, value: Any, *, minimum: int | None = None,
            maximum: int | None = None) -> int:
    """An integer (any ``numbers.Integral`` but bool, e.g. numpy's) within the bounds given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOption(f"{what} must be an integer, got {value!r}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise InvalidOption(f"{what} must be at least {minimum}, got {value!r}")
    if maximum is not None and v > maximum:
        raise InvalidOption(f"{what} must be at most {maximum}, got {value!r}")
    return v


def pri(value: Any) -> int:
    """A priority: an integer in :data:`PRI_RANGE` (lower is more urgent)."""
    return integer("pri", value, minimum=PRI_RANGE[0], maximum=PRI_RANGE[1])


def count(what: str, value: Any) -> int:
    """A count of tasks: an integer from 0 to 2**63 - 1."""
    return integer(what, value, minimum=0, maximum=MAX_COUNT)


def batch(what: str, value: Any, *, minimum: int = 1) -> int:
    """How many tasks one call handles at most: an integer >= ``minimum``; one above
    :data:`MAX_BATCH` asks for all there are, and is that."""
    return min(integer(what, value, minimum=minimum), MAX_BATCH)


def one_id(task_id: Any) -> list[int]:
    """One task id (any ``numbers.Integral`` but bool), as a one-id list."""
    if isinstance(task_id, bool) or not isinstance(task_id, numbers.Integral):
        raise InvalidOption(f"expected one task id (an int), got {task_id!r}")
    ids = task_ids(task_id)
    assert isinstance(ids, list)
    return ids


def owner(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidOption(f"owner must be a non-empty string, got {value!r}")
    return value


def task_ids(tasks: Any) -> list[int] | DataFrame:
    """Normalize ``tasks``: an id, a list of ids, or a DataFrame with ``task_id``.

    An id is any non-negative ``numbers.Integral`` (numpy's too), never a bool.
    """
    if st.is_dataframe(tasks):
        if "task_id" not in tasks.columns:
            raise InvalidOption(
                f"a DataFrame of tasks needs a task_id column; it has {tasks.columns}"
            )
        return tasks
    items = [tasks] if not isinstance(tasks, (list, tuple, set, frozenset)) else list(tasks)
    out = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral) or not (
                0 <= int(item) <= MAX_COUNT):
            raise InvalidOption(f"task ids must be non-negative integers, got {item!r}")
        out.append(int(item))
    return sorted(set(out))
