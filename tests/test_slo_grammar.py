"""SLOs as one string (msopt/slo.py): ``--slo`` and ``[slo]``, mapped onto the SLO checks, the objective,
the capacity probes and the benchmark's statistics; every bad input one line, exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from msopt.cli.main import main
from msopt.config import load_settings
from msopt.errors import ConfigError
from msopt.evaluate.objective import make_objective
from msopt.run.validate import load
from msopt.slo import parse_slo, slo_checks

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.toml"


def _quickstart_without_slos(extra: str = "") -> str:
    """The quick start with its SLO keys dropped (so [slo] may set them), plus ``extra``."""
    lines = [ln for ln in QUICKSTART.read_text().splitlines()
             if not ln.startswith(("ttft_slo", "tpot_slo", "success_rate_slo"))]
    return "\n".join(lines) + "\n" + extra


@pytest.mark.parametrize("text,expected", [
    ("ttft:p99<500ms,tpot:p95<50ms,success>=0.99",
     {"ttft": ("p99", 0.5), "tpot": ("p95", 0.05), "success": ("mean", 0.99)}),
    ("ttft<2s", {"ttft": ("mean", 2.0)}),
    ("ttft:mean <= 1.5 s ; tpot:p50<20ms", {"ttft": ("mean", 1.5), "tpot": ("p50", 0.02)}),
    ("TTFT:P90<0.25, success>99%", {"ttft": ("p90", 0.25), "success": ("mean", 0.99)}),
    ("tpot:p99<1e2ms", {"tpot": ("p99", 0.1)}),
])
def test_the_grammar(text, expected):
    terms = parse_slo(text)
    assert {m: t.statistic for m, t in terms.items()} == {m: stat for m, (stat, _) in expected.items()}
    assert {m: t.limit for m, t in terms.items()} == pytest.approx({m: limit for m, (_, limit) in expected.items()})


def test_columns_are_the_checked_metrics():
    terms = parse_slo("ttft:p99<500ms,tpot<50ms,success>=0.99")
    assert [t.column for t in terms.values()] == ["ttft_p99", "time_per_output_token", "success_rate"]


BAD = [
    ("", "an SLO string is needed"),
    ("ttft", "is not METRIC[:STATISTIC]<VALUE"),
    ("ttft:p98<1s", "statistic 'p98' is not one of mean, p50, p90, p95, p99"),
    ("ttft:p99>1s", "ttft is a ceiling"),
    ("ttft=1s", "ttft is a ceiling"),
    ("ttft:p99<1min", "unit 'min' is not ms or s"),
    ("ttft<0ms", "the limit must be a positive time"),
    ("itl:p99<50ms", "'itl' is not one msopt measures; use tpot"),
    ("goodput<1s", "use one of ttft, tpot, success"),
    ("success>=1.5", "success must be in (0, 1]"),
    ("success<0.9", "success is a floor"),
    ("success:p99>=0.9", "success takes no statistic"),
    ("success>=0.9ms", "success is a fraction"),
    ("ttft<1s,ttft<2s", "given twice"),
    ("ttft<1s,,tpot<1s", "empty SLO term"),
    ("ttft<1s,", "empty SLO term"),
]


@pytest.mark.parametrize("text,why", BAD)
def test_bad_slo_flag_is_one_line_exit_2(text, why, capsys, tmp_path):
    rc = main(["optimize", "-c", str(QUICKSTART), "--slo", text, "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("msopt: error: --slo: ")
    assert why in err
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


BAD_TABLES = [  # (top-level lines, tables appended, what the message says)
    ("", '[slo]\nitl = "p99<50ms"\n', "unknown key 'itl' in [slo]; use tpot"),
    ("", '[slo]\nttfts = "p99<50ms"\n', "unknown key 'ttfts' in [slo]; valid keys: ttft, tpot, success, spec"),
    ("", "[slo]\nttft = 0.5\n", "[slo] 'ttft' must be a string such as \"p99<500ms\""),
    ("", '[slo]\nttft = "p97<1s"\n', "statistic 'p97'"),
    ("", '[slo]\nsuccess = "0.9"\n', "is not METRIC[:STATISTIC]<VALUE"),
    ("", '[slo]\nspec = "ttft<1s"\nttft = "p99<1s"\n', "names 'ttft' twice"),
    ('slo = "ttft<1s"\n', "", "'slo' must be a table"),
    ("ttft_slo = 3.0\n", '[slo]\nttft = "p99<1s"\n', "'ttft_slo' = 3.0 and [slo] ttft"),
]


@pytest.mark.parametrize("top,tables,why", BAD_TABLES)
def test_bad_slo_table_is_one_line_exit_2_naming_the_file(top, tables, why, capsys, write_toml):
    path = write_toml(top + _quickstart_without_slos(tables))
    rc = main(["validate", "-c", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert str(path) in err and why in err


def test_slo_table_sets_the_limits_and_the_statistics(write_toml):
    path = write_toml(_quickstart_without_slos('[slo]\nttft = "p99<2.5s"\ntpot = "p95 < 20ms"\nsuccess = ">=0.99"\n'))
    checked = load(path)
    s = checked
    assert (s.config.run.slos.ttft, s.config.run.slos.tpot, s.config.run.slos.success_rate) == (2.5, 0.02, 0.99)
    slos = s.config.run.slos
    assert (slos.ttft_metric, slos.tpot_metric) == ("ttft_p99", "tpot_p95")
    # the objective reads the percentiles, not the means
    assert checked.objective.required_metrics >= {"ttft_p99", "tpot_p95"}
    assert "time_to_first_token" not in checked.objective.required_metrics
    base = {"generate_speed": 2000.0, "success_rate": 0.99, "time_to_first_token": 0.1,
            "time_per_output_token": 0.01, "ttft_p99": 2.5, "tpot_p95": 0.02}
    assert math.isclose(checked.objective(base), 1.0)  # at the target and exactly at both limits
    assert checked.objective({**base, "ttft_p99": 5.0}) > checked.objective(base)
    assert checked.objective({**base, "time_to_first_token": 5.0}) == checked.objective(base)
    labels = [c.text() for c in slo_checks(slos, base)]
    assert labels[0].startswith("TTFT p99 2.5 s") and labels[1].startswith("TPOT p95 20 ms")


def test_spec_key_holds_the_whole_string(write_toml):
    path = write_toml(_quickstart_without_slos('[slo]\nspec = "ttft:p90<1s,tpot<30ms"\n'))
    s = load_settings(path)
    assert (s.config.run.slos.ttft_metric, s.config.run.slos.tpot) == ("ttft_p90", 0.03)


def test_flag_overrides_the_file_metric_by_metric(write_toml):
    path = write_toml(_quickstart_without_slos('[slo]\nttft = "p99<2.5s"\ntpot = "p95<20ms"\n'))
    checked = load(path, overrides={"slo": {"ttft": "p50<=1s"}})
    s = checked
    assert (s.config.run.slos.ttft, s.config.run.slos.tpot) == (1.0, 0.02)
    assert (s.config.run.slos.ttft_metric, s.config.run.slos.tpot_metric) == ("ttft_p50", "tpot_p95")
    # the saved configuration reads back as the same run (a resumed run loads it)
    saved = write_toml(s.config.text, "saved.toml")
    assert load_settings(saved).config.run.slos == s.config.run.slos


def test_goodput_objective_holds_the_percentile():
    table = {"ttft_slo": 1.0, "tpot_slo": 0.05, "slo": {"ttft": "p99<1s"}}
    goodput = make_objective("goodput", table)
    metrics = {"generate_speed": 100.0, "success_rate": 1.0, "time_to_first_token": 0.2,
               "time_per_output_token": 0.01, "ttft_p99": 0.9}
    assert goodput(metrics) == -100.0
    assert goodput({**metrics, "ttft_p99": 1.5}) == pytest.approx(1.5)


def test_a_statistic_the_benchmark_does_not_report_is_refused(write_toml, capsys):
    text = _quickstart_without_slos('[slo]\nttft = "p99<2s"\n')
    text = text.replace("simulate = true", "simulate = false").replace(
        'benchmark = "vllm_benchmark"', 'benchmark = "ais_bench"')
    path = write_toml(text)
    with pytest.raises(ConfigError, match=r"\[slo\] ttft: ais_bench does not report the p99 of ttft \(ttft_p99\); "
                                          r"it reports mean"):
        load(path)
    # vllm bench serve reports them (--metric-percentiles), and so does the simulator: p95 included
    load(write_toml(text.replace('"ais_bench"', '"vllm_benchmark"'), "v.toml"))
    load(write_toml(_quickstart_without_slos('[slo]\ntpot = "p95<20ms"\n'), "s.toml"))


def test_the_simulator_measures_what_the_slo_holds(write_toml, capsys):
    path = write_toml(_quickstart_without_slos('[slo]\nttft = "p95<2.5s"\n'))
    assert main(["validate", "-c", str(path)]) == 0
    assert "SLOs: ttft_p95 ≤ 2.5 s, time_per_output_token ≤ 50 ms, success_rate ≥ 100 %" in capsys.readouterr().out
    assert main(["simulate", "-c", str(path)]) == 0
    out = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines() if ": " in line)
    assert float(out["ttft_p90"]) <= float(out["ttft_p95"]) <= float(out["ttft_p99"])
    # the fitness printed is the objective over the p95 (TTFT term 0.2 * exp(4 * (p95 / 2.5 - 1)))
    assert "fitness" in out


def test_capacity_probes_hold_the_slo_statistic(write_toml):
    from msopt.run.capacity import capacity_options

    s = load_settings(write_toml(_quickstart_without_slos('[slo]\nttft = "p99<2.5s"\n')))
    assert capacity_options(s.config).judged(s.config.run.slos) == ("ttft_p99", "time_per_output_token")
    explicit = load_settings(write_toml(_quickstart_without_slos('[slo]\nttft = "p99<2.5s"\n[capacity]\n'
                                                                 'percentile = 90\n'), "p90.toml"))
    assert capacity_options(explicit.config).judged(explicit.config.run.slos) == ("ttft_p90", "tpot_p90")
