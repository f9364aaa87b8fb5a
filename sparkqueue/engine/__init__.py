"""The engine: how each verb becomes Delta commits, handed a :class:`TubeContext`.

- :mod:`.context`: what the engine knows of one tube;
- :mod:`.memory`: what a Queue's calls leave for its later calls;
- :mod:`.verbs`: each verb's state change (an ``Op``);
- :mod:`.plan`: the take's planner, pure: which strategy a take tries;
- :mod:`.ingest`: puts as task rows, and their ingest into the tasks table;
- :mod:`.ops`: the one commit every state change is (MERGE, range UPDATE),
  with its checks, diagnosis and result;
- :mod:`.leased`: ack, release, touch, bury and delete of whole files of
  the caller's leases, without a MERGE;
- :mod:`.put`: put options, payload, the inbox append;
- :mod:`.take`: the take's facts, and the executor of each strategy;
- :mod:`.stats`: task and call counts.
"""

from __future__ import annotations

from .context import TubeContext

__all__ = ["TubeContext"]
