"""Start a local multi-node Ray cluster, run ``msopt optimize --address`` on it, stop the cluster.

Run as a script by tests/multinode/test_cluster.py, in a process of its own, so it never shares
a process with the session Ray of the other tests:
    python tests/multinode/cluster_run.py NODES NPUS_PER_NODE -- msopt optimize args...
Prints the optimize exit code on its last line as ``rc=N``.
"""

from __future__ import annotations

import subprocess
import sys


def main(argv: list[str]) -> int:
    from ray.cluster_utils import Cluster

    nodes, per = int(argv[0]), int(argv[1])
    cmd = argv[argv.index("--") + 1:]
    args = {"num_cpus": 1, "resources": {"NPU": float(per)}, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=args)
    try:
        for _ in range(nodes - 1):
            cluster.add_node(**args)
        cluster.wait_for_nodes()
        out = subprocess.run([sys.executable, "-m", "msopt.cli", *cmd, "--address", cluster.address],
                             timeout=600, check=False)
        print(f"rc={out.returncode}", flush=True)
        return 0
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
