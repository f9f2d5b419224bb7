"""What every turn reads and hardly ever changes (a user's quota limits, the MCP
servers offered to them), kept in each process for half a minute.

A change is seen at once by the process that made it (a signal receiver calls
`clear`) and by every other web worker and job cluster within `seconds`, when
their copy expires: these rows are settings a person changes in a page or the
admin, for which that is soon enough, and none of them is what makes a
guarantee exact (the quota's counting stays in the database's statement). Long
enough that a person chatting at their pace mostly finds their copy.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from django.db import transaction

Value = TypeVar("Value")
MAX_KEYS = 10_000  # users kept per cache and process; the least recently used go first
CACHES: list[ProcessCache[Any]] = []


class ProcessCache(Generic[Value]):
    """Values by key, each read at most every `seconds` in this process."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start_over()
        os.register_at_fork(after_in_child=self.start_over)  # a lock held at a fork stays held
        CACHES.append(self)

    def start_over(self) -> None:
        self.lock = threading.Lock()
        self.values: OrderedDict[Hashable, tuple[float, Value]] = OrderedDict()
        self.generation = 0  # cleared this often: a value read before a clear is not kept

    def get(self, key: Hashable, read: Callable[[], Value]) -> Value:
        """The value kept for `key`, or `read()`'s, kept until `seconds` from now."""
        now = time.monotonic()
        with self.lock:
            kept = self.values.get(key)
            if kept is not None and kept[0] > now:
                self.values.move_to_end(key)
                return kept[1]
            generation = self.generation
        value = read()
        with self.lock:
            if generation == self.generation:
                self.values[key] = (now + self.seconds, value)
                self.values.move_to_end(key)
                while len(self.values) > MAX_KEYS:
                    self.values.popitem(last=False)
        return value

    def clear(self, *args: Any, **kwargs: Any) -> None:
        """Forget every value: a signal receiver, as a row they were read from
        changes; again once its transaction commits (a read meanwhile saw the old)."""
        self.forget()
        transaction.on_commit(self.forget)

    def forget(self) -> None:
        with self.lock:
            self.values.clear()
            self.generation += 1


def clear_all() -> None:
    """Every cache of this process emptied (tests: user ids repeat between them)."""
    for cache in CACHES:
        cache.forget()
