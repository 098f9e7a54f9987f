"""The field model: dtypes, derived relations, repair, DecodeContext and SearchSpace."""

from __future__ import annotations

from msopt.space import derived as _derived  # noqa: F401  registers the derived dtypes in DTYPES
from msopt.space.context import DecodeContext, resolve_priority
from msopt.space.dtypes import DTYPES, MAX_ENUMERABLE, FieldType
from msopt.space.fields import FieldDecl, parse_field
from msopt.space.space import Decoded, Dimension, SearchSpace

__all__ = [
    "DTYPES",
    "MAX_ENUMERABLE",
    "Decoded",
    "DecodeContext",
    "Dimension",
    "FieldDecl",
    "FieldType",
    "SearchSpace",
    "parse_field",
    "resolve_priority",
]
