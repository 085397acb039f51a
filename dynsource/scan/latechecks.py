"""Work given on trust and checked beside the caller: the kept plans and names a warm query reuses.

A warm ``dynsource.sql`` query reuses what the session found before: a table's plan whose directories are
unchanged (:mod:`dynsource.scan.planner`), what each table name resolved to over Spark Connect
(:mod:`dynsource.dpp.nameresolution`). Checking each costs little, but waiting for the checks would add their
time to the query's. Inside :func:`checked_later` the reused value is given at once and its check runs on a thread
beside the caller, which meanwhile has Spark analyse the query; the caller keeps what it built only if
:meth:`LateChecks.held`, and otherwise builds it again outside the block, checking first.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

_CHECKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynsource-check")


class LateChecks:
    """The checks of what was given on trust inside one :func:`checked_later`, running beside the caller; a plan
    found alike less than ``interval_s`` ago is given without one."""

    def __init__(self, interval_s: float = 0.0) -> None:
        self.interval_s = interval_s
        self._pending: list[Future[bool]] = []
        self._deferred: list[Future[None]] = []

    def submit(self, check: Callable[[], bool]) -> None:
        self._pending.append(_CHECKER.submit(check))

    def defer(self, work: Callable[[], None]) -> None:
        """Run ``work`` beside the caller too (a report's save); :meth:`held` waits for it and raises its error."""
        self._deferred.append(_CHECKER.submit(work))

    def held(self) -> bool:
        """Whether everything given on trust would have been given after its check (waits for the checks)."""
        for work in self._deferred:
            work.result()
        return all(check.exception() is None and check.result() for check in self._pending)


_late_checks: contextvars.ContextVar[LateChecks | None] = contextvars.ContextVar("dynsource_late_checks",
                                                                                 default=None)


def current() -> LateChecks | None:
    """The checks of the innermost :func:`checked_later` block this thread is in, if any."""
    return _late_checks.get()


@contextlib.contextmanager
def checked_later(check_interval_ms: int = 0) -> Iterator[LateChecks]:
    """Values reused in this thread inside the block are given before their check ends (a kept plan found alike
    less than ``check_interval_ms`` ago without one); the caller must not use what it built from them unless
    :meth:`LateChecks.held`."""
    checks = LateChecks(check_interval_ms / 1000)
    token = _late_checks.set(checks)
    try:
        yield checks
    finally:
        _late_checks.reset(token)
