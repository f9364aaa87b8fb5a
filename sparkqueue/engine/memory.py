"""What a Queue's calls leave for its later calls: a :class:`Memory` per Queue."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from .. import store as st

if TYPE_CHECKING:
    from .records import Record

__all__ = ["Memory"]


class Memory:
    """Facts one call of a Queue learned that a later call of the same Queue uses
    instead of a Spark job, shared by the contexts of all its tubes.

    Each is a fact that never changes once true (a take's result and the ids
    it leased, what a lease record's file holds), so a Queue that forgets
    one, or another Queue that never knew it, only reads again: the answer
    is the same. A process's threads (a Consumer's, a streaming sink's) take
    and ack at once: every read and write holds one lock.

    - the task ids of a take's result, where its commit showed them, by the
      result's identity (weakly held): its ack, or a Consumer handed it, need
      not read them (a kick's too: it counts them);
    - per tasks table, the lease record each data file holds (records never
      change; a file holds one), the newest :data:`RECORDS_KEPT`;
    - the results of the latest :data:`RESULTS_KEPT` takes that made lease
      records, by record token: the ack of such a batch returns those rows
      as acked rather than planning the record's tasks again (each holds a
      plan in the JVM, so few are kept: a consumer acks its batch before it
      takes many more).
    """

    #: Records kept per tasks table: more than the ack's file groups (``note_leased``).
    RECORDS_KEPT = 4 * st.schema.LEASED_KNOWN
    RESULTS_KEPT = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: weakref.WeakKeyDictionary[DataFrame, list[int]] = weakref.WeakKeyDictionary()
        self._records: dict[str, OrderedDict[str, Record]] = {}
        self._results: OrderedDict[str, DataFrame] = OrderedDict()

    def note_taken_ids(self, frame: DataFrame, ids: list[int] | None) -> None:
        """Write down ``ids`` (sorted) as the task ids of ``frame``, a take's result
        (None: its commit did not show them). A take's result is immutable (one
        commit's rows, read at that commit), so they stay its ids."""
        if ids is not None:
            with self._lock:
                self._ids[frame] = ids

    def taken_ids(self, frame: DataFrame) -> list[int] | None:
        """The task ids of ``frame`` when it is a take's result whose ids were
        written down; None for any other DataFrame, a filtered or joined one too."""
        with self._lock:
            return self._ids.get(frame)

    def remember_record(self, path: str, name: str, record: Record) -> None:
        """Write down that the data file ``name`` of the tasks table ``path`` holds
        ``record``."""
        with self._lock:
            known = self._records.setdefault(path, OrderedDict())
            known[name] = record
            while len(known) > self.RECORDS_KEPT:
                known.popitem(last=False)

    def record(self, path: str, name: str) -> Record | None:
        """The record the data file ``name`` of ``path`` holds, if known here."""
        with self._lock:
            known = self._records.get(path)
            return None if known is None else known.get(name)

    def note_result(self, token: str, result: DataFrame) -> None:
        """Write down ``result`` as what the take that made record ``token`` returned."""
        with self._lock:
            self._results[token] = result
            while len(self._results) > self.RESULTS_KEPT:
                self._results.popitem(last=False)

    def pop_result(self, token: str) -> DataFrame | None:
        """The result of the take that made record ``token``, forgotten (its ack
        removed the record), or None when not known here."""
        with self._lock:
            return self._results.pop(token, None)
