"""Explicit name registries for dtypes, engines, benchmarks and objectives.

Modelled on Nevergrad's ``Registry``: registering a name twice raises, a failed lookup lists the
valid names (and the closest match). Plugins arrive through an entry-point group, loaded once
per registry instance on the first lookup; ``builtin`` entries, written as entry points are
(``"module:attribute"``), load the same way, so a stage above the registry (the engine folders
for the simulator's personalities) registers into it without the registry's package importing it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import Generic, TypeVar, overload

from msopt.errors import RegistryError

T = TypeVar("T")


def close_matches(name: str, candidates: list[str] | tuple[str, ...]) -> list[str]:
    """Return the candidates close to ``name``, case-insensitive matches first."""
    lowered = {c.lower(): c for c in candidates}
    exact_case = [lowered[name.lower()]] if name.lower() in lowered else []
    fuzzy = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    return list(dict.fromkeys(exact_case + fuzzy))


class Registry(Generic[T]):
    """A mapping from names to objects of one kind.

    Args:
        kind: what the registry holds, for messages ("dtype", "engine", ...).
        entry_point_group: the entry-point group plugins use to add entries, if any.
        builtin: name -> ``"module:attribute"``, loaded with the plugins on the first lookup.
    """

    def __init__(self, kind: str, entry_point_group: str | None = None,
                 builtin: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._builtin = dict(builtin or {})
        self._items: dict[str, T] = {}
        self._plugins_loaded = entry_point_group is None and not self._builtin

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T) -> T: ...

    def register(self, name: str, obj: T | None = None) -> T | Callable[[T], T]:
        """Register ``obj`` under ``name``; usable as a decorator when ``obj`` is omitted."""
        if obj is None:
            def decorator(item: T) -> T:
                self._add(name, item)
                return item

            return decorator
        self._add(name, obj)
        return obj

    def _add(self, name: str, obj: T) -> None:
        if name in self._items or name in self._builtin:
            raise RegistryError(f"{self.kind} {name!r} is already registered; choose another name")
        self._items[name] = obj

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        group = self.entry_point_group or ""
        builtin = [metadata.EntryPoint(name, value, group) for name, value in self._builtin.items()]
        plugins = list(metadata.entry_points(group=group)) if group else []
        for ep in [*builtin, *plugins]:
            if ep.name in self._items:
                raise RegistryError(
                    f"plugin {ep.value!r} registers {self.kind} {ep.name!r}, which already exists"
                )
            self._items[ep.name] = ep.load()

    def get(self, name: str) -> T:
        """Return the entry registered as ``name``, or raise listing the valid names."""
        self._load_plugins()
        try:
            return self._items[name]
        except (KeyError, TypeError):
            valid = sorted(self._items)
            hint = close_matches(str(name), valid)
            did = f"; did you mean {hint[0]!r}?" if hint else ""
            raise RegistryError(
                f"unknown {self.kind} {name!r}{did} (valid: {', '.join(valid)})"
            ) from None

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._items

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        self._load_plugins()
        return sorted(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())
