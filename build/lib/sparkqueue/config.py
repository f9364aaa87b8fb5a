"""Configuration: one frozen dataclass, loaded explicit > environment > file > default."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package (pyproject.toml asks for it there)
    import tomli as tomllib

from .errors import InvalidOption

__all__ = ["Config", "load_config", "DEFAULT_CONF_FILE"]

#: conf/sparkqueue.toml of the source tree (an editable install points here).
DEFAULT_CONF_FILE = Path(__file__).resolve().parent.parent / "conf" / "sparkqueue.toml"


@dataclass(frozen=True)
class Config:
    """sparkqueue settings (see conf/sparkqueue.toml for their meaning)."""

    root: str = "./data/queues"
    poll_interval: float = 0.25
    conflict_timeout: float = 120.0
    spark: dict[str, str] = field(default_factory=dict)
    sweep_interval: float = 60.0
    compact_interval: float = 3600.0
    vacuum_interval: float = 86400.0
    vacuum_retention_hours: float = 168.0
    source: str = "<defaults>"


KNOWN_KEYS = {
    "queue": {"root", "poll_interval", "conflict_timeout"},
    "sweeper": {"interval", "compact_interval", "vacuum_interval", "vacuum_retention_hours"},
}


def _number(raw: dict[str, Any], key: str, default: float, file: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InvalidOption(f"{file}: key {key!r} must be a non-negative number, got {value!r}")
    return float(value)


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read the conf file: ``path``, else ``$SPARKQUEUE_CONF``, else conf/sparkqueue.toml.

    A missing or malformed file raises :class:`InvalidOption` naming the file
    and the key. ``$SPARKQUEUE_ROOT`` overrides ``[queue].root``.
    """
    chosen = path or os.environ.get("SPARKQUEUE_CONF")
    file = Path(chosen) if chosen else DEFAULT_CONF_FILE
    if not file.is_file():
        if chosen:
            raise InvalidOption(f"conf file {str(file)!r} does not exist (or is not a file)")
        raw: dict[str, Any] = {}
    else:
        try:
            raw = tomllib.loads(file.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise InvalidOption(f"conf file {str(file)!r} is not valid TOML: {e}") from e
    name = str(file)
    queue = raw.get("queue", {})
    sweeper = raw.get("sweeper", {})
    spark = raw.get("spark", {})
    for section, value in (("queue", queue), ("sweeper", sweeper), ("spark", spark)):
        if not isinstance(value, dict):
            raise InvalidOption(f"{name}: [{section}] must be a table")
    for section, value in (("queue", queue), ("sweeper", sweeper)):
        unknown = sorted(set(value) - KNOWN_KEYS[section])
        if unknown:
            raise InvalidOption(f"{name}: unknown key {unknown[0]!r} in [{section}]; known: "
                                f"{', '.join(sorted(KNOWN_KEYS[section]))}")
    unknown = sorted(set(raw) - {"queue", "sweeper", "spark"})
    if unknown:
        raise InvalidOption(f"{name}: unknown section [{unknown[0]}]; known: queue, spark, sweeper")
    root = os.environ.get("SPARKQUEUE_ROOT") or queue.get("root", Config.root)
    if not isinstance(root, str) or not root:
        raise InvalidOption(f"{name}: key 'root' must be a non-empty string, got {root!r}")
    return Config(
        root=root,
        poll_interval=_number(queue, "poll_interval", Config.poll_interval, name),
        conflict_timeout=_number(queue, "conflict_timeout", Config.conflict_timeout, name),
        spark={str(k): str(v) for k, v in spark.items()},
        sweep_interval=_number(sweeper, "interval", Config.sweep_interval, name),
        compact_interval=_number(sweeper, "compact_interval", Config.compact_interval, name),
        vacuum_interval=_number(sweeper, "vacuum_interval", Config.vacuum_interval, name),
        vacuum_retention_hours=_number(
            sweeper, "vacuum_retention_hours", Config.vacuum_retention_hours, name
        ),
        source=name,
    )
