"""What running engines side by side buys: the demo sweep one engine at a time, with --devices, and through
--ray, in one run.

    python benchmarks/parallel_sweep.py [--spec sweeps/tiny-cpu.yaml] [--devices all] [--gpus 8] [--no-ray]

Runs the spec three times through `kvprof sweep` (no report): sequentially, with the device pool, and on a
local Ray cluster this script starts on loopback (this machine's CPUs standing in for GPUs; skipped, saying
why, without the ray extra). It prints each run's wall time, the most engines that ran at once, and whether
each measured the same capacity facts and the same set of ok points as the sequential run. Then, from the
sequential run's own records, it packs each engine configuration's work (its offline launch, then its
server's: start-up and points) onto --gpus devices in plan order, each on the first devices free, taking
tensor_parallel_size of them, and prints what the sweep would take there: the start-ups stay, the wait for a
device goes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/ray_local.py: the local Ray cluster the tests use


def sweep(spec: Path, out: Path, *extra: str) -> float:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", str(spec), "--out", str(out),
                           "--no-report", *extra], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"kvprof sweep {' '.join(extra)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - t0


def records(out: Path) -> tuple[dict[str, dict], list[str]]:
    engines = {p.stem: json.loads(p.read_text()) for p in (out / "engines").glob("*.json")}
    ok = sorted(p.stem for p in (out / "points").glob("*.json") if json.loads(p.read_text())["status"] == "ok")
    return engines, ok


def launches(out: Path) -> list[tuple[str, int, float, float]]:
    """(engine id, devices, start-up s, work s) of every engine configuration's work, in the order the sweep
    ran it: its offline launch and its server's, which run one after the other on the same devices."""
    units: dict[str, list[float]] = {}  # id → [tp, start-up, work, first launch time]
    for kind in ("engines", "servers"):
        for p in (out / kind).glob("*.json"):
            r = json.loads(p.read_text())
            proc, ready = r.get("process") or {}, r.get("ready_at")
            if not proc or ready is None:
                continue
            u = units.setdefault(r["id"], [r["engine"]["tensor_parallel_size"], 0.0, 0.0, proc["launched_at"]])
            u[1] += ready - proc["launched_at"]
            u[2] += proc["exited_at"] - ready
            u[3] = min(u[3], proc["launched_at"])
    return [(eid, int(u[0]), u[1], u[2]) for eid, u in sorted(units.items(), key=lambda kv: kv[1][3])]


def makespan(items: list[tuple[str, int, float, float]], devices: int) -> float:
    """List scheduling in order: each launch starts when its tensor_parallel_size devices are free."""
    free = [0.0] * devices  # the time each device becomes free
    end = 0.0
    for _, tp, startup, work in items:
        free.sort()
        start = free[tp - 1]
        for i in range(tp):
            free[i] = start + startup + work
        end = max(end, start + startup + work)
    return end


def ray_line(args: argparse.Namespace, seq_out: Path, ray_out: Path, t_seq: float) -> str:
    """The run through --ray on a local cluster (started here, its start not timed), as one line."""
    from ray_local import local_ray, ray_missing

    if args.no_ray or ray_missing():
        return f"  --ray                      not run: {'--no-ray' if args.no_ray else ray_missing()}"
    with local_ray(num_cpus=os.cpu_count() or 1) as cluster:
        t_ray = sweep(args.spec, ray_out, "--ray", cluster.address)
    (a, ok_a), (c, ok_c) = records(seq_out), records(ray_out)
    same = all(a[k]["capacity"] == c[k]["capacity"] for k in a) and ok_a == ok_c
    m = json.loads((ray_out / "manifest.json").read_text())
    nodes = ", ".join(f"{n['ip']} ({n['devices']} {m['ray']['resource']})" for n in m["ray"]["nodes"])
    return (f"  --ray (local cluster)      {t_ray:7.1f} s  ({t_seq / t_ray:.2f}x; nodes {nodes}, at most "
            f"{m['max_concurrent_engines']} at once; same capacity facts and ok points: {'yes' if same else 'NO'})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "sweeps" / "tiny-cpu.yaml")
    ap.add_argument("--devices", default="all")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--no-ray", action="store_true", help="skip the run through a local Ray cluster")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seq_out, par_out = Path(tmp) / "seq", Path(tmp) / "par"
        t_seq = sweep(args.spec, seq_out)
        t_par = sweep(args.spec, par_out, "--devices", args.devices)
        (a, ok_a), (b, ok_b) = records(seq_out), records(par_out)
        same = all(a[k]["capacity"] == b[k]["capacity"] for k in a) and ok_a == ok_b
        m = json.loads((par_out / "manifest.json").read_text())
        print(f"{os.cpu_count()} CPUs; {args.spec.name}: {len(a)} engines, {len(ok_a)} ok points")
        print(f"  one engine at a time       {t_seq:7.1f} s")
        pool = ", ".join(m["device_pool"])
        print(f"  --devices {args.devices:<17}{t_par:7.1f} s  ({t_seq / t_par:.2f}x; pool {pool}, "
              f"at most {m['max_concurrent_engines']} at once)")
        print(f"  same capacity facts and ok points: {'yes' if same else 'NO'}")
        print(ray_line(args, seq_out, Path(tmp) / "ray", t_seq))
        items = launches(seq_out)
        startup, work = sum(s for _, _, s, _ in items), sum(w for _, _, _, w in items)
        print(f"from the sequential run's {len(items)} engine configurations (offline and serve launches; "
              f"start-up {startup:.1f} s, work {work:.1f} s):")
        for n in sorted({1, 2, args.gpus}):
            print(f"  on {n} device(s): {makespan(items, n):7.1f} s (the longest configuration: "
                  f"{max(st + w for _, _, st, w in items):.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
