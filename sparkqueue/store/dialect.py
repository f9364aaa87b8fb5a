"""The JVM calls of the accelerator whose form differs from one Spark line to another.

Delta's internal classes take more arguments from release to release (a
``DeltaOperations.Write`` gained options, ``DeltaLog.update`` a catalog
table), Scala's collections are 2.12's on Spark 3.5 and 2.13's after, and
the classic SparkSession class moved in Spark 4. Every such call is made
here, by what the JVM has (a method's arity, Spark's own Scala helpers),
so that :mod:`.txn` reads the same on every line (:mod:`.lines`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

__all__ = ["Dialect"]

#: (JVM class, method): how many arguments its widest overload takes; one JVM a process
_ARITY: dict[tuple[str, str], int] = {}


class Dialect:
    """The line-dependent JVM calls of one classic session's JVM (``jvm``)."""

    def __init__(self, jvm: Any) -> None:
        self.jvm = jvm
        # Spark's Python helpers build Scala collections of the JVM's own Scala
        self._utils = jvm.org.apache.spark.api.python.PythonUtils

    def seq(self, items: Any) -> Any:
        """A Scala ``Seq`` of a Java list (or of a Python list of JVM objects)."""
        if isinstance(items, list):
            java = self.jvm.java.util.ArrayList()
            for item in items:
                java.add(item)
            items = java
        return self._utils.toSeq(items)

    def immutable_map(self, items: Any) -> Any:
        """A Scala immutable ``Map`` of a Java map."""
        return self._utils.toScalaMap(items)

    def session_class(self) -> Any:
        """The JVM class whose statics set a thread's active classic session
        (``org.apache.spark.sql.classic.SparkSession`` from Spark 4 on)."""
        of = getattr(SparkSession, "_get_j_spark_session_class", None)
        return of(self.jvm) if of is not None else self.jvm.org.apache.spark.sql.SparkSession

    def module(self, name: str) -> Any:
        """The Scala object ``name`` (its ``MODULE$``)."""
        return getattr(getattr(self.jvm, f"{name}$"), "MODULE$")

    def call(self, target: Any, method: str, *given: Any) -> Any:
        """``target.method(*given)``, the arguments not given at their Scala
        defaults: as many as this line's ``method`` takes (its widest overload)."""
        key = (str(target.getClass().getName()), method)
        if key not in _ARITY:  # a reflection walk over the class's methods: once
            _ARITY[key] = max(len(m.getParameterTypes()) for m in
                              target.getClass().getMethods() if m.getName() == method)
        rest = [getattr(target, f"{method}$default${i}")()
                for i in range(len(given) + 1, _ARITY[key] + 1)]
        return getattr(target, method)(*given, *rest)

    def append_operation(self) -> Any:
        """Delta's ``WRITE`` operation of an append (its other options at their defaults)."""
        return self.call(self.module("org.apache.spark.sql.delta.DeltaOperations$Write"),
                         "apply", self.jvm.org.apache.spark.sql.SaveMode.Append)

    def updated_snapshot(self, log: Any) -> Any:
        """``log``'s newest snapshot, read now (``DeltaLog.update``)."""
        return self.call(log, "update", False)
