"""ServeGen as a trace format (alibaba/ServeGen, f891d118): a client's ``chunk-<id>-trace.csv`` (no header, a row
per window: start, rate, CV, arrival pattern and its two parameters) and ``chunk-<id>-dataset.json`` (the length
distributions per window) generate the requests as ServeGen's ``generate_workload`` does. Before, the file was
"format not recognised from its columns"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from msopt.errors import ConfigError
from msopt.workload import FORMATS, Trace, formats_line, read_requests, trace_summary
from msopt.workload.servegen import dataset_path


def client(tmp_path: Path, rows: list[str], dataset: dict | None = None, name: str = "chunk-7") -> Path:
    trace = tmp_path / f"{name}-trace.csv"
    trace.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    if dataset is None:
        dataset = {"0": {"input_tokens": "{100: 0.5, 200: 0.5}", "output_tokens": "{1: 0.5, 2: 0.5}"},
                   "1200": {"input_tokens": "{}", "output_tokens": "{}"}}       # empty: ServeGen leaves it out
    (tmp_path / f"{name}-dataset.json").write_text(json.dumps(dataset), encoding="utf-8")
    return trace


# window 0: 1 req/s, Gamma shape 4 (CV 0.5); window 600: no requests; window 1200: 0.5 req/s, Weibull shape 1
ROWS = ["0,1.0,0.5,Gamma,4.0,0.25", "600,0,0,,0,0", "1200,0.5,1.0,Weibull,1.0,2.0"]


def test_a_servegen_client_is_detected_and_generates_its_windows_requests(tmp_path):
    trace = Trace(client(tmp_path, ROWS))
    assert trace.format == "servegen" and "servegen" in FORMATS and "servegen (window_start_s" in formats_line()
    reqs = list(trace)
    assert reqs == list(Trace(client(tmp_path, ROWS)))                    # seeded: the same requests every read
    assert (np.diff([r.arrival_s for r in reqs]) >= 0).all()
    first = [r for r in reqs if r.row == 1]
    last = [r for r in reqs if r.row == 3]
    # seconds after the first request (a few seconds into the first window): none in the quiet window
    assert max(r.arrival_s for r in first) < 600 and min(r.arrival_s for r in last) > 1190
    assert 595 <= len(first) <= 600 and 295 <= len(last) <= 300     # ceil(rate x 600 s) gaps that fill the window
    gaps = np.diff([r.arrival_s for r in first])
    assert gaps.std() / gaps.mean() == pytest.approx(0.5, abs=0.08)   # Gamma of shape 4: the row's CV
    # the window at 1200 s takes the dataset's window at 0 (its own is empty); one uniform draw for both lengths
    assert {(r.input_tokens, r.output_tokens) for r in reqs} == {(100, 1), (200, 2)}


def test_a_window_of_the_trace_and_the_summary_of_its_windows(tmp_path):
    path = client(tmp_path, ROWS)
    late = read_requests(path, window=(1000, 2000))
    assert 295 <= len(late) <= 300 and all(r.row == 3 for r in late)
    s = trace_summary(Trace(path))
    assert s.format == "servegen" and s.prefix_ceiling is None
    # as compute_stats.py of the shared traces summarises a ServeGen client
    assert s.lines()[1] == ("ServeGen client: 3 windows, 2 active; window rate mean 0.750 req/s (p50 0.750, max "
                            "1.000); window CV p50 0.75, p90 0.95; patterns Gamma 1, Weibull 1")


def test_the_dataset_beside_the_trace(tmp_path):
    assert dataset_path(Path("d/chunk-57-trace.csv")) == Path("d/chunk-57-dataset.json")
    assert (dataset_path(Path("servegen_m-large_chunk-57-trace.sample.csv"))
            == Path("servegen_m-large_chunk-57-dataset.sample.json"))
    path = client(tmp_path, ROWS)
    (tmp_path / "chunk-7-dataset.json").unlink()
    with pytest.raises(ConfigError, match=r"chunk-7-dataset\.json beside the trace .* does not exist"):
        list(Trace(path))


@pytest.mark.parametrize("rows, dataset, match", [
    (["0,1.0,0.5,Gamma,4.0,0.25", "600,1.0,0.5,Pareto,4.0,0.25"], None,
     r"row 2, column 'pattern': 'Pareto' is not a pattern ServeGen draws from \(Gamma, Weibull\)"),
    (["0,1.0,0.5,Gamma,4.0,0.25", "0,1.0,0.5,Gamma,4.0,0.25"], None, r"row 2, column 'window_start_s'.*sort"),
    (["0,1.0,0.5,Gamma,4.0,0.25"], {"600": {"input_tokens": "{5: 1.0}", "output_tokens": "{5: 1.0}"}},
     r"row 1, column 'window_start_s': no window of the dataset starts at or before 0 s"),
    (["0,1.0,0.5,Gamma,4.0,0.25"], {"0": {"input_tokens": "__import__('os')", "output_tokens": "{5: 1.0}"}},
     r"window 0, input_tokens: not a dict of token counts"),
])
def test_bad_files_are_one_line_naming_the_row(tmp_path, rows, dataset, match):
    with pytest.raises(ConfigError, match=match):
        list(Trace(client(tmp_path, rows, dataset)))


def test_format_servegen_on_another_file_says_what_it_needs(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n0,5,5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="format 'servegen' has no header"):
        Trace(p, format="servegen")
    with pytest.raises(ConfigError, match="gives its windows in seconds"):
        Trace(client(tmp_path, ROWS), time_unit="ms")
