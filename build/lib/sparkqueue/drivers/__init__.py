"""Tube types. The built-in ones; custom ones go through Queue.register_driver."""

from __future__ import annotations

from .base import Driver
from .fifo import FifoDriver, FifoTtlDriver, LimFifoTtlDriver
from .utube import UtubeDriver, UtubeTtlDriver

__all__ = ["Driver", "FifoDriver", "FifoTtlDriver", "LimFifoTtlDriver", "UtubeDriver",
           "UtubeTtlDriver", "BUILTIN_DRIVERS"]

BUILTIN_DRIVERS: dict[str, type[Driver]] = {
    d.name: d for d in (FifoDriver, FifoTtlDriver, LimFifoTtlDriver, UtubeDriver,
                        UtubeTtlDriver)
}
