"""Type checks of configuration values shared by every layer (TOML gives ``bool`` for true/false,
and ``bool`` is a subclass of ``int``: ``true`` must never pass for a number).

No msopt imports: any module may use these.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def is_number(v: Any) -> TypeGuard[int | float]:
    """An int or a float, not a bool (inf and nan included)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_int(v: Any) -> TypeGuard[int]:
    """An int, not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_finite(v: Any) -> TypeGuard[int | float]:
    """A finite number (an int, or a float that is neither inf nor nan), not a bool."""
    return is_number(v) and math.isfinite(v)


def port_range(v: Any) -> tuple[int, int] | None:
    """``"LOW-HIGH"`` (``[cluster] ports``) as ``(low, high)``, 1 <= low <= high <= 65535; None when
    ``v`` is not such a range."""
    if not isinstance(v, str):
        return None
    low, sep, high = v.strip().partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        return None
    lo, hi = int(low), int(high)
    return (lo, hi) if 1 <= lo <= hi <= 65535 else None
