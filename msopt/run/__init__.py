"""A run: validation, the driver's stages, the evaluation pool protocol, the store, progress, capacity."""

from __future__ import annotations
