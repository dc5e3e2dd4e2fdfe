"""A bounded least-recently-used cache: the one kind of memo the environments keep.

Each cache is an explicit, named object with a size limit (entries), owned by the class or
module that fills it, so what is memoised, under which key and how much of it is kept is visible
in one place and can be cleared (`clear()`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

Value = TypeVar("Value")


class BoundedCache(Generic[Value]):
    """Up to `size` entries; the least recently used one is dropped first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"cache size must be at least 1, got {size}")
        self.size = size
        self._entries: OrderedDict[Hashable, Value] = OrderedDict()

    def get(self, key: Hashable, make: Callable[..., Value], *args: Any) -> Value:
        """The value under `key`; computed as `make(*args)` and kept when absent.

        An exception from `make` propagates and nothing is kept.
        """
        entries = self._entries
        try:
            value = entries[key]
        except KeyError:
            pass
        else:
            entries.move_to_end(key)
            return value
        value = entries[key] = make(*args)
        if len(entries) > self.size:
            entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
