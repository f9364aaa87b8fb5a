"""Tube types. The built-in ones; custom ones go through Queue.register_driver."""

from __future__ import annotations

from .base import Driver
from .fifo import FifoDriver, FifoTtlDriver, LimFifoTtlDriver

__all__ = ["Driver", "FifoDriver", "FifoTtlDriver", "LimFifoTtlDriver", "BUILTIN_DRIVERS"]

BUILTIN_DRIVERS: dict[str, type[Driver]] = {
    d.name: d for d in (FifoDriver, FifoTtlDriver, LimFifoTtlDriver)
}
