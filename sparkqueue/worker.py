"""A consumer loop for workers: take a batch, hand it to your function, settle it.

Success acks; failure releases with a delay that doubles per attempt (on
drivers with delays; others release at once) and buries a task once it has
been taken ``max_attempts`` times, so poison tasks end in the buried pile
(``kick`` brings them back) instead of looping forever.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame

from . import store as st
from . import validate
from .engine import shards
from .engine.take import take_once
from .errors import InvalidOption, QueueError, StorageError, Timeout

if TYPE_CHECKING:
    from .tube import Tube

__all__ = ["Consumer", "Progress"]

#: ``handler(batch) -> None`` (all done) or the failed tasks (ids or a DataFrame
#: with ``task_id``); raising fails the whole batch.
Handler = Callable[[DataFrame], "None | DataFrame | Iterable[int]"]

#: The longest pause, in seconds, before a take after failures of the storage in a
#: row (the first waits twice the poll interval, each next one twice as long)
MAX_PAUSE = 30.0
#: The pause's base when the poll interval is shorter (a poll interval of 0 must not
#: make a consumer hammer a failing storage)
MIN_PAUSE = 0.25


@dataclass
class Progress:
    """What a :class:`Consumer` has done so far."""

    done: int = 0
    failed: int = 0  # released for another attempt
    buried: int = 0
    batches: int = 0
    last_error: str | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        """Tasks done per second since the loop started."""
        return self.done / max(time.monotonic() - self.started, 1e-9)

    def __str__(self) -> str:
        return (f"done={self.done} failed={self.failed} buried={self.buried} "
                f"batches={self.batches} rate={self.rate:.1f}/s")


class Consumer:
    """Take batches from ``tube`` and hand each to ``handler`` until stopped.

    Parameters
    ----------
    tube
        The tube to consume.
    handler
        ``handler(batch)``: return None when every task succeeded, or the
        failed tasks (ids, or a DataFrame with ``task_id``); an exception
        fails the whole batch (recorded in ``Progress.last_error``).
    batch_size
        Tasks per take.
    max_attempts
        A failed task taken this many times is buried instead of released.
    retry_delay, max_retry_delay
        The first retry waits ``retry_delay`` seconds, each next one twice as
        long, at most ``max_retry_delay`` (drivers with delays only).
    take_timeout
        Seconds each take waits for tasks. A take that kept conflicting with
        other consumers' commits for the tube's conflict timeout (``Timeout``)
        is recorded in ``Progress.last_error`` and tried again: it took
        nothing, and the tube is not idle. A failure of the storage taking
        or reading a batch (a ``StorageError`` that is ``transient``: an S3
        error, a lost connection) is recorded there too, and the take tried
        again after a pause that doubles while they go on (at most
        :data:`MAX_PAUSE` seconds); not idle either. Tasks a failed call had
        leased come back when their leases end. Any other ``StorageError``
        (a table missing or damaged) ends the loop.
    idle_timeout
        Stop after this many seconds without a task (0: at the first empty
        take; None: never).
    report
        Called with the :class:`Progress` after every batch and when the loop
        ends. A batch's acks are committed together with the next take (one
        Delta MERGE per batch, not two), so ``done`` counts them from then.

    The loop also stops after the current batch on :meth:`stop`, SIGTERM or
    SIGINT (when run in the main thread; the previous handlers come back).

    Examples
    --------
    >>> def handle(batch):                                   # doctest: +SKIP
    ...     failed = send_mail(batch.select("task_id", "data.*").collect())
    ...     return failed                                    # ids that failed
    >>> Consumer(sq.tube("mail"), handle, batch_size=500, report=print).run()  # doctest: +SKIP
    """

    def __init__(self, tube: Tube, handler: Handler, *, batch_size: int = 1000,
                 max_attempts: int = 5, retry_delay: float = 10.0,
                 max_retry_delay: float = 3600.0, take_timeout: float = 1.0,
                 idle_timeout: float | None = None, owner: str | None = None,
                 report: Callable[[Progress], Any] | None = None) -> None:
        if not callable(handler):
            raise InvalidOption(f"handler must be callable, got {handler!r}")
        self.tube = tube
        self.handler = handler
        self.batch_size = validate.integer("batch_size", batch_size, minimum=1)
        self.max_attempts = validate.integer("max_attempts", max_attempts, minimum=1)
        self.retry_delay = validate.seconds("retry_delay", retry_delay)
        self.max_retry_delay = validate.seconds("max_retry_delay", max_retry_delay)
        self.take_timeout = validate.seconds("take_timeout", take_timeout)
        self.idle_timeout = (None if idle_timeout is None
                             else validate.seconds("idle_timeout", idle_timeout))
        self.owner = owner
        self.report = report
        self.progress = Progress()
        self._stop = threading.Event()
        self._acks: list[int] = []  # succeeded, not yet acked
        self._shard = 0  # the shard of a sharded tube this consumer takes from first

    def stop(self) -> None:
        """Stop after the current batch (thread-safe; also what SIGTERM/SIGINT do)."""
        self._stop.set()

    def run(self) -> Progress:
        """Consume until stopped or idle; the progress."""
        self._stop.clear()
        self.progress = Progress()
        self._acks = []
        parts = self.tube.parts
        self._shard = shards.home_shard(parts[0].context.who(self.owner), len(parts))
        previous = self._trap_signals()
        try:
            idle_since = time.monotonic()
            faults = 0  # storage failures in a row
            while not self._stop.is_set():
                try:
                    batch, taken, counts = self._next()
                except Timeout as e:  # other consumers' commits won every try: not idle
                    self._record(e)
                    idle_since = time.monotonic()
                    continue
                except StorageError as e:  # the storage failing may pass: not idle
                    self._record(e, transient_only=True)
                    faults += 1
                    self._pause(min(MAX_PAUSE, max(self.tube.context.config.poll_interval,
                                                   MIN_PAUSE) * 2 ** min(faults, 10)))
                    idle_since = time.monotonic()
                    continue
                faults = 0
                if not taken:
                    if (self.idle_timeout is not None
                            and time.monotonic() - idle_since >= self.idle_timeout):
                        break
                    continue
                self._settle(batch, taken, counts)
                idle_since = time.monotonic()
                if self.report is not None:
                    self.report(self.progress)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            # the last batch's acks, which no next take carried
            self.progress.done += self._apply(self.tube.ack, self._acks)
            self._acks = []
            if self.report is not None:
                self.report(self.progress)
        return self.progress

    def _next(self) -> tuple[DataFrame, list[int], dict[int, int] | None]:
        """The next batch, its task ids, and each one's ``taken_count`` where they were
        read (a take that wrote its ids down is not read). A failure of the storage,
        taking or reading the batch, is a :class:`StorageError`: the tasks a take
        leased but could not be read come back when their leases end."""
        batch = self._take()
        context = self.tube.context
        known = context.memory.taken_ids(batch)
        if known is not None:
            return batch, known, None
        counts = context.guarded(lambda: _taken_counts(batch))
        return batch, sorted(counts), counts

    def _take(self) -> DataFrame:
        """The next batch, the previous batch's acks with it: one take on their shard
        whose plan commits them (:data:`engine.plan.TAKE_RULES`: in the take's
        own commit where it rewrites files, removed whole just before, or in its
        MERGE), then, when that shard had nothing ready, a take on the others.
        When the take is refused (a lease lost while the handler ran) or loses
        every try to other consumers, the acks are tried alone, as ``ack``
        would, then the take. When the storage fails it, the acks stay for the
        next take: they may not have landed, and dropping them would hand
        their tasks out again once their leases end; where they had landed
        (the answer lost), the next take finds them gone and refuses them."""
        tube, acks = self.tube, self._acks
        self._acks = []
        contexts = [part.context for part in tube.parts]  # a sharded tube's shards
        home = contexts[self._shard]  # where the previous batch came from
        who = home.who(self.owner)
        window = int(home.default("window") or 1)
        if acks:
            try:
                batch = home.guarded(lambda: take_once(home, self.batch_size, who, window,
                                                       acks, self.take_timeout))
            except StorageError:
                self._acks = acks
                raise
            except QueueError:
                self.progress.done += self._apply(tube.ack, acks)
            else:
                self.progress.done += len(acks)
                if batch is not None:
                    return batch
        batch, self._shard = home.guarded(lambda: shards.take_any(
            contexts, self._shard, self.batch_size, self.take_timeout, who, window))
        return batch

    def _settle(self, batch: DataFrame, taken: list[int], counts: dict[int, int] | None,
                ) -> None:
        """Run the handler on ``batch`` (the tasks ``taken``); ack, release or bury each
        task by its outcome. ``counts``: each task's ``taken_count``, read from
        ``batch`` here when None and a task failed."""
        try:
            outcome = self.handler(batch)
            failed = _ids(outcome) & set(taken)
        except Exception as e:  # noqa: BLE001 - the handler's failure fails its batch
            self._record(e)
            failed = set(taken)
        ok = sorted(set(taken) - failed)
        self._acks = ok  # acked by the next take's commit (or when the loop ends)
        self.progress.batches += 1
        try:
            attempts = (self.tube.context.guarded(lambda: _taken_counts(batch))
                        if failed and counts is None else counts) or {}
        except StorageError as e:  # the failed tasks come back when their leases end
            self._record(e, transient_only=True)
            return
        bury = sorted(i for i in failed if attempts[i] >= self.max_attempts)
        retry: dict[int, list[int]] = {}
        for i in sorted(failed - set(bury)):
            retry.setdefault(attempts[i], []).append(i)
        self.progress.buried += self._apply(self.tube.bury, bury)
        for tries, ids in retry.items():
            delay = (min(self.max_retry_delay, self.retry_delay * 2 ** (tries - 1))
                     if self.tube.driver.uses_ttl else None)
            self.progress.failed += self._apply(self.tube.release, ids, delay=delay)

    def _apply(self, verb: Callable[..., Any], ids: list[int], **opts: Any) -> int:
        """``verb(ids)``; how many it settled. A refused batch (e.g. a lease that ended
        while the handler ran, so another consumer may hold the task) settles none: the
        tasks come back when their leases end (at-least-once), and the loop goes on."""
        if not ids:
            return 0
        try:
            verb(ids, owner=self.owner, **{k: v for k, v in opts.items() if v is not None})
        except QueueError as e:
            self._record(e)
            return 0
        return len(ids)

    def _record(self, e: Exception, transient_only: bool = False) -> None:
        """Record ``e`` in ``Progress.last_error``, the loop going on; with
        ``transient_only``, a :class:`StorageError` that is not transient (a table
        missing or damaged) is raised instead: nothing to wait out."""
        if transient_only and isinstance(e, StorageError) and not e.transient:
            raise e
        self.progress.last_error = f"{type(e).__name__}: {e}"

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or until stopped: short sleeps, not ``Event.wait``, whose lock
        a signal handler's ``stop()`` would take again."""
        end = time.monotonic() + seconds
        while not self._stop.is_set() and (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))

    def _trap_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def stop(_sig: int, _frame: FrameType | None) -> None:
            self.stop()

        return {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}


def _taken_counts(batch: DataFrame) -> dict[int, int]:
    """``task_id -> taken_count`` of a batch, collected through Arrow where there is
    (columnar: no Python Row object per task, as ``collect()`` builds)."""
    ids, counts = st.column_values(batch.select("task_id", "taken_count"))
    return dict(zip(ids, counts, strict=True))


def _ids(outcome: Any) -> set[int]:
    """The failed ids a handler returned (None: none failed)."""
    if outcome is None:
        return set()
    ids = validate.task_ids(outcome)
    if isinstance(ids, list):
        return set(ids)
    return {int(r[0]) for r in ids.select("task_id").collect()}
