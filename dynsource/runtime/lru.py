"""What a warm session keeps between queries: a bounded map that drops its least recently used entry first.

Safe to use from several threads (a query's dimensions are collected, and the tables they read planned, on
several).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

V = TypeVar("V")


class LruMap(Generic[V]):
    """At most ``bound`` values by key; a value read or stored becomes the most recently used."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._values: collections.OrderedDict[Hashable, V] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[Hashable]:
        """The keys, least recently used first, as they were when asked."""
        with self._lock:
            return iter(list(self._values))

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> list[V]:
        """Store ``value``; the values dropped to stay within the bound, least recently used first."""
        dropped = []
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self.bound:
                dropped.append(self._values.popitem(last=False)[1])
        return dropped

    def pop(self, key: Hashable) -> V | None:
        """Forget ``key``; its value, if it had one."""
        with self._lock:
            return self._values.pop(key, None)
