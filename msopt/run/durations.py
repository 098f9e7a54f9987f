"""Time arithmetic of the progress display: the ETA and how a duration is written."""

from __future__ import annotations

import math


def estimate_eta(mean_duration: float | None, remaining: int, concurrency: int) -> float | None:
    """Seconds until ``remaining`` evaluations finish, ``concurrency`` at a time.

    Returns:
        None while no duration is known; 0 when nothing remains.
    """
    if remaining <= 0:
        return 0.0
    if mean_duration is None or not math.isfinite(mean_duration) or mean_duration < 0:
        return None
    return mean_duration * remaining / max(int(concurrency), 1)


def format_duration(seconds: float | None) -> str:
    """``MM:SS``, or ``H:MM:SS`` from one hour on; "--:--" when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "--:--"
    s = max(int(round(seconds)), 0)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"
