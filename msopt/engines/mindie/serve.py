"""``msopt sim-serve --mindie``: a stand-in for MindIE's ``mindieservice_daemon`` that starts as it does.

It reads its config.json where the daemon does (MindIE-LLM 8b4871a): ``--config-file``
(src/server/daemon/llm_daemon.cpp:50), else ``$MIES_CONFIG_JSON_PATH``, else
``<home>/conf/config.json`` with home ``$MINDIE_LLM_HOME_PATH`` (when it holds ``__init__.py``) or
``$MIES_INSTALL_PATH`` (src/utils/common_util.cpp:170-179, 264-282). Addresses and ports as
ServerConfigManager takes them (src/config_manager/server_config.cpp:298-305, 618-636):
``MIES_CONTAINER_IP`` replaces ``ipAddress``, ``MIES_CONTAINER_MANAGEMENT_IP`` replaces
``managementIpAddress`` (which defaults to ``ipAddress``), ``managementPort`` defaults to ``port``.
After the model load (``--startup-delay``) it refuses to start, as HttpServer::HttpServerInit does
(src/server/endpoint/http_wrapper/http_server.cpp:400-405), when any of ``port``,
``managementPort``, ``metricsPort`` cannot be bound, and otherwise listens with MindIE's grouping of
the business, management and metrics servers (http_server.cpp:411-443): one server in single-port
mode, up to three otherwise. The business server is sim-serve's OpenAI surface, paced by the
embedded simulator with ``maxBatchSize``, ``maxPrefillTokens``, ``maxSeqLen`` and ``tp``/``dp``/``pp``.

One difference, for machines where only loopback may be used: MindIE checks a port by binding it
on INADDR_ANY (http_server.cpp:218-244); the stand-in binds the address it will listen on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from msopt.sim.serve import SimServer, parse_options, step_cost

#: MindIE's own lines (http_server.cpp:404, 444; config_manager_impl.cpp:313; llm_daemon.cpp:319).
PORT_OCCUPIED = "Management or Business or Metrics Http server listen port is occupied"
PORT_INVALID = "Management or Business or Metrics port is invalid."
INFER_PORT_EQUAL = "Endpoint port cannot be equal to multiNodesInferPort."
INIT_FAILED = "Failed to init endpoint! Please check the service log or console output."


def config_path(config_file: str | None, environ: Mapping[str, str]) -> Path:
    """The config.json the daemon reads (see the module docstring)."""
    if config_file:
        return Path(config_file)
    if environ.get("MIES_CONFIG_JSON_PATH"):
        return Path(environ["MIES_CONFIG_JSON_PATH"])
    home = environ.get("MINDIE_LLM_HOME_PATH", "")
    if not (home and (Path(home) / "__init__.py").is_file()):
        home = environ.get("MIES_INSTALL_PATH", "")
    if not home:
        raise SystemExit("msopt sim-serve --mindie: no config.json: pass --config-file, or set "
                         "MIES_CONFIG_JSON_PATH, MINDIE_LLM_HOME_PATH or MIES_INSTALL_PATH")
    return Path(home) / "conf" / "config.json"


def listeners(server: Mapping[str, Any], environ: Mapping[str, str]) -> list[tuple[str, int, tuple[str, ...]]]:
    """``(address, port, roles)`` of each HTTP server MindIE starts, in its order (http_server.cpp:411-443).

    Raises:
        ValueError: MindIE's "port is invalid" case.
    """
    ip = environ.get("MIES_CONTAINER_IP") or str(server.get("ipAddress", "127.0.0.1"))
    mip = environ.get("MIES_CONTAINER_MANAGEMENT_IP") or str(server.get("managementIpAddress",
                                                                         server.get("ipAddress", "127.0.0.1")))
    port = int(server["port"])
    mport = int(server.get("managementPort", port))
    xport = int(server["metricsPort"])
    b, m, x = ("business",), ("management",), ("metrics",)
    if ip == mip and port == mport == xport:
        return [(ip, port, b + m + x)]
    if ip == mip and port == mport:
        return [(ip, port, b + m), (mip, xport, x)]
    if port != mport and mport == xport:
        return [(ip, port, b), (mip, mport, m + x)]
    if port != mport and mport != xport and port != xport:
        return [(ip, port, b), (mip, mport, m), (mip, xport, x)]
    if ip != mip and mport == xport:
        return [(ip, port, b + m), (mip, xport, x)]
    if ip != mip and mport != xport:
        return [(ip, port, b), (mip, mport, m), (mip, xport, x)]
    raise ValueError(PORT_INVALID)


def port_used(host: str, port: int) -> bool:
    """True when ``port`` cannot be bound on ``host`` (IsPortUsed, without SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            print(f"[ERROR] [endpoint] Socket bind failed, bind_result is -1. {exc.strerror or exc}", flush=True)
            return True
    return False


def _sim_options(doc: Mapping[str, Any], args: argparse.Namespace) -> Any:
    """sim-serve's options from the config.json's scheduler and model keys."""
    backend = doc.get("BackendConfig", {})
    schedule = backend.get("ScheduleConfig", {})
    deploy = backend.get("ModelDeployConfig", {})
    model = (deploy.get("ModelConfig") or [{}])[0]
    argv = [str(model.get("modelWeightPath") or "sim-model"),
            "--served-model-name", str(model.get("modelName") or "sim-model"),
            "--tensor-parallel-size", str(int(model.get("tp") or model.get("worldSize") or 1)),
            "--pipeline-parallel-size", str(int(model.get("pp") or 1)),
            "--data-parallel-size", str(int(model.get("dp") or 1)),
            "--max-num-seqs", str(int(schedule.get("maxBatchSize") or 200)),
            "--max-num-batched-tokens", str(int(schedule.get("maxPrefillTokens") or 8192)),
            "--max-model-len", str(int(deploy.get("maxSeqLen") or 2560)),
            "--time-scale", str(args.time_scale), "--sim-hardware", args.sim_hardware]
    if args.sim_model:
        argv += ["--sim-model", args.sim_model]
    return parse_options(argv)


def serve_mindie(argv: Sequence[str]) -> int:
    """Run the MindIE stand-in until SIGTERM; 1 when it refuses to start, as MindIE would."""
    p = argparse.ArgumentParser(prog="msopt sim-serve --mindie", allow_abbrev=False)
    p.add_argument("--mindie", action="store_true", help="act as MindIE's mindieservice_daemon")
    p.add_argument("--config-file", default=None, help="the config.json (as the daemon's own flag)")
    p.add_argument("--expert-parallel", default=None, help="accepted, as by the daemon")
    p.add_argument("--startup-delay", type=float, default=0.0, help="seconds of 'model load' before binding")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply every simulated delay")
    p.add_argument("--sim-hardware", default="atlas-800i-a2", help="simulator hardware catalog entry")
    p.add_argument("--sim-model", default=None, help="simulator model catalog entry (default qwen3-8b)")
    args = p.parse_args(list(argv))  # the daemon refuses unknown arguments too (llm_daemon.cpp:365-373)
    path = config_path(args.config_file, os.environ)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        server = doc["ServerConfig"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"msopt sim-serve --mindie: cannot read ServerConfig of {path}: {exc}", flush=True)
        return 1
    print(f"msopt sim-serve --mindie: config {path}", flush=True)
    if int(server.get("port", 0)) == int(doc.get("BackendConfig", {}).get("multiNodesInferPort", -1)):
        print(INFER_PORT_EQUAL, flush=True)
        return 1
    opts = _sim_options(doc, args)
    try:
        plan = listeners(server, os.environ)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"[ERROR] [endpoint] {exc}", flush=True)
        return 1
    if args.startup_delay > 0:
        time.sleep(args.startup_delay)  # the model loads before the HTTP servers start (endpoint.cpp:44-114)
    host = plan[0][0]
    if any(port_used(address, port) for address, port, _ in plan):
        print(f"[ERROR] [endpoint] {PORT_OCCUPIED}", flush=True)
        print(f"[ERROR] [daemon] {INIT_FAILED}", flush=True)
        return 1
    return asyncio.run(_run(plan, replace(opts, host=host, port=plan[0][1])))


async def _run(plan: Sequence[tuple[str, int, tuple[str, ...]]], opts: Any) -> int:
    from aiohttp import web

    opts = replace(opts, cost=step_cost(opts, ["--tensor-parallel-size", str(opts.tensor_parallel_size),
                                                "--pipeline-parallel-size", str(opts.pipeline_parallel_size),
                                                "--max-num-batched-tokens", str(opts.max_num_batched_tokens),
                                                "--max-num-seqs", str(opts.max_num_seqs)]))
    sim = SimServer(opts)

    async def ok(_: Any) -> Any:
        return web.Response(status=200, text="")

    async def metrics(_: Any) -> Any:
        return web.Response(status=200, text=f"request_running {sim.running}\n")

    runners: list[Any] = []
    for host, port, roles in plan:
        app = sim.app() if "business" in roles else web.Application()
        if "management" in roles:  # http_handler.cpp:527-600 (a few of them)
            for route in ("/v2/health/live", "/v2/health/ready", "/health/timed"):
                app.router.add_get(route, ok)
        if "metrics" in roles:  # http_handler.cpp:1967
            app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError:
            print(f"[ERROR] [endpoint] Failed to listen {host}:{port}, please check if business ip and port are "
                  "legal.", flush=True)
            for r in (*runners, runner):
                await r.cleanup()
            return 1
        runners.append(runner)
        print(f"msopt sim-serve --mindie: {'+'.join(roles)} on http://{host}:{port}", flush=True)
    print("Daemon start success!", flush=True)  # llm_daemon.cpp:323
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for r in runners:
        await r.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(serve_mindie(sys.argv[1:]))
