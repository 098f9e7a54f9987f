"""msopt's version, written here once: msopt.__version__ re-exports it and pyproject.toml reads it."""

__version__ = "0.1.0"
