"""The verdict names the cause of every failed request it counted (issue 52 item 1): each sentence built from the
situation it speaks of, every count computed from the journaled results. Before, a run that failed 14 % of its
requests for their length ended in "NO CONFIGURATION MET THE SLOs ... relax the SLOs" and said nothing else."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from msopt.evaluate.results import EvaluationResult
from msopt.run.validate import load
from msopt.run.verdict import make_verdict

QUICK = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml")  # vLLM, TTFT 2.5 s, success 100 %
SETTINGS = load(QUICK)


def result(eval_id: int, ok: float, *, sent: int = 100, phase: str = "search", **failed: float) -> EvaluationResult:
    metrics = {"generate_speed": 500.0, "time_to_first_token": 1.0, "time_per_output_token": 0.015,
               "success_rate": ok, "throughput": 1.0, "sent_requests": float(sent), **failed}
    return EvaluationResult(eval_id, phase, None, 0, [], [], {"tp": eval_id}, metrics, 10.0 + eval_id)


def test_requests_longer_than_the_context_are_named_with_the_engines_flag_and_the_limit():
    runs = [result(0, 0.86, phase="baseline", failed_too_long=14, context_limit=4096),
            result(1, 0.86, failed_too_long=14, context_limit=4096)]
    v = make_verdict(SETTINGS.config, runs, runs[1])
    assert v.failures == ("failed requests: 28 in 2 of 2 evaluations: 28 longer than --max-model-len 4096 were "
                          "refused by the server")
    assert v.lines()[-1] == "  " + v.failures
    # no configuration met the success-rate SLO: the headline names the cause, not "relax the SLOs"
    assert v.headline() == ("NO CONFIGURATION MET THE SLOs in 2 evaluations: the recommendation below is the least "
                            "bad; 28 request(s) were longer than the server's context (below): shorten the workload's "
                            "requests, or raise the limit")


def test_a_trace_is_held_to_the_context_by_its_length_policy(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n1,100,10\n", encoding="utf-8")
    text = Path(QUICK).read_text(encoding="utf-8")
    start, end = text.index("[simulator.workload]"), text.index("\n[vllm.command]")
    config = tmp_path / "c.toml"
    config.write_text(text[:start] + f'[workload]\ntrace = "{trace}"\n' + text[end:], encoding="utf-8")
    runs = [result(0, 0.5, phase="baseline", sent=2, failed_too_long=1, context_limit=4096)]
    v = make_verdict(load(config).config, runs, runs[0])
    assert v.headline().endswith("1 request(s) were longer than the server's context (below): set [workload] "
                                 "max_model_len with a length_policy, or raise the limit")


def test_each_cause_is_counted_and_the_rest_is_said_to_have_no_recorded_cause():
    runs = [result(0, 0.9, phase="baseline"),                       # 10 failed, none of a recorded cause
            result(1, 0.93, failed_timeout=3, failed_http_503=2, failed_connection=1, failed_incomplete=1),
            result(2, 1.0)]
    v = make_verdict(SETTINGS.config, runs, runs[2])
    assert v.failures == ("failed requests: 17 in 2 of 3 evaluations: 3 timed out (no answer within the request's "
                          "timeout); 2 got HTTP 503 from the server; 1 lost their connection (the server closed it "
                          "or died); 1 ended without their output (the stream stopped early or held no token); 10 of "
                          "no recorded cause (the benchmark reports only its success rate)")
    assert v.headline() == "the recommended configuration meets every SLO"      # it met them: the failures are others'


def test_the_simulated_engines_refusals_and_limits_that_differ():
    runs = [result(0, 0.8, phase="baseline", failed_too_long=15, failed_refused=5, context_limit=4096),
            result(1, 0.9, failed_too_long=10, context_limit=8192)]
    v = make_verdict(SETTINGS.config, runs, runs[1])
    assert v.failures == ("failed requests: 30 in 2 of 2 evaluations: 25 longer than --max-model-len (4096, 8192) "
                          "were refused by the server; 5 were refused by the engine's prefill token budget or KV cache")


def test_an_engine_that_died_is_named_by_its_journaled_crash():
    crash = {"engine": "vLLM", "what": "worker died", "line": "RuntimeError: ...", "log": "logs/eval-1.log",
             "prompt_tokens": 4, "source": "the server log"}
    dead = EvaluationResult(1, "search", 0, 0, [], [], {"tp": 1}, {}, math.inf, error="vLLM's worker died",
                            crash=crash)
    ok = result(0, 1.0, phase="baseline")
    v = make_verdict(SETTINGS.config, [ok, dead, replace(dead, eval_id=2)], ok)
    assert v.failures == ("failed requests: 2 evaluation(s) ended when the engine died: vLLM's worker died serving a "
                          "4-token prompt (log logs/eval-1.log)")
    # every evaluation died: the loud line and the cause
    v = make_verdict(SETTINGS.config, [dead], None)
    assert v.lines() == ["!!! NO CONFIGURATION SUCCEEDED: all 1 evaluations failed; see the errors in the report",
                         "  failed requests: 1 evaluation(s) ended when the engine died: vLLM's worker died serving "
                         "a 4-token prompt (log logs/eval-1.log)"]


def test_a_run_without_failed_requests_says_nothing_of_them():
    runs = [result(0, 1.0, phase="baseline"), result(1, 1.0)]
    v = make_verdict(SETTINGS.config, runs, runs[1])
    assert v.failures == "" and not any("failed" in line for line in v.lines())


def test_requests_answered_with_their_output_cut_are_named_apart_from_the_failed_ones():
    """vLLM serves a prompt that fits with its output cut to the context left (vllm 0.32.0
    entrypoints/serve/utils/api_utils.py:169-205): no request failed, but the measurement is of shorter outputs."""
    runs = [result(0, 1.0, phase="baseline", outputs_cut=7), result(1, 1.0, outputs_cut=5), result(2, 1.0)]
    v = make_verdict(SETTINGS.config, runs, runs[2])
    assert v.failures == ("outputs cut: 12 request(s) in 2 of 3 evaluations were answered with their output cut to "
                          "the context left, shorter than the workload asks (the server clamps max_tokens; set "
                          "[workload] max_model_len with a length_policy to send them as they fit)")
    both = [result(0, 0.9, phase="baseline", failed_too_long=10, context_limit=4096, outputs_cut=3)]
    assert make_verdict(SETTINGS.config, both, both[0]).failures.startswith(
        "failed requests: 10 in 1 of 1 evaluations: 10 longer than --max-model-len 4096 were refused by the server; "
        "outputs cut: 3 request(s) in 1 of 1 evaluations")
