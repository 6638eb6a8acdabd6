"""How fast the serving replay runs (issue #49: 10,000 requests in under 10 s on the 2-core CI machine).

    python benchmarks/replay_speed.py [--limit-s 10]

Replays 10,000 requests of Llama-3.1-8B on one H100 (vLLM 0.32's defaults at max_model_len 8,192) under four loads:
a closed loop at 256 and at 1 in flight, an open Poisson loop below saturation, and one past it (queueing and
preemption). Prints, per load, the wall time, the engine steps replayed and the served figures; exits 1 when a load
takes longer than --limit-s, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time

from analysis import catalog
from analysis.planning.plan import PlanInputs, make_plan
from analysis.planning.served import replay_engine
from analysis.serving.replay import replay
from analysis.serving.workload import ServedWorkload

LOADS = {
    "closed loop, 256 in flight, 512/256": ServedWorkload(num_requests=10_000, prompt_len=512, output_len=256,
                                                          max_concurrency=256),
    "closed loop, 1 in flight, 128/64": ServedWorkload(num_requests=10_000, prompt_len=128, output_len=64,
                                                       max_concurrency=1),
    "Poisson 10/s, 1024/256 ±50 %": ServedWorkload(num_requests=10_000, prompt_len=1024, output_len=256,
                                                   range_ratio=0.5, request_rate=10.0),
    "Poisson 60/s (past saturation), 1024/512": ServedWorkload(num_requests=10_000, prompt_len=1024,
                                                               output_len=512, request_rate=60.0),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit-s", type=float, default=10.0)
    args = ap.parse_args()
    a, gpu, inputs = catalog.resolve_model("llama-3.1-8b")[0], catalog.gpu("h100-sxm"), PlanInputs(max_model_len=8192)
    engine = replay_engine(a, inputs, gpu, make_plan(a, inputs, gpu))
    print(f"{'load':42} {'wall s':>7} {'steps':>9} {'TTFT p50 ms':>11} {'TPOT ms':>8} {'out tok/s':>9} "
          f"{'preempt':>7}")
    slow = []
    for name, w in LOADS.items():
        t0 = time.perf_counter()
        o = replay(engine, w)
        wall = time.perf_counter() - t0
        print(f"{name:42} {wall:7.2f} {o.steps:9,} {o.ttft.median_s * 1e3:11.1f} {o.tpot.mean_s * 1e3:8.2f} "
              f"{o.output_tokens_per_s:9,.0f} {o.preemptions:7,}")
        if wall > args.limit_s:
            slow.append(name)
    if slow:
        print(f"over {args.limit_s:g} s: {', '.join(slow)}")
        return 1
    print(f"every load of 10,000 requests replayed within {args.limit_s:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
