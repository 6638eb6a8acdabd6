"""Time to build the report for ~1,000 points and 1 million telemetry samples.

    python benchmarks/report_build.py [--points 1000] [--samples 1000000]

Generates a SYNTHETIC GPU-shaped results directory (tests/synthetic_results.py:
12 engines of Llama-3.1-8B on an H100, decode and saturation points) and times
load + analysis + PDF + summary + parquet. Target: under 60 s on the 2-core CI machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main() -> int:
    from synthetic_results import Injected, make_results

    from analysis.report.run import build_report

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=1000, help="approximate number of points")
    ap.add_argument("--samples", type=int, default=1_000_000, help="telemetry samples in total")
    ns = ap.parse_args()
    lens = (4096, 8192, 16384, 32768, 65536, 131072)
    prompts = tuple(sorted({int(x) for x in [256 * 1.35**i for i in range(30)] if x < 120_000}))
    concurrency = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
    with tempfile.TemporaryDirectory(prefix="kvprof-report-bench-") as d:
        root = Path(d)
        t0 = time.perf_counter()
        inj = Injected(max_model_lens=lens, concurrency=concurrency, prompt_lens=prompts,
                       telemetry_samples_per_engine=ns.samples // (2 * len(lens)))
        make_results(root, inj)
        n_points = len(list((root / "points").glob("*.json")))
        if n_points > ns.points:  # trim to the asked-for size, keeping every engine
            for p in sorted((root / "points").glob("*decode*.json"))[ns.points - n_points:]:
                p.unlink()
            n_points = len(list((root / "points").glob("*.json")))
        gen = time.perf_counter() - t0
        t0 = time.perf_counter()
        written = build_report(root)
        build = time.perf_counter() - t0
        pages = written["pdf"].read_bytes().count(b"/Type /Page\n") or written["pdf"].read_bytes().count(b"/Type /Page")
        print(f"synthetic results: {n_points} points, {inj.telemetry_samples_per_engine * 2 * len(lens):,} telemetry "
              f"samples in {2 * len(lens)} engines (generated in {gen:.1f} s)")
        print(f"report built in {build:.1f} s ({'under' if build < 60 else 'OVER'} the 60 s target): "
              f"{written['pdf'].stat().st_size / 1e6:.1f} MB PDF, ~{pages} pages, summary.md, results.parquet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
