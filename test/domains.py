"""DDS domains for the tests (no imports beyond the standard library: conftest gives every test one)."""

import itertools
import os

_DOMAINS = itertools.count()


def domain_id(offset: int | None = None) -> int:
    """A DDS domain for one test: consecutive tests of a run never share one (a stale participant of the last
    test must not answer for this one's nodes); runs in parallel start at different places (pid)."""
    step = next(_DOMAINS) if offset is None else offset
    return 100 + (os.getpid() * 7 + step) % 100
