"""Registries that third parties extend: by ``register`` calls, and once, on first need, by an entry-point group.

A registry maps keys (a name, or a name and a version) to the objects registered under them. What the
package itself provides is registered when its module is imported; a distribution adds its own by
declaring them in an entry-point group (``[project.entry-points."mdiff.engines"]`` in its
pyproject.toml), loaded the first time a key is missing or the registry is listed — so that a
process that uses only what mdiff ships never scans the installed distributions. This module imports
nothing from mdiff: every floor may keep a registry.
"""

from __future__ import annotations

from typing import Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Registry(Generic[K, V]):
    """The objects registered under their keys; ``check`` raises ValueError for an object that may not be."""

    def __init__(self, group: str, key: Callable[[V], K], what: str, check: Callable[[V], None] | None = None):
        self.group = group  # the entry-point group third parties declare their objects in
        self._key = key
        self._what = what  # what the objects are, for messages: "engine", "update type"
        self._check = check
        self._items: dict[K, V] = {}
        self.entry_points_loaded = False

    def register(self, item: V, check: bool = True) -> V:
        """Adds ``item`` under its key (returned, so that this serves as a decorator); a key holds one object.
        ``check=False`` is for the package's own objects, which its checks would refuse as reserved."""
        key = self._key(item)
        if check and self._check is not None:
            self._check(item)
        if self._items.get(key, item) is not item:
            raise ValueError(f"{self._what} {key!r} is registered already")
        self._items[key] = item
        return item

    def unregister(self, key: K) -> None:
        """Withdraws what ``key`` holds (KeyError when nothing)."""
        del self._items[key]

    def load_entry_points(self) -> bool:
        """Registers the objects of the entry-point group, the first time only; True when it did now."""
        if self.entry_points_loaded:
            return False
        self.entry_points_loaded = True
        from importlib.metadata import entry_points

        for point in entry_points(group=self.group):
            self.register(point.load())
        return True

    def __getitem__(self, key: K) -> V:
        try:
            return self._items[key]
        except KeyError:
            if not self.load_entry_points():
                raise
        return self._items[key]

    def get(self, key: K) -> V | None:
        try:
            return self[key]
        except KeyError:
            return None

    def __contains__(self, key: object) -> bool:
        return key in self._items or (self.load_entry_points() and key in self._items)

    def keys(self) -> list[K]:
        self.load_entry_points()
        return list(self._items)

    def values(self) -> list[V]:
        self.load_entry_points()
        return list(self._items.values())

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())
