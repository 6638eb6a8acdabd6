"""Where a sweep's time goes: engine start-up, time inside vLLM, and the harness's own share.

    python benchmarks/sweep_overhead.py [SPEC] [--out DIR]

Runs ``kvprof sweep SPEC`` (default: sweeps/tiny-cpu.yaml) into a fresh directory and
splits its wall time into
  * engine start-up — building ``vllm.LLM`` in each child (imports, weights, profiling, KV allocation),
  * vLLM calls — time inside ``add_request``/``step``/``get_metrics`` during the phases,
  * probe — the `kvprof probe` child: torch import and its measurements (copy, matmul, attention),
  * harness — everything else: process spawns, interpreter start, prompts, records, polling,
    telemetry. The report is not built (``--no-report``): it is analysis, timed by
    benchmarks/report_build.py.
The target is a harness share under 5 % of the total.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", nargs="?", default=str(ROOT / "sweeps" / "tiny-cpu.yaml"))
    ap.add_argument("--out", help="results directory (default: a new temporary one)")
    ns = ap.parse_args()
    out = Path(ns.out or tempfile.mkdtemp(prefix="kvprof-bench-"))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", ns.spec, "--out", str(out), "--no-report"],
                          cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return proc.returncode

    startup = engine_calls = child_life = 0.0
    engines = 0
    for path in (out / "engines").glob("*.json"):
        if path.name.endswith(".job.json"):
            continue
        rec = json.loads(path.read_text())
        engines += 1
        startup += rec.get("startup_s") or 0.0
        engine_calls += sum(ph.get("engine_s", 0.0) for ph in rec.get("phases", []))
        if rec.get("finished_at") and rec.get("started_at"):
            child_life += rec["finished_at"] - rec["started_at"]
    points = 0
    for path in (out / "points").glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("status") == "ok":
            points += 1
            engine_calls += rec["measurements"].get("engine_s", 0.0)
    probe = json.loads((out / "manifest.json").read_text()).get("probe_wall_s") or 0.0
    harness = wall - startup - engine_calls - probe
    in_child = child_life - startup - engine_calls

    def row(label: str, seconds: float) -> None:
        print(f"  {label:<38} {seconds:8.1f} s  {100 * seconds / wall:5.1f} %")

    print(f"kvprof sweep {Path(ns.spec).name}: {engines} engines, {points} points ok, results in {out}")
    row("total wall time", wall)
    row("engine start-up (vllm.LLM)", startup)
    row("inside vLLM calls (add_request/step)", engine_calls)
    row("probe child (torch + measurements)", probe)
    row("harness", harness)
    row("  of which inside the engine child", in_child)
    row("  of which spawn, imports, parent", harness - in_child)
    verdict = "under" if harness / wall < 0.05 else "OVER"
    print(f"harness share {100 * harness / wall:.1f} % ({verdict} the 5 % target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
