"""The contract suite (tests/contract) over Spark Connect: the same tests, with the
fixtures of tests/connect/conftest.py."""

from ..contract.test_lifecycle import *  # noqa: F403
