"""Process lifecycle: process groups, SIGKILL after grace, parent death, readiness."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from msopt.errors import EvaluationError
from msopt.launch.files import BACKUP_SUFFIX, staged_files
from msopt.launch.logs import LOG_HEADER, tail
from msopt.launch.ports import PortLease, free_port
from msopt.launch.process import ProcessRegistry, _alive, group_members, start_process, wait_ready

PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def out(log: Path) -> str:
    """What the process wrote to its log, without the lines msopt opens every log with."""
    if not log.exists():
        return ""
    return "".join(ln for ln in log.read_text().splitlines(keepends=True) if not ln.startswith(LOG_HEADER))


def wait_for(pred, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def test_sleeping_child_stops_and_leaves_nothing(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "s.log"
    proc = start_process(py("import time, os; print('hi', os.environ['X'], flush=True); time.sleep(60)"),
                         {"X": "a b;c"}, log)
    assert wait_for(lambda: "hi a b;c" in out(log))
    assert proc.running and os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
    mode = stat.S_IMODE(log.stat().st_mode)
    assert not mode & 0o002 and mode & 0o600 == 0o600
    t0 = time.monotonic()
    assert proc.stop(grace=5) == -signal.SIGTERM
    assert time.monotonic() - t0 < 3
    assert not _alive(proc.pid) and group_members(proc.pgid) == []
    assert proc.stop() == -signal.SIGTERM  # idempotent


def test_server_can_call_setpgrp_like_the_mindie_daemon(tmp_path: Path) -> None:
    # MindIE's daemon exits when setpgrp() fails (llm_daemon.cpp); it fails for a session leader,
    # so servers get a process group of their own inside the caller's session.
    code = """
        import os, time
        try:
            os.setpgrp()
            print('setpgrp ok', flush=True)
        except OSError as exc:
            print('setpgrp failed', exc, flush=True)
        time.sleep(60)
    """
    log = tmp_path / "d.log"
    with start_process(py(code), {}, log) as proc:
        assert wait_for(lambda: "setpgrp" in out(log))
        assert "setpgrp ok" in out(log)
        assert os.getsid(proc.pid) == os.getsid(0)
        assert os.getpgid(proc.pid) == proc.pid
    assert not _alive(proc.pid) and group_members(proc.pgid) == []


def test_child_ignoring_sigterm_gets_sigkill(tmp_path: Path) -> None:
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('ready', flush=True)
        time.sleep(60)
    """
    log = tmp_path / "t.log"
    with start_process(py(code), {}, log) as proc:
        assert wait_for(lambda: "ready" in out(log))
        t0 = time.monotonic()
        assert proc.stop(grace=0.5) == -signal.SIGKILL
        assert 0.4 < time.monotonic() - t0 < 5
    assert not _alive(proc.pid)


def test_grandchildren_die_with_the_group(tmp_path: Path) -> None:
    code = f"""
        import subprocess, sys, time
        kids = [subprocess.Popen([{PY!r}, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])
                for _ in range(2)]
        print(' '.join(str(k.pid) for k in kids), flush=True)
        time.sleep(60)
    """
    log = tmp_path / "g.log"
    proc = start_process(py(code), {}, log)
    assert wait_for(lambda: len(out(log).split()) == 2)
    kids = [int(x) for x in out(log).split()]
    assert all(_alive(k) for k in kids)
    proc.stop(grace=0.5)
    assert wait_for(lambda: not any(_alive(k) for k in kids), 5)
    assert group_members(proc.pgid) == []


def test_grandchildren_die_even_after_the_leader_exited(tmp_path: Path) -> None:
    code = f"""
        import subprocess
        k = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(60)'])
        print(k.pid, flush=True)
    """
    log = tmp_path / "o.log"
    proc = start_process(py(code), {}, log)
    assert proc.wait(10) == 0
    kid = int(out(log).split()[0])
    assert _alive(kid)
    proc.stop(grace=1)
    assert wait_for(lambda: not _alive(kid), 5)


def test_child_dies_with_its_parent_on_sigkill(tmp_path: Path) -> None:
    """The actor (here: an intermediate python) is killed -9; its server must not survive."""
    pidfile = tmp_path / "pid"
    code = f"""
        import time, sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from msopt.launch.process import start_process
        p = start_process([{PY!r}, '-c', 'import time; time.sleep(60)'], {{}}, {str(tmp_path / 'c.log')!r})
        open({str(pidfile)!r}, 'w').write(str(p.pid))
        time.sleep(60)
    """
    actor = subprocess.Popen(py(code))
    try:
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text() != "")
        server = int(pidfile.read_text())
        assert _alive(server)
        actor.kill()
        actor.wait()
        assert wait_for(lambda: not _alive(server), 5)
    finally:
        actor.kill()
        actor.wait()


def test_missing_program_is_an_evaluation_error(tmp_path: Path) -> None:
    with pytest.raises(EvaluationError, match="cannot start"):
        start_process(["/nonexistent/msopt-no-such-program"], {}, tmp_path / "x.log")
    with pytest.raises(EvaluationError):
        start_process([], {}, tmp_path / "x.log")


class _Handler(BaseHTTPRequestHandler):
    ready_at = 0.0

    def do_GET(self) -> None:
        ok = self.path == "/health" and time.monotonic() >= self.ready_at
        self.send_response(200 if ok else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_wait_ready_against_a_real_http_server() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    _Handler.ready_at = time.monotonic() + 0.5
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        took = wait_ready("127.0.0.1", server.server_port, "/health", 10, interval=0.1)
        assert 0.3 < took < 5
        with pytest.raises(EvaluationError, match="not ready.*HTTP 503.*wait_start_time"):
            wait_ready("0.0.0.0", server.server_port, "nope", 0.5, interval=0.1)
    finally:
        server.shutdown()
        server.server_close()


def test_wait_ready_with_a_real_server_process(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "http.log"
    with start_process([PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"], {}, log,
                       cwd=tmp_path) as proc:
        wait_ready("127.0.0.1", port, "/", 20, proc, interval=0.1)
    assert not _alive(proc.pid)


def test_process_exiting_before_ready_fails_fast_with_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "dead.log"
    code = "import sys; print('\\n'.join(f'line {i}' for i in range(100))); print('CUDA out of memory'); sys.exit(3)"
    proc = start_process(py(code), {}, log)
    t0 = time.monotonic()
    with pytest.raises(EvaluationError, match=r"(?s)status 3.*line 99.*out of memory") as err:
        wait_ready("127.0.0.1", free_port(), "/health", 60, proc, interval=0.1)
    assert time.monotonic() - t0 < 10
    assert "line 50" not in str(err.value)
    proc.stop()


def test_tail(tmp_path: Path) -> None:
    p = tmp_path / "l.log"
    assert tail(p, 5) == []
    p.write_text("".join(f"{i}\n" for i in range(10000)))
    assert tail(p, 3) == ["9997", "9998", "9999"]
    assert tail(p, 0) == []


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_staged_files_write_and_restore(tmp_path: Path) -> None:
    conf = tmp_path / "conf" / "config.json"
    conf.parent.mkdir()
    conf.write_text('{"a": 1}')
    os.chmod(conf, 0o600)
    fresh = tmp_path / "new" / "other.json"
    with staged_files({str(conf): {"a": 2, "s": "; rm -rf /"}, str(fresh): {"b": 1}}):
        assert json.loads(conf.read_text()) == {"a": 2, "s": "; rm -rf /"}
        assert stat.S_IMODE(conf.stat().st_mode) == 0o600
        assert json.loads((conf.parent / ("config.json" + BACKUP_SUFFIX)).read_text()) == {"a": 1}
        assert json.loads(fresh.read_text()) == {"b": 1}
    assert conf.read_text() == '{"a": 1}' and not fresh.exists()
    assert not (conf.parent / ("config.json" + BACKUP_SUFFIX)).exists()


def test_staged_files_prefers_a_backup_left_by_a_crashed_run(tmp_path: Path) -> None:
    conf = tmp_path / "config.json"
    conf.write_text('{"edited": true}')
    (tmp_path / ("config.json" + BACKUP_SUFFIX)).write_text('{"pristine": true}')
    with pytest.raises(RuntimeError), staged_files({str(conf): {"x": 1}}):
        raise RuntimeError("launch failed")
    assert json.loads(conf.read_text()) == {"pristine": True}


def test_launched_stages_files_starts_waits_and_cleans_up(tmp_path: Path) -> None:
    from msopt.launch.process import launched
    from msopt.launch.render import LaunchSpec

    conf = tmp_path / "config.json"
    conf.write_text('{"port": 1}')
    port = free_port()
    code = f"""
        import json, http.server
        port = json.load(open({str(conf)!r}))["port"]
        print("serving", port, flush=True)
        http.server.HTTPServer(("127.0.0.1", port), http.server.SimpleHTTPRequestHandler).serve_forever()
    """
    spec = LaunchSpec(engine="x", argv=tuple(py(code)), files={str(conf): {"port": port}}, port=port,
                      health_path="/", ready_timeout=20)
    with launched(spec, tmp_path / "l.log", cwd=tmp_path) as proc:
        assert proc.running and json.loads(conf.read_text()) == {"port": port}
    assert conf.read_text() == '{"port": 1}' and not _alive(proc.pid)

    bad = LaunchSpec(engine="x", argv=tuple(py("import sys; print('boom'); sys.exit(2)")),
                     files={str(conf): {"port": 5}}, port=free_port(), ready_timeout=20)
    with pytest.raises(EvaluationError, match="(?s)status 2.*boom"), launched(bad, tmp_path / "b.log"):
        pass
    assert conf.read_text() == '{"port": 1}'


ORPHAN_KIDS = f"""
    import os, signal, subprocess, sys, time
    # like vLLM's CPU workers: renamed, and deaf to SIGTERM once orphaned
    code = ('import os, signal, time; parent = os.getppid(); '
            'signal.signal(signal.SIGTERM, lambda *a: os._exit(0) if os.getppid() == parent else None); '
            'open("/proc/self/comm", "w").write("VLLM::Worker"); time.sleep(120)')
    kids = [subprocess.Popen([{PY!r}, '-c', code]) for _ in range(2)]
    print(' '.join(str(k.pid) for k in kids), flush=True)
    time.sleep(120)
"""


def test_the_group_has_a_watcher_that_stop_takes_down(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    proc = start_process(py("import time; print('up', flush=True); time.sleep(60)"), {}, log)
    assert wait_for(lambda: "up" in out(log))
    watcher = proc.watcher_pid
    assert watcher is not None and os.getpgid(watcher) == proc.pgid
    assert sorted(group_members(proc.pgid)) == sorted([proc.pid, watcher])
    assert proc.stop(grace=5) == -signal.SIGTERM  # the watcher ignores SIGTERM yet costs no grace
    assert group_members(proc.pgid) == [] and not _alive(watcher)


def test_orphaned_workers_die_when_the_launcher_is_killed(tmp_path: Path) -> None:
    """The launcher (an actor, a --no-ray driver) is killed -9: the parent-death signal reaches only
    the server, so its renamed, SIGTERM-deaf workers would be orphaned; the watcher kills them."""
    pidfile = tmp_path / "pid"
    log = tmp_path / "k.log"
    code = f"""
        import time, sys
        sys.path.insert(0, {str(Path(__file__).parents[2])!r})
        from msopt.launch.process import start_process
        p = start_process({py(ORPHAN_KIDS)!r}, {{}}, {str(log)!r})
        open({str(pidfile)!r}, 'w').write(str(p.pid))
        time.sleep(60)
    """
    launcher = subprocess.Popen(py(code))
    try:
        assert wait_for(lambda: pidfile.exists() and pidfile.read_text() != "" and
                        len(out(log).split()) == 2, 30)
        server = int(pidfile.read_text())
        kids = [int(x) for x in out(log).split()]
        assert all(_alive(k) and os.getpgid(k) == server for k in kids)
        launcher.kill()
        launcher.wait()
        assert wait_for(lambda: group_members(server) == [], 30), group_members(server)
        assert not any(_alive(k) for k in [server, *kids])
    finally:
        launcher.kill()
        launcher.wait()


def test_registry_close_stops_running_servers_and_refuses_new_ones(tmp_path: Path) -> None:
    registry = ProcessRegistry()
    log = tmp_path / "r.log"
    procs = [start_process(py(ORPHAN_KIDS), {}, tmp_path / f"r{i}.log", registry=registry) for i in range(2)]
    assert wait_for(lambda: all(len(out(p.log_path).split()) == 2 for p in procs), 30)
    assert sorted(p.pid for p in registry.live()) == sorted(p.pid for p in procs)
    for p in procs:
        p.grace = 1.0
    registry.close()
    assert registry.live() == []
    for p in procs:
        assert p.returncode is not None and group_members(p.pgid) == []
    with pytest.raises(EvaluationError, match="stopping"):
        start_process(py("import time; time.sleep(60)"), {}, log, registry=registry)
    assert not log.exists() or out(log) == ""


def test_stop_from_two_threads_stops_once(tmp_path: Path) -> None:
    proc = start_process(py("import time; time.sleep(60)"), {}, tmp_path / "t2.log")
    codes: list[int | None] = []
    threads = [threading.Thread(target=lambda: codes.append(proc.stop(grace=5))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [-signal.SIGTERM, -signal.SIGTERM] and group_members(proc.pgid) == []


def test_a_server_dying_before_ready_says_why_on_the_first_line(tmp_path: Path) -> None:
    """Issue 25, bug 7: progress lines and tables show an error's first line; it must carry the
    log's crash line, not stop at "ends with:"."""
    log = tmp_path / "dead.log"
    code = ("import sys; print('INFO loading'); print('Traceback (most recent call last):'); "
            "print('  File \"x.py\", line 1'); print('ValueError: max_model_len 4096 exceeds 2048'); "
            "print('INFO shutting down'); sys.exit(1)")
    proc = start_process(py(code), {}, log)
    with pytest.raises(EvaluationError) as err:
        wait_ready("127.0.0.1", free_port(), "/health", 60, proc, interval=0.1)
    first, *rest = str(err.value).splitlines()
    assert "status 1 before" in first and "ValueError: max_model_len 4096 exceeds 2048" in first
    assert str(log) in first and rest[-1] == "INFO shutting down"
    proc.stop()


def test_every_log_opens_with_the_argv_the_changed_env_and_the_cwd(tmp_path: Path) -> None:
    """Issue 25, bug 8 (docs/engines.md: the command msopt runs is in each server log)."""
    log = tmp_path / "h.log"
    argv = [PY, "-c", "import sys; print('served'); sys.exit(0)", "a b", "$(id)"]
    work = tmp_path / "work dir"
    work.mkdir()
    proc = start_process(argv, {"VLLM_CPU_KVCACHE_SPACE": "1", "Q": "x y"}, log, cwd=work)
    assert proc.wait(30) == 0
    lines = log.read_text().splitlines()
    assert lines[0] == LOG_HEADER + "argv: " + json.dumps(argv)
    assert lines[1] == LOG_HEADER + "command: " + shlex.join(argv)
    assert json.loads(lines[2].removeprefix(LOG_HEADER + "env: ")) == {"VLLM_CPU_KVCACHE_SPACE": "1", "Q": "x y"}
    assert lines[3] == f"{LOG_HEADER}cwd: {work}"
    assert lines[4:] == ["served"]
    assert "HOME" not in lines[2]  # only what msopt set, not the inherited environment


def _free_range(n: int) -> tuple[int, int]:
    """``n`` consecutive ports that are all free now (another process on the machine may hold one of the ports
    beside a free one: the range is checked whole, port by port)."""
    import socket

    for _ in range(200):
        base = free_port()
        lo = base if base + n - 1 <= 65535 else base - n + 1
        try:
            socks = []
            for port in range(lo, lo + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return lo, lo + n - 1
    raise AssertionError(f"no {n} consecutive free ports found")


def test_port_leases_from_a_range_never_share_a_port(tmp_path: Path) -> None:
    """Issue 25, bug 9: [cluster] ports; two trials at once (threads here, actors alike) never collide."""
    lo, hi = _free_range(4)
    got: list[list[int]] = []

    errors: list[BaseException] = []

    def trial() -> None:
        try:
            with PortLease((lo, hi)) as lease:
                ports = [lease.take(), lease.take()]
                got.append(ports)
                barrier.wait()  # both hold their ports at once
        except BaseException as exc:  # noqa: BLE001 - reported below; the other trial must not wait forever
            errors.append(exc)
            barrier.abort()

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=trial) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not [e for e in errors if not isinstance(e, threading.BrokenBarrierError)], errors
    taken = [p for ports in got for p in ports]
    held = [p for p in taken if lo <= p <= hi]
    assert len(held) == 4 and len(set(held)) == 4
    with PortLease((lo, hi)) as a, PortLease((lo, hi)) as b:
        first = [a.take() for _ in range(2)] + [b.take() for _ in range(2)]
        assert sorted(first) == list(range(lo, hi + 1))
        with pytest.raises(EvaluationError, match=r'no free port left in \[cluster\] ports = "'):
            b.take()
    with PortLease((lo, hi)) as c:  # given back on close
        assert lo <= c.take() <= hi


def test_a_port_an_outgoing_connection_uses_is_not_a_listened_port():
    """HCCL blocks (PortLease.hold) are refused only for a listener: a connection's local port in the
    ephemeral range, where HCCL's default block lies, made the check fail on a busy machine."""
    import socket

    from msopt.launch.ports import port_free, port_listened

    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())
        with server.accept()[0]:
            local = client.getsockname()[1]
            assert not port_listened(local, "127.0.0.1")
            assert port_listened(server.getsockname()[1], "127.0.0.1")
            assert not port_free(server.getsockname()[1], "127.0.0.1")


def test_a_block_with_a_listener_is_refused_and_one_with_a_connection_is_held():
    import socket

    from msopt.errors import EvaluationError
    from msopt.launch.ports import PortLease

    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client.connect(server.getsockname())
        with server.accept()[0]:
            listened, local = server.getsockname()[1], client.getsockname()[1]
            with PortLease() as lease:
                with pytest.raises(EvaluationError, match=f"port {listened} of {listened}-{listened} is in use"):
                    lease.hold(listened, listened, "X")
                lease.hold(local, local, "Y")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the watcher and the gate are Linux's")
def test_a_server_runs_only_once_its_groups_watcher_is_armed(tmp_path: Path, monkeypatch) -> None:
    """Before, the server was exec'd before its watcher was armed: a launching process killed in between left
    behind whatever the server had spawned (tests/reliability/test_lifecycle.py hit it once at load 10-15). Now
    the server waits behind a gate until the watcher is armed, and a program that cannot start still says why."""
    import msopt.launch.process as process

    seen: list[bytes] = []
    real = process._start_watcher

    def watched(pgid: int):
        time.sleep(0.3)  # ample time for an ungated server to have exec'd
        seen.append(Path(f"/proc/{pgid}/cmdline").read_bytes())
        return real(pgid)

    monkeypatch.setattr(process, "_start_watcher", watched)
    server = [sys.executable, "-c", "import time; time.sleep(30)"]
    with start_process(server, None, tmp_path / "s.log") as proc:
        # when its watcher is started, the process is still the gate (python -I -S -c <gate> ...), not the server
        assert seen[0].split(b"\0")[1:3] == [b"-I", b"-S"], seen[0]
        deadline = time.monotonic() + 30
        while Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:3] != [a.encode() for a in server]:
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.05)
        assert proc.watcher_pid is not None and _alive(proc.watcher_pid)
    with pytest.raises(EvaluationError, match=r"cannot start '/nonexistent/server': No such file or directory"):
        start_process(["/nonexistent/server"], None, tmp_path / "n.log")
