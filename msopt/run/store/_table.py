"""results.csv: a projection of the journal, one row per evaluation, that can always be rebuilt."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from msopt.evaluate.results import METRICS, EvaluationResult
from msopt.metrics import MEASURED_COLUMNS
from msopt.run.store._files import StoreError, atomic_write, dumps, why

#: Columns after the metrics and the field columns, in order.
TAIL_COLUMNS = ("error", "real_evaluation", "fitness", "num_prompts",
                "eval_id", "phase", "particle", "iteration", "reused", "attempts", "load")


def csv_columns(field_names: Iterable[str]) -> list[str]:
    """The results.csv header: the metrics, one column per field, :data:`TAIL_COLUMNS`, then the metrics
    measured only where the server reports them (:data:`msopt.metrics.MEASURED_COLUMNS`)."""
    taken = {*METRICS, *TAIL_COLUMNS, *MEASURED_COLUMNS}
    fields = [f for f in field_names if f not in taken]
    return [*METRICS, *fields, *TAIL_COLUMNS, *MEASURED_COLUMNS]


#: What a spreadsheet reads as the start of a formula: msmodeling optix's FORMULA_PREFIXES ("=", "+", "-", "@",
#: Ascend/msmodeling optix/io_utils.py:25) and the tab and carriage return OWASP's "CSV Injection" page adds.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def sanitize_csv_value(text: str) -> str:
    """``text`` with a leading ``'`` when a spreadsheet would read it as a formula (optix's
    ``sanitize_csv_value``, Ascend/msmodeling optix/io_utils.py:75-79): error texts come from server logs."""
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return repr(value)  # a number, negative ones too: never a formula
    if isinstance(value, (list, tuple, Mapping)):
        return dumps(value)
    if isinstance(value, (bool, int)):
        return str(value)
    return sanitize_csv_value(str(value))


def csv_row(result: EvaluationResult, columns: Sequence[str]) -> list[str]:
    """One results.csv row for ``result`` (missing values are empty cells)."""
    error = " | ".join(ln.strip() for ln in result.error.splitlines() if ln.strip()) if result.error else None
    own = {  # one physical line per row: the journal keeps the error text as it was
        "error": error, "real_evaluation": result.real_evaluation, "fitness": result.fitness,
        "num_prompts": result.num_prompts, "eval_id": result.eval_id, "phase": result.phase,
        "particle": result.particle, "iteration": result.iteration, "reused": result.reused,
        "attempts": result.attempts, "load": dict(result.load) or None,
    }
    row = []
    for col in columns:
        if col in own:
            row.append(_cell(own[col]))
        elif col in METRICS or col in MEASURED_COLUMNS:
            row.append(_cell(result.metrics.get(col)))
        else:
            row.append(_cell(result.values.get(col)))
    return row


def csv_text(rows: Iterable[Sequence[str]]) -> str:
    """CSV text of ``rows``, one ``\\n``-terminated line each."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows(rows)
    return buf.getvalue()


class ResultsTable:
    """results.csv of one run: rows appended as results are journaled, rebuilt when it fell behind.

    Attributes:
        path: the file.
        columns: its header.
        stale: an append failed after the journal was written; the next append rebuilds the table.
    """

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self.path = path
        self.columns = list(columns)
        self.stale = False

    def write_header(self, *, resume: bool = True) -> None:
        """Replace the table with its header alone, atomically."""
        atomic_write(self.path, csv_text([self.columns]).encode("utf-8"), resume=resume)

    def append(self, result: EvaluationResult) -> None:
        """Add ``result``'s row (its journal line is written already).

        Raises:
            StoreError: the row could not be written; the table is marked stale.
        """
        try:
            with open(self.path, "a", encoding="utf-8", errors="backslashreplace", newline="") as fh:
                start = fh.tell()
                try:
                    fh.write(csv_text([csv_row(result, self.columns)]))
                    fh.flush()
                except OSError:
                    fh.truncate(start)
                    raise
        except OSError as exc:
            self.stale = True
            raise StoreError(f"{self.path}: cannot add evaluation {result.eval_id}: "
                             f"{why(exc)}; it is safe in the journal and results.csv is "
                             "rebuilt from it on --resume") from None

    def rebuild(self, results: Iterable[EvaluationResult]) -> None:
        """Regenerate the table from ``results`` (the journal), atomically."""
        rows = [self.columns] + [csv_row(r, self.columns) for r in results]
        try:
            atomic_write(self.path, csv_text(rows).encode("utf-8", "backslashreplace"))
        except StoreError:
            self.stale = True
            raise
        self.stale = False
