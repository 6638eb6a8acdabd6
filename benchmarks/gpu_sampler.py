"""The sweep's sampler on a real NVIDIA GPU, against loads whose bandwidth torch measures.

    python benchmarks/gpu_sampler.py [--out DIR] [--json]

Needs torch with CUDA and pynvml; not vLLM. The sampler (NVML for the device torch
uses, matched by UUID, plus the host source) runs at 10 Hz through five phases:
idle, a memory step (an 8 GiB allocation), a device copy loop, a bf16 matmul loop
and idle again. Per phase it prints what NVML saw (GPM DRAM %, the bytes/s that
implies against the catalog's spec bandwidth, SM and tensor %, memory, power,
clocks, throttling) beside what torch measured, and the sampler's CPU cost.
Writes telemetry.parquet and gpu_sampler.json to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GiB = 2**30


def run(out: Path | None, seconds: float, copy_gib: float = 2.0, matmul_n: int = 8192) -> dict[str, Any]:
    import torch

    from profiler.telemetry.cpu_source import CpuSource
    from profiler.telemetry.nvml_source import NvmlSource
    from profiler.telemetry.sampler import Sampler, aggregate, tag_phases

    if not torch.cuda.is_available():
        raise SystemExit("torch sees no CUDA device")
    torch.empty(1, device="cuda")  # the CUDA context exists before the baseline
    uuid = f"GPU-{torch.cuda.get_device_properties(0).uuid}"
    gpu = NvmlSource(count=1, cuda_visible=uuid)
    sampler = Sampler([gpu, CpuSource(root_pid=os.getpid)], interval_s=0.1).start()
    phases: list[dict[str, Any]] = []
    measured: dict[str, Any] = {}

    def phase(name: str, body: Any) -> None:
        start = time.time()
        result = body()
        torch.cuda.synchronize()
        phases.append({"phase": name, "start": start, "end": time.time()})
        if result:
            measured[name] = result

    def loop(step: Any, bytes_per_step: float = 0, flops_per_step: float = 0) -> dict[str, float]:
        step()  # warm-up
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            for _ in range(10):
                step()
            n += 10
            torch.cuda.synchronize()  # keep the host from queueing far past the phase's end
        b.record()
        b.synchronize()
        s = a.elapsed_time(b) / 1e3
        return {"steps": n, "seconds": s, "bytes_per_s": bytes_per_step * n / s, "flops_per_s": flops_per_step * n / s}

    phase("idle", lambda: time.sleep(seconds / 2))
    held: dict[str, Any] = {}

    def allocate() -> dict[str, float]:
        held["x"] = torch.empty(8 * GiB, dtype=torch.uint8, device="cuda")
        time.sleep(seconds / 2)
        return {"allocated_bytes": 8 * GiB}

    phase("alloc_8GiB", allocate)
    def copy() -> dict[str, float]:
        src = held.pop("x")[: int(copy_gib * GiB)].fill_(1)  # reuses the 8 GiB block
        dst = torch.empty_like(src)
        return loop(lambda: dst.copy_(src), bytes_per_step=2 * src.numel())  # read + write

    def matmul() -> dict[str, float]:
        x = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device="cuda")
        y = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device="cuda")
        return loop(lambda: x @ y, flops_per_step=2 * matmul_n**3)

    phase("copy", copy)
    phase("matmul_bf16", matmul)
    torch.cuda.empty_cache()
    phase("idle_after", lambda: time.sleep(seconds / 2))
    df = sampler.stop()
    desc = sampler.describe()
    tagged = tag_phases(df, {"phases": phases, "status": "ok"}, [], launched_at=phases[0]["start"])
    devices = {d["label"]: d for d in desc["sources"][0]["devices"]}
    per_phase = {}
    for p in phases:
        name = p["phase"]
        agg = aggregate(tagged[tagged["phase"] == name], devices, start=p["start"])
        per_phase[name] = {"gpu": agg.get("gpu0"), "measured": measured.get(name)}
    ticks = df["t"].nunique()
    wall = df["t"].max() - df["t"].min()
    report = {
        "device": devices["gpu0"], "driver": desc["sources"][0]["driver"], "unavailable": desc["unavailable"],
        "notes": desc["sources"][0]["notes"], "transient_errors": desc["sources"][0]["transient_errors"],
        "sampler": {"samples": int(ticks), "wall_s": float(wall), "cpu_s": sampler.cpu_s,
                    "cpu_ms_per_sample": 1e3 * sampler.cpu_s / ticks, "core_pct": 100 * sampler.cpu_s / wall,
                    "errors": sampler.errors},
        "phases": per_phase,
    }
    if out:
        out.mkdir(parents=True, exist_ok=True)
        tagged.to_parquet(out / "telemetry.parquet", index=False)
        (out / "gpu_sampler.json").write_text(json.dumps(report, indent=1, default=str))
    return report


def show(r: dict[str, Any]) -> None:
    d = r["device"]
    spec = d["spec_bandwidth_Bps"]
    print(f"{d['name']} {d['uuid']} bus {d['pci_bus_id']} driver {r['driver']} spec "
          f"{spec / 1e12 if spec else float('nan'):.2f} TB/s, GPM {'on' if d['gpm'] else 'off'}")
    for k, v in r["unavailable"].items():
        print(f"  unavailable {k}: {v}")
    for n in r["notes"]:
        print(f"  note: {n}")
    print(f"{'phase':<12} {'n':>3} {'mem GiB':>8} {'DRAM %':>7} {'GPM TB/s':>9} {'torch TB/s':>10} {'ratio':>6} "
          f"{'SM %':>5} {'TC %':>5} {'W':>5} {'SM MHz':>6} {'thr':>5}")

    def f(v: Any, fmt: str) -> str:
        width = int("".join(c for c in fmt.split(".")[0] if c.isdigit()) or 0)
        return "-".rjust(width) if v is None else format(str(v) if isinstance(v, bool) else v, fmt)

    for name, p in r["phases"].items():
        g, m = p["gpu"] or {}, p["measured"] or {}
        gpm_bps, torch_bps = g.get("gpm_implied_dram_Bps"), m.get("bytes_per_s") or None
        ratio = gpm_bps / torch_bps if gpm_bps and torch_bps else None
        mem = g.get("peak_mem_used_bytes")
        print(f"{name:<12} {g.get('samples', 0):>3} {f(mem and mem / GiB, '8.2f')} "
              f"{f(g.get('mean_gpm_dram_bw_pct'), '7.1f')} {f(gpm_bps and gpm_bps / 1e12, '9.3f')} "
              f"{f(torch_bps and torch_bps / 1e12, '10.3f')} {f(ratio, '6.3f')} {f(g.get('mean_gpm_sm_pct'), '5.1f')} "
              f"{f(g.get('mean_gpm_tensor_pct'), '5.1f')} {f(g.get('mean_power_w'), '5.0f')} "
              f"{f(g.get('mean_clock_sm_mhz'), '6.0f')} {f(g.get('throttled_seen'), '>5')}")
        if m.get("flops_per_s"):
            print(f"{'':<12} matmul {m['flops_per_s'] / 1e12:.0f} TFLOP/s")
    s = r["sampler"]
    print(f"sampler: {s['samples']} samples in {s['wall_s']:.1f} s, {s['cpu_ms_per_sample']:.2f} ms CPU per sample, "
          f"{s['core_pct']:.2f} % of one core (target < 1 %); errors: {s['errors'] or 'none'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each load phase")
    ap.add_argument("--copy-gib", type=float, default=2.0, help="size of the copied tensor")
    ap.add_argument("--matmul-n", type=int, default=8192, help="square bf16 matmul size")
    ap.add_argument("--json", action="store_true")
    ns = ap.parse_args()
    r = run(ns.out, ns.seconds, ns.copy_gib, ns.matmul_n)
    print(json.dumps(r, default=str)) if ns.json else show(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
