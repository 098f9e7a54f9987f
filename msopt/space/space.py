"""SearchSpace: positions <-> concrete values for every field, with repair and write-back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from msopt.errors import ConfigError, DecodeError, RegistryError
from msopt.space.context import DecodeContext
from msopt.space.derived import TernaryFactoriesType
from msopt.space.dtypes import DTYPES, FieldType, Report
from msopt.space.fields import FieldDecl


class HasFields(Protocol):
    """What :meth:`SearchSpace.from_settings` reads: the searched section's field declarations
    (:class:`msopt.config.Settings` is one; the space sits below the configuration)."""

    @property
    def fields(self) -> tuple[FieldDecl, ...]: ...


@dataclass(slots=True)
class Decoded:
    """The result of decoding one position.

    Attributes:
        values: every field's value (derived ones included), in declaration order.
        position: the repaired position, to be written back into the swarm.
        repaired: True when the position had to change (a repair moved a source field, or a
            coordinate outside the bounds or not finite was brought inside).
        warnings: what the decode noticed (zero sources, failed repairs that were clamped, ...).
    """

    values: dict[str, Any]
    position: np.ndarray
    repaired: bool
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dimension:
    """One searched coordinate."""

    name: str
    dtype: str
    low: float
    high: float
    candidates: tuple[Any, ...] | None


class SearchSpace:
    """The dimensions of a field list and the decode/encode between positions and values.

    Built once from the declarations (validation, bounds, dependency order), then used for
    many fast decodes. Instances are immutable after construction and safe to share.
    """

    def __init__(self, decls: Sequence[FieldDecl]) -> None:
        self.fields: tuple[FieldDecl, ...] = tuple(decls)
        types: dict[str, FieldType] = {}
        for decl in self.fields:
            if decl.name in types:
                raise decl.error(f"field name '{decl.name}' is declared twice", "rename one of them")
            try:
                cls = DTYPES.get(decl.dtype)
            except RegistryError as exc:
                raise decl.error(str(exc), "use one of the valid dtypes") from None
            types[decl.name] = cls(decl)
        for t in types.values():
            t.bind(types)
        self._types = types

        dims: list[FieldType] = []
        template: dict[str, Any] = {}
        for decl in self.fields:
            t = types[decl.name]
            if t.searched and not t.is_constant():
                dims.append(t)
                template[decl.name] = None
            else:
                template[decl.name] = t.constant_raw()
        self._dims = dims
        self._template = template
        self.names: tuple[str, ...] = tuple(t.name for t in dims)
        lows, highs = zip(*(t.bounds() for t in dims)) if dims else ((), ())
        self._low = np.array(lows, dtype=float)
        self._high = np.array(highs, dtype=float)
        self._dim_index = {t.name: i for i, t in enumerate(dims)}
        self._dim_steps = [
            (i, t.name, lo, hi, (lo + hi) / 2, t.decode) for i, (t, lo, hi) in enumerate(zip(dims, lows, highs))
        ]
        self._encoders = [(t.name, t.encode, t.default_coordinate) for t in dims]
        self._order = self._dependency_order(types)
        sources = [s for t in types.values() if isinstance(t, TernaryFactoriesType) for s in t.targets]
        self._coupled = len(sources) != len(set(sources))
        self.derived: tuple[str, ...] = tuple(n for n, t in types.items() if not t.searched)
        self.dimensions: tuple[Dimension, ...] = tuple(
            Dimension(t.name, t.decl.dtype, lo, hi,
                      tuple(c) if (c := t.candidates()) is not None else None)
            for t, lo, hi in zip(dims, lows, highs)
        )
        self._validate_defaults()

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: HasFields) -> SearchSpace:
        """Build the space of ``settings.engine``'s target_field list."""
        return cls(settings.fields)

    @staticmethod
    def _dependency_order(types: dict[str, FieldType]) -> list[tuple[str, Any, bool]]:
        deps = {n: set(t.deps) for n, t in types.items() if t.deps}

        def ancestors(name: str, seen: set[str]) -> set[str]:
            for d in deps.get(name, ()):
                if d not in seen:
                    seen.add(d)
                    ancestors(d, seen)
            return seen

        # A field reading a source that a ternary repair may move must run after that repair.
        for n, t in types.items():
            if isinstance(t, TernaryFactoriesType):
                anc = ancestors(n, set())
                for m, md in list(deps.items()):
                    if m != n and m not in anc and md & set(t.targets):
                        md.add(n)
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(n: str, path: list[str]) -> None:
            s = state.get(n)
            if s == 2:
                return
            if s == 1:
                cycle = path[path.index(n):] + [n]
                decl = types[n].decl
                raise ConfigError(
                    f"{decl.where}: derived fields form a cycle {' -> '.join(cycle)}; "
                    "break it so that each field depends only on fields before it in the cycle"
                )
            state[n] = 1
            for d in sorted(deps.get(n, ())):
                if d in deps:
                    visit(d, path + [n])
            state[n] = 2
            order.append(n)

        for n in deps:
            visit(n, [])
        return [(n, types[n], types[n].searched) for n in order]

    def _validate_defaults(self) -> None:
        for t in self._dims:
            t.default_coordinate()  # raises ConfigError for a bad `value`

    # -- public properties -----------------------------------------------------------------
    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) arrays of the dimensions."""
        return self._low.copy(), self._high.copy()

    @property
    def steps(self) -> np.ndarray:
        """A small move per dimension (the swarm's mutation step): one candidate of a dimension
        with at most 10 candidates, else a tenth of its range."""
        return np.array([(d.high - d.low) / min(len(d.candidates) if d.candidates else 10, 10)
                         for d in self.dimensions], dtype=float)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._dims)

    @property
    def field_names(self) -> tuple[str, ...]:
        """Every field, in declaration order."""
        return tuple(d.name for d in self.fields)

    def field_type(self, name: str) -> FieldType:
        """The built dtype object of a field."""
        return self._types[name]

    def ternary_products(self) -> list[float]:
        """The products of every ternary_factories field (devices per trial by default)."""
        return [t.product for t in self._types.values() if isinstance(t, TernaryFactoriesType)]

    # -- decode / encode -------------------------------------------------------------------
    def decode(self, position: Sequence[float] | np.ndarray, context: DecodeContext | None = None) -> Decoded:
        """Decode a position (in dimension order) into every field's value.

        Coordinates outside the bounds are clamped, NaN goes to the middle of its dimension.
        Derived fields are computed in dependency order; a ternary repair moves its source
        fields, and their coordinates in the returned position are re-encoded.

        Raises:
            DecodeError: an int ternary_factories relation cannot be satisfied.
        """
        pos = position.tolist() if isinstance(position, np.ndarray) else [float(x) for x in position]
        if len(pos) != len(self._dims):
            raise ConfigError(
                f"position has {len(pos)} values but the space has {len(self._dims)} dimensions "
                f"({', '.join(self.names)}); give one value per dimension"
            )
        values = dict(self._template)
        clipped = False
        for i, name, lo, hi, mid, dec in self._dim_steps:
            x = pos[i]
            if not lo <= x <= hi:
                x = mid if x != x else (lo if x < lo else hi)
                pos[i] = x
                clipped = True
            values[name] = dec(x)
        report = Report()
        raws = None
        for name, t, searched in self._order:
            if searched:
                if self._coupled:
                    raws = raws or {}
                    raws[name] = values[name]
                values[name] = t.finish(values[name], values, report)
            else:
                values[name] = t.derive(values, context, report)
        if report.changed and self._coupled:
            self._settle(values, raws or {}, context, report)
        if report.changed:
            for name in dict.fromkeys(report.changed):
                k = self._dim_index.get(name)
                if k is not None:
                    pos[k] = self._dims[k].encode(values[name], values)
        return Decoded(values, np.array(pos, dtype=float), clipped or bool(report.changed),
                       tuple(report.warnings))

    def _settle(self, values: dict[str, Any], raws: dict[str, Any], context: DecodeContext | None,
                report: Report) -> None:
        """Recompute every dependent field until no repair moves a source (coupled relations).

        Two ternary_factories fields sharing a source can undo each other's repair; passes go on
        while a repair still moves something, and a relation still unsatisfied after the last pass
        is an unrepairable decode.
        """
        for _ in range(4):
            moved = len(report.changed)
            for name, t, searched in self._order:
                if searched:
                    values[name] = t.finish(raws[name], values, report)
                else:
                    values[name] = t.derive(values, context, report)
            if len(report.changed) == moved:
                return
        raise DecodeError(
            "coupled ternary_factories relations share a source and no repair satisfies them all "
            f"({', '.join(n for n, t, _ in self._order if isinstance(t, TernaryFactoriesType))})", values)

    def encode(self, values: Mapping[str, Any]) -> np.ndarray:
        """Encode values into a position; dimensions missing from ``values`` take their default.

        Raises:
            ConfigError: a name is not a field, or a string is not one of an enum's values.
        """
        unknown = [k for k in values if k not in self._types]
        if unknown:
            raise ConfigError(f"unknown field(s) {unknown}; fields are: {', '.join(self.field_names)}")
        return np.array([enc(values[name], values) if name in values else default()
                         for name, enc, default in self._encoders], dtype=float)

    def default_position(self) -> np.ndarray:
        """The position of every field's declared ``value`` (the bounds' middle without one)."""
        return np.array([t.default_coordinate() for t in self._dims], dtype=float)

    def describe(self) -> list[dict[str, Any]]:
        """Dimensions as plain dicts (name, dtype, low, high, candidates)."""
        return [
            {"name": d.name, "dtype": d.dtype, "low": d.low, "high": d.high,
             "candidates": list(d.candidates) if d.candidates is not None else None}
            for d in self.dimensions
        ]
