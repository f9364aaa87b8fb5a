"""Queue: the registry of tubes of one root, and connect()."""

from __future__ import annotations

import atexit
import json
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from . import objectstore, validate
from . import store as st
from . import sweep as sweep_mod
from .clock import Clock, system_clock
from .config import Config, load_config
from .drivers import BUILTIN_DRIVERS, Driver
from .engine import TubeContext
from .engine.memory import Memory
from .engine.records import live_tasks
from .engine.shards import MAX_SHARDS, shard_contexts
from .errors import (
    InvalidOption,
    InvalidState,
    NotSupported,
    QueueError,
    StorageError,
    TubeExists,
    TubeNotFound,
)
from .session import quiet_pyspark_loggers, session
from .sharded import ShardedTube
from .single import SingleTube
from .store import CommitTag
from .tube import Callback, Tube

R = TypeVar("R")

__all__ = ["Queue", "connect"]

#: The on_task_change callbacks of this process: root -> tube name -> callback,
#: shared by every Queue of the root, so that a change made through any of
#: them reaches the callback (the contract says "through this process").
_CALLBACKS: dict[str, dict[str, Callback]] = {}


def connect(spark: SparkSession | None = None, root: str | None = None, *,
            owner: str | None = None, clock: Clock | None = None,
            config: Config | None = None, engine: str | None = None) -> Queue:
    """Open the queue at ``root`` (default from conf/) and return a :class:`Queue`.

    Parameters
    ----------
    spark
        A SparkSession; ``None`` means :func:`sparkqueue.session`.
    root
        Where the tubes live: a path or URI (``/data/queues``, ``s3a://b/q``),
        or a catalog schema (``main.queues``, ``spark_catalog.queues``): the
        tubes' tables are then managed tables of that schema, named
        ``<tube>__inbox`` and ``<tube>__tasks`` (and ``sq_registry``,
        ``sq_stats``); the schema is created when missing.
    owner
        The consumer identity stamped on leases; a fresh unique id by default.
        Two Queues with the same owner are the same consumer.
    clock
        Zero-argument callable returning epoch seconds, for every ttl, ttr,
        delay and lease; ``time.time`` by default.
    config
        Settings (see conf/sparkqueue.toml); :func:`sparkqueue.load_config` by default.
    engine
        ``"accelerated"`` (Delta's transaction API and Hadoop's FileSystem in
        the driver's JVM: fewer Spark jobs per call) or ``"portable"`` (only
        Spark's and Delta's SQL and readers: what a Spark Connect client has).
        ``None`` chooses: accelerated on a classic session with Delta's
        classes, portable otherwise. :attr:`Queue.engine` says which runs.

    Examples
    --------
    >>> sq = sparkqueue.connect(root="/tmp/queues")         # doctest: +SKIP
    >>> sq.create_tube("jobs", "fifottl", ttl=3600)         # doctest: +SKIP
    """
    config = config or load_config()
    quiet_pyspark_loggers()
    if owner is not None:
        validate.owner(owner)
    if clock is not None and not callable(clock):
        raise InvalidOption(f"clock must be a zero-argument callable, got {clock!r}")
    root = root or config.root
    return Queue(spark or session(root=root), root, owner=owner or uuid.uuid4().hex,
                 clock=clock or system_clock, config=config, engine=engine)


class Queue:
    """The tubes of one root. Create with :func:`connect`."""

    def __init__(self, spark: SparkSession, root: str, *, owner: str, clock: Clock,
                 config: Config, engine: str | None = None) -> None:
        if not isinstance(root, str) or not root:
            raise InvalidOption(f"root must be a path, a URI or a catalog schema, got {root!r}")
        self.spark = spark
        self.root = root = objectstore.s3a_root(root)
        self._owner = owner
        self.clock = clock
        self.config = config
        self._drivers: dict[str, type[Driver]] = dict(BUILTIN_DRIVERS)
        self._callbacks = _CALLBACKS.setdefault(root, {})
        self._temporary: list[str] = []
        self._memory = Memory()  # what its calls leave for later ones
        # the root's first reads and writes: where an unreachable store shows
        self._layout = st.storage_guarded(root, lambda: self._open_root(engine),
                                          explain=lambda e: objectstore.unreachable(root, e))
        objectstore.warn_if_unsafe(root, spark)

    def __repr__(self) -> str:
        return f"Queue(root={self.root!r}, owner={self.owner!r})"

    def _open_root(self, engine: str | None) -> st.Layout:
        """The root's tables, its registry created where there is none yet."""
        layout = st.Layout(self.spark, self.root, engine)
        layout.create_registry()
        return layout

    @property
    def layout(self) -> st.Layout:
        """The root's tables (the store): for sparkqueue's own jobs, such as the sweeper."""
        return self._layout

    @property
    def engine(self) -> str:
        """Which engine runs this Queue's calls: ``accelerated`` or ``portable``
        (see :func:`connect`)."""
        return self._layout.engine

    @property
    def owner(self) -> str:
        """This Queue's consumer identity, stamped on leases."""
        return self._owner

    # -- drivers ----------------------------------------------------------------------

    def register_driver(self, name: str, driver_cls: type[Driver]) -> None:
        """Add a custom tube type; refuses to replace a registered one."""
        validate.tube_name(name)
        if name in self._drivers:
            raise InvalidOption(f"driver {name!r} is already registered; drivers are not replaced")
        if not (isinstance(driver_cls, type) and issubclass(driver_cls, Driver)):
            raise InvalidOption(f"driver {name!r} must be a subclass of sparkqueue.Driver, "
                                f"got {driver_cls!r}")
        missing: frozenset[str] = getattr(driver_cls, "__abstractmethods__", frozenset())
        if missing:
            raise InvalidOption(f"driver {name!r} does not implement {', '.join(sorted(missing))}")
        self._drivers[name] = driver_cls

    def _driver(self, type_name: str) -> type[Driver]:
        try:
            return self._drivers[type_name]
        except KeyError:
            raise InvalidOption(f"unknown tube type {type_name!r}; known types: "
                                f"{', '.join(sorted(self._drivers))}") from None

    # -- tubes ------------------------------------------------------------------------

    def create_tube(self, name: str, type: str = "fifo", *, temporary: bool = False,
                    if_not_exists: bool = False, ttl: float | None = None,
                    ttr: float | None = None, pri: int | None = None,
                    delay: float | None = None, capacity: int | None = None,
                    on_task_change: Callback | None = None, change_feed: bool | None = None,
                    shards: int = 1, **driver_opts: Any) -> Tube:
        """Create a tube of ``type`` (fifo, fifottl, limfifottl, ... or a registered driver).

        ``ttl``, ``ttr``, ``pri`` and ``delay`` are the tube's defaults for put;
        ``capacity`` bounds limfifottl. An option the driver does not support
        raises :class:`InvalidOption`. Two processes racing on one name end
        with one tube and one :class:`TubeExists`.

        ``change_feed`` (a sparkqueue extension): whether the tasks table keeps
        Delta's change data feed, what :meth:`Tube.changes` streams. The feed
        writes each row a commit changes twice more (before and after images),
        so a tube keeps none until the first ``changes()`` call turns it on
        (from then on); ``True`` keeps it from creation, ``False`` never
        (``changes()`` is refused). Every other verb is the same.

        ``shards=N`` splits the tube into N shards, each a pair of tables of its
        own, so that consumers taking from different shards never conflict
        (:mod:`sparkqueue.sharded`); fixed at creation.

        Examples
        --------
        >>> sq.create_tube("mail", "fifottl", ttl=86400, ttr=60)   # doctest: +SKIP
        """
        validate.new_tube_name(name)
        if not isinstance(type, str):
            raise InvalidOption(f"tube type must be a string, got {type!r}")
        driver_cls = self._driver(type)
        options: dict[str, Any] = {"ttl": ttl, "ttr": ttr, "pri": pri, "delay": delay,
                                   "capacity": capacity, **driver_opts}
        given = {k for k, v in options.items() if v is not None}
        unsupported = given - driver_cls.tube_options()
        if unsupported:
            raise NotSupported(
                f"{type} tubes do not support option(s) {', '.join(sorted(unsupported))}; "
                f"supported: {', '.join(sorted(driver_cls.tube_options())) or 'none'}")
        for key in ("ttl", "ttr", "delay"):
            if options[key] is not None:
                options[key] = validate.seconds(key, options[key])
        if pri is not None:
            validate.pri(pri)
        if capacity is not None:
            validate.count("capacity", capacity)
        if options.get("window") is not None:
            options["window"] = validate.batch("window", options["window"])
        if not isinstance(temporary, bool):
            raise InvalidOption(f"temporary must be a bool, got {temporary!r}")
        if change_feed is not None and not isinstance(change_feed, bool):
            raise InvalidOption(f"change_feed must be a bool or None, got {change_feed!r}")
        if on_task_change is not None and not callable(on_task_change):
            raise InvalidOption(f"on_task_change needs a callable, got {on_task_change!r}")
        shards = validate.integer("shards", shards, minimum=1, maximum=MAX_SHARDS)
        if capacity and shards > capacity:
            raise InvalidOption(f"capacity {capacity} is split among the shards: it needs at "
                                f"least one per shard, and shards={shards}")
        options = {k: v for k, v in options.items() if v is not None}
        if shards > 1:  # absent: one, as for tubes made before the option
            options["shards"] = shards
        options["temporary"] = temporary
        if change_feed is False:  # absent: changes() may turn a feed on
            options["change_feed"] = False

        # The tables first, then the registry row: a registered tube always had its
        # tables, so a verb that finds one missing says so and never recreates it.
        # A name already registered is left alone (its tables may be damaged).
        seen = self._registry_read()
        if name not in seen[1]:
            folder = self._create_tables(name, shards, bool(change_feed))
            if folder != name:
                options["folder"] = folder
        if not self._guarded(lambda: self._register(name, type, options, seen)):
            if if_not_exists:
                found = self.tube(name)
                if len(found.parts) != shards:
                    raise InvalidOption(
                        f"tube {name!r} exists with {len(found.parts)} shard(s), not {shards}: "
                        "shards are fixed when a tube is created")
                if on_task_change is not None:  # this process's callback, as for a new tube
                    self._callbacks[found.name] = on_task_change
                return found
            raise TubeExists(name)
        if temporary:
            self._temporary.append(name)
            if len(self._temporary) == 1:
                atexit.register(self._drop_temporary)
        if on_task_change is not None:
            self._callbacks[name] = on_task_change
        return self._open(name, type, driver_cls, options)

    def _create_tables(self, name: str, shards: int, change_feed: bool) -> str:
        """A new tube's tables, each shard's at once, in a folder of its own; that
        folder's name. A failure of the storage names the folder."""
        layout = self._layout
        folder = st.storage_guarded(layout.tube_dir(name), lambda: layout.free_folder(name),
                                    name)
        layout.place(name, folder, shards)
        keys = [st.shard_key(name, k) for k in range(shards)]

        def create() -> None:
            with ThreadPoolExecutor(max_workers=min(len(keys), 4)) as pool:
                list(pool.map(lambda key: layout.create_tube_tables(key, change_feed), keys))
        st.storage_guarded(layout.tube_dir(name), create, name)
        return folder

    def _register(self, name: str, type_name: str, options: dict[str, Any],
                  seen: tuple[int | None, dict[str, Any]]) -> bool:
        """Insert the registry row unless the name exists; True if this call inserted it.
        Where the store can (:meth:`Store.append_if`), the row is appended by a
        commit that read the whole registry, so a tube registered meanwhile
        makes it conflict and the retry finds the name; elsewhere an
        insert-only MERGE, which conflicts alike. ``seen``: the registry's
        names as :meth:`_registry_read` gave them, the answer at their version."""
        tag = CommitTag.new("create")
        layout = self._layout
        row = {"name": name, "type": type_name, "options": json.dumps(options),
               "created": float(time.time())}

        def absent(version: int) -> bool:
            if version == seen[0]:
                return not any(self._same(name, found) for found in seen[1])
            return not layout.read_registry(version).where(
                self._same_name("name", st.sql_literal(name, "string"))).take(1)

        def attempt() -> bool:
            appended = layout.store.append_if(layout.registry, row, tag, absent)
            if appended is not None:
                return appended
            with layout.tagged(tag) as sess:
                frame = sess.createDataFrame(
                    [tuple(row.values())],
                    "name string, type string, options string, created double")
                on = self._same_name("t.name", "s.name")
                first = st.merge(sess, layout.registry, frame, on, [st.When("insert_all")])
                return bool(first is not None and int(first["num_inserted_rows"]) > 0)
        return st.retrying(attempt, deadline=time.monotonic() + self.config.conflict_timeout,
                           what=f"registering tube {name!r}")

    def _same_name(self, left: str, right: str) -> str:
        """SQL: whether the tube names ``left`` and ``right`` (SQL expressions) are one.
        A catalog's table names ignore case: so do the names of its tubes."""
        return f"lower({left}) = lower({right})" if self._layout.catalog else f"{left} = {right}"

    def _guarded(self, fn: Callable[[], R]) -> R:
        """``fn()``, a read or write of the registry: a failure of the storage
        raised as a :class:`StorageError` naming the registry, as a tube's verbs
        raise theirs."""
        return st.storage_guarded(self._layout.registry, fn)

    def _same(self, name: str, other: str) -> bool:
        """:meth:`_same_name` of two names in Python."""
        return name.lower() == other.lower() if self._layout.catalog else name == other

    def _registry_rows(self) -> dict[str, tuple[str, dict[str, Any]]]:
        return self._registry_read()[1]

    def _registry_read(self) -> tuple[int | None, dict[str, tuple[str, dict[str, Any]]]]:
        """The registry's rows (name -> type, options) and the version they were read
        at (None: not known, :meth:`Layout.registry_at`)."""
        at, frame = self._guarded(self._layout.registry_at)
        rows = self._guarded(frame.collect)
        return at, {r["name"]: (r["type"], json.loads(r["options"])) for r in rows}

    def tube(self, name: str) -> Tube:
        """The existing tube ``name``; :class:`TubeNotFound` otherwise."""
        validate.tube_name(name)
        rows = self._guarded(lambda: self._layout.read_registry().where(
            self._same_name("name", st.sql_literal(name, "string"))).collect())
        if not rows:
            raise TubeNotFound(name, self._registry_rows())
        name, type_name = rows[0]["name"], rows[0]["type"]
        if type_name not in self._drivers:
            raise QueueError(f"tube {name!r} has type {type_name!r}, which is not registered in "
                             f"this process; call register_driver({type_name!r}, ...) first")
        return self._open(name, type_name, self._drivers[type_name], json.loads(rows[0]["options"]))

    def _open(self, name: str, type_name: str, driver_cls: type[Driver],
              options: dict[str, Any]) -> Tube:
        """A Tube over the engine's context of tube ``name`` (a ShardedTube over one
        per shard)."""
        self._layout.place(name, options.get("folder"), int(options.get("shards", 1)))
        def emit(tasks: DataFrame, event: str) -> None:
            callback = self._callbacks.get(name)
            if callback is not None:
                callback(tasks, event)

        context = TubeContext(
            name=name, type=type_name, driver=driver_cls(options), options=dict(options),
            layout=self._layout, spark=self.spark, clock=self.clock, config=self.config,
            owner=self._owner, emit=emit, registered=self.tubes,
            listening=lambda: name in self._callbacks, memory=self._memory)
        contexts = shard_contexts(context)
        if len(contexts) == 1:
            return SingleTube(context, self._callbacks, self._drop)
        return ShardedTube([SingleTube(c, self._callbacks, self._drop) for c in contexts],
                           self._callbacks, self._drop)

    def tubes(self) -> list[str]:
        """Names of the existing tubes, sorted."""
        return sorted(self._registry_rows())

    def statistics(self, name: str | None = None) -> dict[str, Any]:
        """One tube's statistics, or ``{tube: stats}`` for every tube."""
        if name is not None:
            return self.tube(name).statistics()
        return {n: self.tube(n).statistics() for n in self.tubes()}

    def sweep(self, name: str | None = None, *,
              progress: Callable[[str], None] | None = None) -> dict[str, int]:
        """One sweeper pass over tube ``name`` or every tube; counts per action, summed.

        Writes down ttl expiry (``ttl``: deleted), ended leases (``ttr``) and
        passed delays (``delay``), purges ingested inbox rows and superseded
        markers (``purged``), compacts (``compacted``: files) and vacuums
        (``vacuumed``: files) when conf/'s intervals say they are due, and
        appends a statistics snapshot per tube (:meth:`statistics_history`).
        Idempotent, safe beside consumers and other sweepers, safe to kill.
        ``progress``, when given, is called with a line after each step saying what it did.

        Examples
        --------
        >>> sq.sweep()            # doctest: +SKIP
        {'ttl': 3, 'ttr': 1, 'delay': 0, 'purged': 120, 'compacted': 0, 'vacuumed': 0}
        """
        tubes = [self.tube(name)] if name is not None else [self.tube(n) for n in self.tubes()]
        last = sweep_mod.last_maintenance(self)
        sweep_id = sweep_mod.new_sweep_id()
        total = dict.fromkeys(sweep_mod.ACTIONS, 0)
        for tube in tubes:
            done = sweep_mod.sweep_tube(self, tube, sweep_id, last.get(tube.name, (None, None)),
                                        progress or (lambda _: None))
            for key, value in done.items():
                total[key] += value
        return total

    def statistics_history(self, name: str | None = None) -> DataFrame:
        """The statistics snapshots written by sweeps, one row per tube per pass, oldest first.

        Columns: tube, sweep_id, at (the clock's epoch seconds), the task counts
        (ready, taken, done, buried, delayed, total), calls (a map),
        oldest_ready_age, tasks_expired, leases_expired, delays_ended, purged,
        compacted and vacuumed (NULL when not due in that pass).
        """
        if name is not None:
            validate.tube_name(name)
        return sweep_mod.history(self, name)

    # -- drop ---------------------------------------------------------------------------

    def _drop(self, tube: Tube) -> None:
        """Remove a tube: its tables' folder, then its registry row.

        In that order, so that a drop cut short leaves a registered tube whose
        tables are missing (every verb says so, and ``drop()`` again finishes
        it), never tables that a new tube of the same name would adopt. A tube
        whose tables are already missing is dropped without the taken check.
        """
        taken = 0
        for part in tube.parts:
            ctx = part.context
            try:
                taken += ctx.guarded(lambda c=ctx: live_tasks(  # type: ignore[misc]
                    c, c.now()).where("eff = 'taken'").count())
            except StorageError as e:  # its tables missing: dropped without the check
                if e.transient:  # the storage failing: the check could not be made
                    raise
        if taken:
            raise InvalidState(f"tube {tube.name!r} has {taken} taken task(s); "
                               "ack or release them before drop()")
        self._layout.delete_tube_dir(tube.name, len(tube.parts))

        def remove() -> None:
            with self._layout.tagged(CommitTag.new("drop")) as sess:
                st.delete(sess, self._layout.registry,
                          f"name = {st.sql_literal(tube.name, 'string')}")
        st.retrying(remove, deadline=time.monotonic() + self.config.conflict_timeout,
                    what=f"dropping tube {tube.name!r}")
        self._callbacks.pop(tube.name, None)

    def _drop_temporary(self) -> None:
        for name in self._temporary:
            try:
                self.tube(name).drop()
            except Exception:  # noqa: BLE001 - best effort at interpreter exit
                pass
