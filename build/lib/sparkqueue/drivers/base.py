"""The driver contract: which rows are eligible for take, and in what order.

The core (sparkqueue.tube) owns the rules: states, ownership, statistics,
events. A driver declares its capabilities as class flags and chooses the
rows a take leases. Drivers compose: ``fifottl`` extends ``fifo`` and
``limfifottl`` extends ``fifottl``, each overriding only what differs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pyspark.sql import DataFrame

__all__ = ["Driver", "ORDER"]

#: The order of ready tasks that ``head_only`` and ``sub_queue_heads`` promise:
#: priority, then put order (``order_key``: requeue moves a task to the end), then id.
ORDER = ("pri", "order_key", "task_id")


class Driver(ABC):
    """Base class of tube types.

    Subclasses set :attr:`name` and the capability flags, and implement
    :meth:`choose`. Register them with ``Queue.register_driver(name, cls)``.

    Examples
    --------
    >>> class Newest(FifoDriver):          # doctest: +SKIP
    ...     name = "newest"
    ...     def choose(self, live, n, window):
    ...         return live.where("eff = 'ready'").orderBy(F.desc("task_id")).limit(n)
    """

    #: The tube type's name, as given to ``create_tube(type=...)``.
    name: ClassVar[str] = ""
    #: ttl, ttr, delay, touch and release(delay=...) are supported.
    uses_ttl: ClassVar[bool] = False
    #: per-task priorities (``pri``) are supported.
    uses_pri: ClassVar[bool] = False
    #: a ``capacity`` bounds the live tasks; put may wait (``timeout``).
    uses_capacity: ClassVar[bool] = False
    #: tasks belong to sub-queues (``utube``) taken in windows. The core then
    #: re-checks, in each take's own commit, that no chosen sub-queue has a
    #: live lease: ``choose`` may work from an older snapshot.
    uses_utube: ClassVar[bool] = False
    #: ``choose`` takes the ``n`` lowest ``(pri, order_key, task_id)`` ready rows
    #: and looks at nothing else. The core may then pass only ready rows near
    #: the head (the files Delta's statistics say can hold the lowest ones), so
    #: a take reads about as much of a 10,000,000-task tube as of a small one.
    head_only: ClassVar[bool] = False
    #: ``choose`` takes, from each sub-queue with no ``eff = 'taken'`` row, its ``window``
    #: lowest ``(pri, order_key, task_id)`` ready rows, then the ``n`` lowest of
    #: those, and looks at nothing but ready and taken rows. The core may then
    #: pass the ready rows near the head and every taken row (so that busy
    #: sub-queues stay known), and choose again from all rows when that gives
    #: fewer than ``n``: a take need not sort the backlog of a long sub-queue.
    sub_queue_heads: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # a subclass with its own choose keeps a promise about it only if it says so
        super().__init_subclass__(**kwargs)
        for promise in ("head_only", "sub_queue_heads"):
            if "choose" in cls.__dict__ and promise not in cls.__dict__:
                setattr(cls, promise, False)

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = dict(options)

    @classmethod
    def tube_options(cls) -> set[str]:
        """Options create_tube accepts for this type."""
        opts = set()
        if cls.uses_ttl:
            opts |= {"ttl", "ttr", "delay"}
        if cls.uses_pri:
            opts.add("pri")
        if cls.uses_capacity:
            opts.add("capacity")
        if cls.uses_utube:
            opts.add("window")
        return opts

    @classmethod
    def put_options(cls) -> set[str]:
        """Options put accepts for this type."""
        opts = {o for o in cls.tube_options() if o in ("ttl", "ttr", "delay", "pri")}
        if cls.uses_capacity:
            opts.add("timeout")
        if cls.uses_utube:
            opts.add("utube")
        return opts

    @abstractmethod
    def choose(self, live: DataFrame, n: int, window: int) -> DataFrame:
        """The rows a take of up to ``n`` tasks leases, from ``live``.

        ``live`` holds every live task with its state at the take's time in
        column ``eff`` (``ready``, ``taken``, ``buried``, ``delayed``, ``done``,
        ``expired``). Return at most ``n`` rows of it (any columns, ``task_id``
        required), all with ``eff = 'ready'``.
        """
