"""``msopt sim-serve --pd-disaggregation``: a stand-in for SGLang's PD router (sglang-router 0.3.2
``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP --decode URL
--host H --port P``), so a disaggregated trial's real process path runs without GPUs.

Each completion goes to a prefill server (round robin, one token: the prompt's prefill) and then,
whole, to a decode server (round robin), whose response is streamed back to the client. ``/health``
answers 200 once every prefill and decode server does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Sequence
from typing import Any


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The router flags msopt renders; others are ignored."""
    p = argparse.ArgumentParser(prog="msopt sim-serve --pd-disaggregation", allow_abbrev=False)
    p.add_argument("--pd-disaggregation", action="store_true")
    p.add_argument("--prefill", nargs="+", action="append", default=[])
    p.add_argument("--decode", nargs=1, action="append", default=[])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    args, _ = p.parse_known_args(list(argv))
    if not args.prefill or not args.decode:
        raise SystemExit("msopt sim-serve: error: --pd-disaggregation needs --prefill URL and --decode URL")
    return args


def serve_router(argv: Sequence[str], argv_file: str | None = None) -> int:
    """Run the stand-in router until SIGTERM/SIGINT; its argv goes to ``argv_file`` (a file, or
    ``argv-<port>-router.json`` in a directory) when given."""
    import aiohttp
    from aiohttp import web

    args = parse(argv)
    path = argv_file
    if path:
        if os.path.isdir(path):
            path = os.path.join(path, f"argv-{args.port}-router.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(list(argv), f)
    prefill = [p[0].rstrip("/") for p in args.prefill]
    decode = [d[0].rstrip("/") for d in args.decode]
    next_p, next_d = itertools.cycle(prefill), itertools.cycle(decode)
    state: dict[str, Any] = {}

    async def on_startup(app: Any) -> None:
        state["session"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def on_cleanup(app: Any) -> None:
        await state["session"].close()

    async def health(request: Any) -> Any:
        for url in (*prefill, *decode):
            try:
                async with state["session"].get(url + "/health", timeout=aiohttp.ClientTimeout(total=5)) as r:
                    if r.status != 200:
                        return web.Response(status=503, text=f"{url} not ready")
            except (TimeoutError, aiohttp.ClientError):
                return web.Response(status=503, text=f"{url} unreachable")
        return web.Response(status=200, text="")

    async def models(request: Any) -> Any:
        async with state["session"].get(decode[0] + "/v1/models") as r:
            return web.json_response(await r.json(), status=r.status)

    async def complete(request: Any) -> Any:
        body = await request.json()
        first = dict(body, max_tokens=1, stream=False)
        first.pop("max_completion_tokens", None)
        try:
            async with state["session"].post(next(next_p) + request.path, json=first) as r:
                if r.status != 200:
                    return web.Response(status=r.status, body=await r.read(), content_type="application/json")
                await r.read()
            async with state["session"].post(next(next_d) + request.path, json=body) as r:
                resp = web.StreamResponse(status=r.status, headers={
                    "Content-Type": r.headers.get("Content-Type", "application/json")})
                await resp.prepare(request)
                async for chunk in r.content.iter_any():
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except aiohttp.ClientError as exc:
            return web.json_response({"object": "error", "message": f"router: a server is gone ({exc})",
                                      "code": 502}, status=502)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/chat/completions", complete)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    print(f"msopt sim-serve: PD router on http://{args.host}:{args.port}: prefill {prefill}, decode {decode}",
          flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, handle_signals=True)
    return 0
