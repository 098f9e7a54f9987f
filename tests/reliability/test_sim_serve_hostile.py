"""msopt sim-serve answers hostile requests with a 400 and a reason, never a 500 with a traceback
in its log; a dropped stream is one log line (issue 18, item 7)."""

from __future__ import annotations

import json
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from msopt.launch.ports import free_port
from msopt.launch.process import start_process, wait_ready
from msopt.sim.serve import _read_body

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

HOSTILE = {
    "stream_options string": (b'{"prompt": "x", "max_tokens": 2, "stream_options": "x"}', "application/json",
                              "stream_options"),
    "messages a number": (b'{"messages": 5, "max_tokens": 2}', "application/json", "messages"),
    "nested 200000 deep": (b"[" * 200_000 + b"]" * 200_000, "application/json", "nested too deeply"),
    "unknown charset": (b'{"prompt": "x"}', "application/json; charset=x-no-such-charset", "charset"),
    "not the charset it says": (b'{"prompt": "\xff\xfe"}', "application/json; charset=utf-8", "not valid"),
    "stream a string": (b'{"prompt": "x", "stream": "yes"}', "application/json", "stream"),
    "prompt an object": (b'{"prompt": {"a": 1}}', "application/json", "prompt"),
}


def _post(url: str, data: bytes, ctype: str) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": ctype})
    try:
        with OPENER.open(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("case", list(HOSTILE))
def test_read_body_gives_a_reason(case: str) -> None:
    data, ctype, reason = HOSTILE[case]
    charset = ctype.split("charset=")[1] if "charset=" in ctype else None
    chat = case.startswith("messages")
    body, problem = _read_body(data, charset, chat)
    assert problem is not None and reason in problem


def test_hostile_requests_get_400_and_the_log_no_traceback(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "s.log"
    argv = [sys.executable, "-m", "msopt.cli.serve", "M", "--port", str(port), "--time-scale", "0.01"]
    with start_process(argv, {}, log) as proc:
        wait_ready("127.0.0.1", port, "/health", 60, proc, interval=0.1)
        base = f"http://127.0.0.1:{port}"
        for case, (data, ctype, reason) in HOSTILE.items():
            path = "/v1/chat/completions" if case.startswith("messages") else "/v1/completions"
            code, body = _post(base + path, data, ctype)
            assert code == 400, (case, code, body[:300])
            assert reason in json.loads(body)["message"], (case, body[:300])

        # a client that drops a long stream half way
        payload = json.dumps({"prompt": "x", "max_tokens": 2000, "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        # the server goes on serving
        code, body = _post(base + "/v1/completions", b'{"prompt": "x", "max_tokens": 2}', "application/json")
        assert code == 200
        proc.popen.terminate()
        proc.wait(30)
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in text and "Error handling request" not in text, text[-3000:]
