"""A run: validation, the run loop (its stages, events and callbacks), the evaluation pool protocol, the store,
capacity."""

from __future__ import annotations
