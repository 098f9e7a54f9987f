"""The run directory ``<output>/<run-id>/``: journal, swarm checkpoint, results table, resume.

The journal (``journal.jsonl``) is the truth: one JSON line per evaluation, appended in one
``os.write`` and fsynced before anything else is written. ``results.csv`` is derived from it and
can always be rebuilt; ``state.json``, ``best.json`` and the other documents are replaced
atomically (temp file, fsync, ``os.replace``, fsync of the directory).

The parts, as in Optuna's ``storages/journal`` package (a backend, its file lock, the storage on
top): ``_journal.py`` the journal backend, ``_table.py`` the results.csv projection, ``_lock.py`` the
owner's lock, ``_files.py`` the atomic writes they share, ``_store.py`` :class:`RunStore`.
"""

from __future__ import annotations

from msopt.run.store._files import (
    BEST,
    CONFIG,
    JOURNAL,
    LOCK,
    LOGS,
    RESULTS_CSV,
    RUN_META,
    STATE,
    StoreError,
    atomic_write,
    dumps,
    json_safe,
)
from msopt.run.store._journal import JournalFile
from msopt.run.store._lock import RunLock
from msopt.run.store._store import RunStore, config_changes, new_run_id
from msopt.run.store._table import TAIL_COLUMNS, ResultsTable, csv_columns, csv_row

__all__ = [
    "BEST", "CONFIG", "JOURNAL", "LOCK", "LOGS", "RESULTS_CSV", "RUN_META", "STATE", "TAIL_COLUMNS",
    "JournalFile", "ResultsTable", "RunLock", "RunStore", "StoreError",
    "atomic_write", "config_changes", "csv_columns", "csv_row", "dumps", "json_safe", "new_run_id",
]
