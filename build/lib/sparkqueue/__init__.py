"""sparkqueue: the Tarantool queue on Apache Spark and Delta Lake.

Tubes are Delta tables with one row per task; put is a DataFrame append,
take a Delta MERGE that leases the lowest-id ready rows.

Examples
--------
>>> import sparkqueue                                           # doctest: +SKIP
>>> sq = sparkqueue.connect(root="/tmp/queues")                 # doctest: +SKIP
>>> jobs = sq.create_tube("jobs", "fifottl", if_not_exists=True)  # doctest: +SKIP
>>> jobs.put([{"n": 1}, {"n": 2}])                              # doctest: +SKIP
>>> batch = jobs.take(10)                                       # doctest: +SKIP
>>> jobs.ack(batch)                                             # doctest: +SKIP
"""

# ruff: noqa: E402  (the installed Spark is checked before the imports that need it)
from __future__ import annotations

from .store.lines import require as _require_spark

_require_spark()  # first: a missing or unsupported pyspark is one typed error, UnsupportedSpark

from .clock import Clock, FakeClock, system_clock
from .config import Config, load_config
from .drivers import (
    Driver,
    FifoDriver,
    FifoTtlDriver,
    LimFifoTtlDriver,
    UtubeDriver,
    UtubeTtlDriver,
)
from .errors import (
    CapacityExceeded,
    InvalidOption,
    InvalidState,
    NotOwner,
    NotSupported,
    QueueError,
    SchemaMismatch,
    StorageError,
    TaskNotFound,
    Timeout,
    TubeExists,
    TubeNotFound,
    UnsupportedSpark,
)
from .queue import Queue, connect
from .session import session
from .task import Task, TaskState
from .tube import Tube
from .worker import Consumer, Progress

__all__ = [
    "session", "connect", "Queue", "Tube", "Task", "TaskState", "Driver", "FifoDriver",
    "FifoTtlDriver", "LimFifoTtlDriver", "UtubeDriver", "UtubeTtlDriver", "Clock", "FakeClock",
    "system_clock", "Config",
    "load_config", "QueueError", "TubeNotFound", "TubeExists", "TaskNotFound", "NotOwner",
    "InvalidState", "InvalidOption", "NotSupported", "CapacityExceeded", "SchemaMismatch",
    "StorageError", "Timeout", "UnsupportedSpark", "Consumer", "Progress",
]

__version__ = "0.1.0"
