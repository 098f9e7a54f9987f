"""``msopt sim-serve``: an OpenAI-compatible HTTP server that stands in for vLLM.

It accepts vLLM's ``serve`` command line (``MODEL --host H --port P --served-model-name N
--tensor-parallel-size ...``; SGLang's ``--model-path``/``--max-running-requests`` too; unknown
flags are accepted and ignored) and serves ``GET /health``, ``GET /v1/models`` and streaming or
non-streaming ``POST /v1/completions`` and ``/v1/chat/completions``. Tokens are paced by
:func:`_pace` with the embedded simulator's step-time model (``--sim-hardware``,
``--sim-model``), scaled by ``--time-scale`` so tests stay short. At most ``max_num_seqs x data_parallel_size`` requests
run at once; the rest queue.

When ``$MSOPT_SIM_SERVE_ARGV_FILE`` is set, the argv received is written there as a JSON list (into
``argv-<port>.json`` when it names a directory),
so a test can check what the server was launched with.

With ``--mindie`` ``msopt sim-serve`` stands in for MindIE's daemon instead (:mod:`msopt.engines.mindie.serve`),
with ``--pd-disaggregation`` for SGLang's PD router (:mod:`msopt.engines.sglang.router`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from msopt.checks import is_int
from msopt.errors import MsoptError
from msopt.sim.catalog_load import list_models, load_hardware, load_model
from msopt.sim.perf import StepCost
from msopt.sim.personality import knobs_from_argv
from msopt.sim.rendezvous import Placement, follow, lead, placement

ARGV_FILE_ENV = "MSOPT_SIM_SERVE_ARGV_FILE"


@dataclass(frozen=True)
class SimServeOptions:
    """What sim-serve took from its command line."""

    model: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8000
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 32768
    time_scale: float = 1.0
    startup_delay: float = 0.0
    fail_after: int = 0
    unknown: tuple[str, ...] = ()
    hardware: str = "atlas-800i-a2"
    sim_model: str = "qwen3-8b"
    cost: Any = field(default=None, compare=False, repr=False)


def build_parser() -> argparse.ArgumentParser:
    """The parser of vLLM's serve flags that sim-serve reads (unknown ones are kept aside)."""
    p = argparse.ArgumentParser(prog="msopt sim-serve", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    p.add_argument("model", nargs="?", default=None, help="model (as for 'vllm serve MODEL')")
    p.add_argument("--model", "--model-path", dest="model_opt", default=None, help="model, as a flag")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tensor-parallel-size", "-tp", "--tp-size", "--tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", "--pp-size", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", "--dp-size", "--dp", type=int, default=1)
    p.add_argument("--max-num-seqs", "--max-running-requests", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", "--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--max-model-len", "--context-length", type=int, default=32768)
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply every simulated delay (0.01: a hundred times faster)")
    p.add_argument("--startup-delay", type=float, default=0.0,
                   help="seconds before /health answers 200 (a model load)")
    p.add_argument("--fail-after", type=int, default=0, metavar="N",
                   help="crash (exit 1 at once) when the N-th completion request arrives: a fault to test "
                        "what msopt does when a server dies mid-benchmark; 0 never")
    # multi-node placement (vLLM, SGLang): parsed here so they are not listed as ignored; the
    # rendezvous reads them from the raw command line (msopt.sim.rendezvous)
    for flag in ("--nnodes", "-n", "--node-rank", "-r", "--master-addr", "--master-port", "--dist-init-addr",
                 "--data-parallel-size-local", "-dpl", "--data-parallel-start-rank", "-dpr",
                 "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp"):
        p.add_argument(flag, dest="placement_" + flag.strip("-").replace("-", "_"), default=None,
                       help=argparse.SUPPRESS)
    p.add_argument("--headless", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--fail-node", type=int, default=0, metavar="R",
                   help="node R (>= 1) of a multi-node instance exits 1 right after joining: a fault to test "
                        "that a trial spanning nodes fails and is stopped on every node; 0 never")
    p.add_argument("--sim-hardware", default="atlas-800i-a2",
                   help="simulator hardware catalog entry (or TOML path) whose step timing paces tokens")
    p.add_argument("--sim-model", default=None,
                   help="simulator model catalog entry (or TOML path); default: the catalog entry named "
                        "like MODEL's last path component, else qwen3-8b")
    return p


def _catalog_model(model: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    name = model.rstrip("/").rsplit("/", 1)[-1].lower()
    return name if name in list_models() else "qwen3-8b"


def step_cost(opts: SimServeOptions, argv: Sequence[str]) -> Any:
    """The simulator's step-time model for the engine this command line describes."""
    try:
        hw, model = load_hardware(opts.hardware), load_model(opts.sim_model)
        knobs = knobs_from_argv("vllm", ("vllm", "serve", *argv))
    except MsoptError as exc:
        raise SystemExit(f"msopt sim-serve: error: {exc}") from None
    return StepCost(hw, model, knobs, "bf16", "bf16")


def parse_options(argv: Sequence[str]) -> SimServeOptions:
    """Parse a vLLM-style command line; flags sim-serve does not model are kept in ``unknown``."""
    args, unknown = build_parser().parse_known_args(list(argv))
    model = args.model or args.model_opt or "sim-model"
    name = args.served_model_name[0] if args.served_model_name else model
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        if getattr(args, key) < 1:
            raise SystemExit(f"msopt sim-serve: error: --{key.replace('_', '-')} must be >= 1")
    if not args.time_scale >= 0:
        raise SystemExit("msopt sim-serve: error: --time-scale must be >= 0")
    return SimServeOptions(
        model=model, served_model_name=name, host=args.host, port=args.port,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        data_parallel_size=args.data_parallel_size, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
        time_scale=args.time_scale, startup_delay=args.startup_delay, fail_after=max(0, args.fail_after),
        unknown=tuple(unknown),
        hardware=args.sim_hardware, sim_model=_catalog_model(model, args.sim_model),
    )


def _pace(opts: SimServeOptions, *, prompt_tokens: int, running: int) -> tuple[float, float]:
    """(time to first token, time per output token) in seconds for one request.

    Priced by the embedded simulator's step model (msopt.sim.perf.StepCost) for the command
    line's tp/pp/max_num_batched_tokens on ``--sim-hardware`` with ``--sim-model``: the prompt is
    prefilled in chunks of max_num_batched_tokens beside the running decodes of its replica, and a
    decode step costs what a batch of the running sequences costs. Scaled by ``--time-scale``.
    """
    cost = opts.cost
    if cost is None:
        cost = step_cost(opts, ["--tensor-parallel-size", str(opts.tensor_parallel_size),
                                 "--pipeline-parallel-size", str(opts.pipeline_parallel_size),
                                 "--max-num-batched-tokens", str(opts.max_num_batched_tokens),
                                 "--max-num-seqs", str(opts.max_num_seqs)])
    p = max(1, prompt_tokens)
    n = max(1, -(-max(running, 1) // opts.data_parallel_size))  # sequences in this replica
    chunk = min(p, opts.max_num_batched_tokens)
    chunks = -(-p // chunk)
    prefill_step = cost.step(n_seqs=n, n_tokens=chunk + n - 1, n_logits=n,
                             attn_pairs=chunk * (p + chunk) / 2.0, kv_read_tokens=n * p)
    a, b = cost.decode_coeffs(n)
    tpot = a + b * n * p
    return chunks * prefill_step * opts.time_scale, tpot * opts.time_scale


def _count_tokens(body: dict[str, Any], chat: bool) -> int:
    if chat:
        msgs = body.get("messages") or []
        text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
    else:
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            if prompt and all(isinstance(t, int) for t in prompt):
                return len(prompt)
            prompt = " ".join(str(x) for x in prompt)
        text = str(prompt)
    return max(1, len(text.split()))


def _read_body(raw: bytes, charset: str | None, chat: bool) -> tuple[dict[str, Any], str | None]:
    """The request's JSON object, or the reason for a 400: undecodable, not JSON, nested too
    deeply, or fields of the wrong type (``messages``, ``prompt``, ``stream``, ``stream_options``)."""
    try:
        text = raw.decode(charset or "utf-8")
    except LookupError:
        return {}, f"unknown charset {charset!r}; send UTF-8"
    except UnicodeDecodeError as exc:
        return {}, f"request body is not valid {charset or 'utf-8'} ({exc.reason} at byte {exc.start})"
    try:
        body = json.loads(text)
    except RecursionError:
        return {}, "request body is nested too deeply"
    except ValueError:
        return {}, "request body is not JSON"
    if not isinstance(body, dict):
        return {}, "request body must be a JSON object"
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
            return {}, "'messages' must be a list of objects"
    elif not isinstance(body.get("prompt", ""), (str, list)):
        return {}, "'prompt' must be a string or a list"
    if not isinstance(body.get("stream", False), bool):
        return {}, "'stream' must be true or false"
    opts = body.get("stream_options")
    if opts is not None and (not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool)):
        return {}, "'stream_options' must be an object with a boolean 'include_usage'"
    return body, None


class SimServer:
    """The HTTP handlers and the batch state of one sim-serve process."""

    def __init__(self, opts: SimServeOptions) -> None:
        self.opts = opts
        self.running = 0
        self.requests = 0
        self.ready_at = time.monotonic() + opts.startup_delay
        self.slots: asyncio.Semaphore | None = None  # made inside the server's event loop
        self.followers: list[Any] = []  # connections of the other nodes of a multi-node instance

    def app(self) -> Any:
        """The aiohttp application."""
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", lambda r: self.complete(r, chat=False))
        app.router.add_post("/v1/chat/completions", lambda r: self.complete(r, chat=True))

        async def on_startup(_: Any) -> None:
            self.slots = asyncio.Semaphore(self.opts.max_num_seqs * self.opts.data_parallel_size)

        app.on_startup.append(on_startup)
        return app

    async def health(self, request: Any) -> Any:
        from aiohttp import web

        if time.monotonic() < self.ready_at:
            return web.Response(status=503, text="loading")
        return web.Response(status=200, text="")

    async def models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response({"object": "list", "data": [{
            "id": self.opts.served_model_name, "object": "model", "created": int(time.time()),
            "owned_by": "msopt-sim", "root": self.opts.model, "max_model_len": self.opts.max_model_len}]})

    def _error(self, status: int, message: str) -> Any:
        from aiohttp import web

        return web.json_response({"object": "error", "message": message, "type": "BadRequestError",
                                  "code": status}, status=status)

    def _sizes(self, body: dict[str, Any], chat: bool) -> tuple[int, int, tuple[int, str] | None]:
        """A request's prompt tokens and ``max_tokens``, and the status and message it is refused with (None:
        served). As vLLM 0.32.0: a prompt that fills the context is refused (vllm/renderers/params.py:516-532,
        vllm/v1/engine/input_processor.py:592-603); a shorter one is served with ``max_tokens`` cut to the
        context left (vllm/entrypoints/serve/utils/api_utils.py:169-205 get_max_tokens)."""
        if body.get("model") not in (None, self.opts.served_model_name, self.opts.model):
            return 0, 0, (404, f"The model `{body.get('model')}` does not exist.")
        prompt_tokens = _count_tokens(body, chat)
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 16))
        if not is_int(max_tokens) or max_tokens < 1:
            return prompt_tokens, 0, (400, f"max_tokens must be a positive integer, got {max_tokens!r}")
        limit = self.opts.max_model_len
        if prompt_tokens > limit:
            return prompt_tokens, max_tokens, (400, f"This model's maximum context length is {limit} tokens. "
                                                    f"However, your prompt contains {prompt_tokens} input tokens, "
                                                    "which exceeds this limit even without any output tokens. "
                                                    "Please reduce the length of the input prompt.")
        if prompt_tokens == limit:
            return prompt_tokens, max_tokens, (400, f"The decoder prompt (length {prompt_tokens}) plus the number "
                                                    "of requested output tokens (at least 1) is longer than the "
                                                    f"maximum model length of {limit}. Make sure that "
                                                    "`max_model_len` is no smaller than the number of text tokens "
                                                    "(prompt + requested output tokens).")
        return prompt_tokens, min(max_tokens, limit - prompt_tokens), None

    async def complete(self, request: Any, *, chat: bool) -> Any:
        """Serve one completion, streaming SSE chunks when ``stream`` is true."""
        from aiohttp import web

        body, problem = _read_body(await request.read(), request.charset, chat)
        if problem is not None:
            return self._error(400, problem)
        prompt_tokens, max_tokens, refused = self._sizes(body, chat)
        if refused is not None:
            return self._error(*refused)
        stream = bool(body.get("stream", False))
        usage_wanted = bool((body.get("stream_options") or {}).get("include_usage", False))  # checked above
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        name = self.opts.served_model_name
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
            if chat:
                delta = {} if text is None else {"role": "assistant", "content": text}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            return {"id": rid, "object": obj, "created": created, "model": name, "choices": [choice]}

        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                 "total_tokens": prompt_tokens + max_tokens}
        assert self.slots is not None  # set on startup
        self.requests += 1
        if self.opts.fail_after and self.requests >= self.opts.fail_after:
            print(f"RuntimeError: EngineCore encountered a fatal error (msopt sim-serve --fail-after "
                  f"{self.opts.fail_after})", flush=True)
            os._exit(1)
        async with self.slots:
            self.running += 1
            try:
                ttft, _ = _pace(self.opts, prompt_tokens=prompt_tokens, running=self.running)
                await asyncio.sleep(ttft)
                if not stream:
                    for _ in range(max_tokens - 1):
                        await asyncio.sleep(_pace(self.opts, prompt_tokens=prompt_tokens,
                                                  running=self.running)[1])
                    text = " tok" * max_tokens
                    if chat:
                        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": "length"}
                    else:
                        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
                    return web.json_response({"id": rid, "object": "chat.completion" if chat else
                                              "text_completion", "created": created, "model": name,
                                              "choices": [choice], "usage": usage})
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                   "Cache-Control": "no-cache"})
                await resp.prepare(request)

                async def send(payload: Any) -> None:
                    data = payload if isinstance(payload, str) else json.dumps(payload)
                    await resp.write(f"data: {data}\n\n".encode())

                try:
                    for i in range(max_tokens):
                        if i:
                            await asyncio.sleep(_pace(self.opts, prompt_tokens=prompt_tokens,
                                                      running=self.running)[1])
                        await send(chunk(" tok", "length" if i == max_tokens - 1 else None))
                    if usage_wanted:
                        await send({"id": rid, "object": obj, "created": created, "model": name,
                                    "choices": [], "usage": usage})
                    await send("[DONE]")
                    await resp.write_eof()
                except ConnectionError:  # the client went away: one line, not a traceback
                    print(f"msopt sim-serve: {rid}: the client dropped the stream", flush=True)
                return resp
            finally:
                self.running -= 1


def serve(argv: Sequence[str]) -> int:
    """Run sim-serve with this vLLM-style command line until SIGTERM/SIGINT (``msopt sim-serve``
    hands ``--mindie`` and ``--pd-disaggregation`` to the other stand-ins: :mod:`msopt.cli.serve`)."""
    from aiohttp import web

    argv = list(argv)
    path = os.environ.get(ARGV_FILE_ENV)
    opts = parse_options(argv)
    opts = replace(opts, cost=step_cost(opts, argv))  # priced once, from the full command line
    if path and os.path.isdir(path):  # one file per server when several run at once
        rank = placement(argv)
        suffix = f"-node{rank.rank}" if rank is not None and rank.rank else ""
        path = os.path.join(path, f"argv-{opts.port}{suffix}.json")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(argv, f)
    place = placement(argv)
    if place is not None and place.rank > 0:
        return _follower(place, argv, path, opts)
    server = SimServer(opts)
    if place is not None:
        server.ready_at = float("inf")  # ready once every node has joined (see msopt.sim.rendezvous)
        _lead_in_background(server, place, argv)
    print(f"msopt sim-serve: {opts.served_model_name} (tp={opts.tensor_parallel_size}, "
          f"pp={opts.pipeline_parallel_size}, dp={opts.data_parallel_size}, max_num_seqs="
          f"{opts.max_num_seqs}, time_scale={opts.time_scale}) on http://{opts.host}:{opts.port}",
          flush=True)
    if opts.unknown:
        print(f"msopt sim-serve: ignoring {' '.join(opts.unknown)}", flush=True)
    web.run_app(server.app(), host=opts.host, port=opts.port, print=None, access_log=None,
                handle_signals=True)
    return 0


def _lead_in_background(server: SimServer, place: Placement, argv: Sequence[str]) -> None:
    """Rank 0: run the rendezvous beside the HTTP server; ready when it succeeds, exit 1 when not."""
    def run() -> None:
        conns, problem = lead(place, argv, timeout=max(60.0, server.opts.startup_delay + 60.0))
        if problem:
            print(f"RuntimeError: msopt sim-serve: multi-node start failed: {problem}", flush=True)
            os._exit(1)
        print(f"msopt sim-serve: all {place.nnodes} nodes joined at {place.host}:{place.port}", flush=True)
        server.ready_at = time.monotonic() + server.opts.startup_delay
        server.followers = conns  # kept open: the other nodes exit when this one is gone
        for i, conn in enumerate(conns):  # like the engines: a lost node is fatal to the instance
            threading.Thread(target=watch, args=(conn, i), daemon=True).start()

    def watch(conn: Any, i: int) -> None:
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        print(f"RuntimeError: msopt sim-serve: a node of the instance is gone (connection {i + 1} of "
              f"{place.nnodes - 1} closed)", flush=True)
        os._exit(1)

    threading.Thread(target=run, daemon=True).start()


def _follower(place: Placement, argv: Sequence[str], path: str | None, opts: SimServeOptions) -> int:
    """Rank >= 1: join node 0, serve no HTTP, exit when node 0 is gone."""
    print(f"msopt sim-serve: node {place.rank} of {place.nnodes} joining {place.host}:{place.port}", flush=True)
    conn = follow(place, argv, timeout=max(60.0, opts.startup_delay + 60.0))
    print(f"msopt sim-serve: node {place.rank} joined", flush=True)
    if build_parser().parse_known_args(list(argv))[0].fail_node == place.rank:
        print(f"RuntimeError: msopt sim-serve --fail-node {place.rank}: node {place.rank} exits", flush=True)
        os._exit(1)
    with conn:
        while conn.recv(4096):
            pass
    print(f"msopt sim-serve: node 0 is gone; node {place.rank} exits", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
