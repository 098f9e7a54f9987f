"""Time decode + encode of the reference 12-field configuration, one DecodeContext per call.

The configuration is the one described in shared/reference/README.md (tp enum, pp enum,
dp ternary_factories product 32 balanced, max_batch_size int 10-1000, a ratio, a bool, a
float, a 101-value range, two more ints, a times and a share field). Prints the median of
several timed rounds; the last line is ``decodes/s: N``.

    python scripts/benchmarks/bench_decode.py [--rounds 7] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from msopt.space import DecodeContext, SearchSpace, parse_field

FIELDS = [
    dict(name="tp", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4, 8], value=4),
    dict(name="pp", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4], value=1),
    dict(name="dp", min=0, max=0, dtype="ternary_factories",
         dtype_param={"target_names": ["tp", "pp"], "product": 32, "priority_policy": "balanced"}),
    dict(name="max_batch_size", min=10, max=1000, dtype="int", value=200),
    dict(name="max_prefill_batch_size", min=0.1, max=0.7, dtype="ratio", dtype_param="max_batch_size"),
    dict(name="support_select_batch", min=0, max=1, dtype="bool"),
    dict(name="gpu_memory_utilization", min=0.7, max=0.95, dtype="float"),
    dict(name="prefill_time_ms_per_req", min=0, max=1000, dtype="range", dtype_param=10),
    dict(name="max_prefill_tokens", min=4096, max=65536, dtype="int"),
    dict(name="max_preempt_count", min=0, max=10, dtype="int"),
    dict(name="total_tokens", min=0, max=0, dtype="times",
         dtype_param={"target_name": "max_batch_size", "product": 2, "dtype": "int"}),
    dict(name="decode_share", min=0, max=0, dtype="share", dtype_param="prefill_time_ms_per_req"),
]


def build_space() -> SearchSpace:
    """The reference configuration's search space."""
    return SearchSpace([parse_field(f, source="bench", section="mindie", index=i) for i, f in enumerate(FIELDS)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    space = build_space()
    low, high = space.bounds
    rng = np.random.default_rng(0)
    positions = rng.uniform(low, high, size=(args.calls, space.ndim))
    n = 20
    rates = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for k in range(args.calls):
            d = space.decode(positions[k], DecodeContext(k % n, n, k // n))
            space.encode(d.values)
        rates.append(args.calls / (time.perf_counter() - t0))
    print(f"space: {space.ndim} dimensions, {len(space.fields)} fields; {args.rounds} rounds of {args.calls} calls")
    print(f"rounds (decodes/s): {', '.join(f'{r:,.0f}' for r in rates)}")
    print(f"decodes/s: {statistics.median(rates):.0f}")


if __name__ == "__main__":
    main()
