"""The kernels of a vLLM decode step, timed on a real NVIDIA GPU, beside the latency model's terms for them.

    python benchmarks/gpu_decode_kernels.py [--out DIR] [--json] [--quick]

Needs torch with CUDA; not vLLM, not NVML. What it times is what vLLM's CUDA path calls, or the nearest
thing torch has:

- **weight GEMMs**: a dense bf16 layer in vLLM is ``F.linear`` (``UnquantizedLinearMethod`` →
  ``default_unquantized_gemm``), i.e. cuBLAS through torch, the same call timed here. One CUDA graph holds
  every linear layer of the model's decoder (fused QKV, O, fused gate/up, down; a tensor-parallel rank's
  shard of each) at R rows, one weight tensor per layer so nothing is served from L2, and the LM head is
  timed on its own; R runs from a decode of one sequence to an 8,192-token prefill chunk. Beside it: the
  model's ``weights_s`` (its weight-stream and GEMM terms) for the same step on this GPU.
- **fp8 weight GEMMs** (``torch._scaled_mm``, cuBLASLt, per-tensor scales) for one model: vLLM runs CUTLASS's
  scaled GEMM, so this is the nearest kernel, not the same one.
- **decode attention**: ``scaled_dot_product_attention`` restricted to its FlashAttention-2 backend over
  contiguous bf16 KV (query heads packed per KV head), and torch's own choice with ``enable_gqa``;
  vLLM reads a paged cache with FlashAttention 3 on
  Hopper, so this bounds the kernel family, it does not reproduce it. Beside it: the model's ``kv_s``.
- **one GEMM's cost against its size**: single weight matrices from 0.5 MB to 512 MB at 1, 16 and 64 rows,
  fitted as a fixed time per GEMM plus bytes over a bandwidth (what a thin tensor-parallel shard pays).
- **graph replay floor**: a CUDA graph of 2,000 one-element kernels, the cost of a kernel node in a replay
  (vLLM's decode runs as CUDA graphs).

Every time is the median of repeated graph replays between CUDA events. Writes decode_kernels.json to --out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (catalog model, tensor-parallel rank's shard): a small model (launch-bound steps), the corpus's most measured
# dense model, the same at tp 4 and a 70B rank at tp 8 (the thin GEMMs of high tensor parallelism).
MODELS = (("llama-3.2-1b", 1), ("llama-3.1-8b", 1), ("llama-3.1-8b", 4), ("llama-3.1-70b", 8))
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
FP8_MODEL = ("llama-3.1-8b", 1)
FP8_ROWS = (1, 16, 64, 256, 1024, 4096)
# (sequences, context) for decode attention: one long sequence to many short ones.
ATTENTION = ((1, 8192), (1, 32768), (8, 4096), (32, 2048), (64, 2048), (128, 1024), (256, 1024), (256, 4096))
GRAPH_NODES = 2000
SIZE_K = 4096
SIZE_N = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
SIZE_ROWS = (1, 16, 64)


def linear_shapes(a: Any, tp: int) -> list[tuple[str, int, int]]:
    """(name, out, in) of one decoder layer's linear layers on one tensor-parallel rank, as vLLM fuses them."""
    kv_heads = max(a.num_kv_heads // tp, 1)  # vLLM replicates KV heads when tp exceeds them
    q = a.num_heads // tp * a.head_dim
    shapes = [("qkv", q + 2 * kv_heads * a.head_dim, a.hidden_size), ("o", a.hidden_size, q)]
    inter = a.intermediate_size // tp
    shapes += [("gate_up", (2 if a.mlp_gated else 1) * inter, a.hidden_size), ("down", a.hidden_size, inter)]
    return shapes


def timed(torch: Any, fn: Any, replays: int, repeats: int = 5) -> float:
    """Median seconds of one call of ``fn`` (a graph replay), over ``repeats`` runs of ``replays`` calls."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / replays)
    return statistics.median(times)


def graph_of(torch: Any, body: Any) -> Any:
    """``body`` captured in a CUDA graph (after a warm-up on a side stream, as torch asks); returns its replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    return g.replay


def replays_for(seconds_guess: float) -> int:
    """Replays per timed run: about 50 ms of work, 2 to 50 replays."""
    return max(2, min(50, int(0.05 / max(seconds_guess, 1e-6))))


def gemm_section(torch: Any, gpu: Any, quick: bool) -> list[dict[str, Any]]:
    from analysis.catalog import resolve_model
    from analysis.latency.step import step_terms, step_work

    out = []
    for name, tp in MODELS[:2] if quick else MODELS:
        a = resolve_model(name)[0]
        shapes = linear_shapes(a, tp)
        layers = [[torch.randn(o, i, dtype=torch.bfloat16, device="cuda") * 0.02 for _, o, i in shapes]
                  for _ in range(a.num_layers)]
        vocab = -(-a.vocab_size // tp)
        head = torch.randn(vocab, a.hidden_size, dtype=torch.bfloat16, device="cuda") * 0.02
        body_bytes = sum(o * i for _, o, i in shapes) * a.num_layers * 2
        head_bytes = vocab * a.hidden_size * 2
        for rows in ROWS[:8] if quick else ROWS:
            xs = {i: torch.randn(rows, i, dtype=torch.bfloat16, device="cuda") for _, _, i in shapes}
            ys = [torch.empty(rows, o, dtype=torch.bfloat16, device="cuda") for _, o, _ in shapes]
            x_head = xs[a.hidden_size][:1] if rows > 512 else xs[a.hidden_size]  # a prefill samples one row
            y_head = torch.empty(x_head.shape[0], vocab, dtype=torch.bfloat16, device="cuda")

            def body(xs=xs, ys=ys, layers=layers, shapes=shapes) -> None:
                for ws in layers:
                    for (_, _, i), w, y in zip(shapes, ws, ys, strict=True):
                        torch.mm(xs[i], w.t(), out=y)

            def lm_head(x=x_head, y=y_head, head=head) -> None:
                torch.mm(x, head.t(), out=y)

            body_s = timed(torch, graph_of(torch, body), replays_for(body_bytes / 3e12 + rows * body_bytes / 5e14))
            head_s = timed(torch, graph_of(torch, lm_head), 20)
            flops = 2 * rows * body_bytes / 2 + 2 * x_head.shape[0] * head_bytes / 2
            measured = body_s + head_s
            decode = rows <= 512
            w = step_work(a, gpu, tp=tp, decode_seqs=rows if decode else 0, decode_context=1,
                          prefill_tokens=0 if decode else rows, prefill_seqs=None if decode else 1)
            terms = step_terms(w)
            out.append({"model": name, "tp": tp, "rows": rows, "step": "decode" if decode else "prefill chunk",
                        "body_s": body_s, "lm_head_s": head_s, "lm_head_rows": x_head.shape[0],
                        "measured_s": measured, "weight_bytes": body_bytes + head_bytes,
                        "achieved_Bps": (body_bytes + head_bytes) / measured, "achieved_flops": flops / measured,
                        "model_weights_s": terms["weights_s"], "model_weight_stream_s": terms["weight_stream_s"],
                        "model_gemm_compute_s": terms["gemm_compute_s"],
                        "model_over_measured": terms["weights_s"] / measured})
            del xs, ys, y_head
        del layers, head
        torch.cuda.empty_cache()
    return out


def gemm_size_section(torch: Any) -> dict[str, Any]:
    import numpy as np

    points = []
    for n in SIZE_N:
        nbytes = n * SIZE_K * 2
        copies = max(4, min(512, int(4e8 // nbytes)))  # distinct weights, 256 MB or more: past the 50 MB L2
        ws = [torch.randn(n, SIZE_K, dtype=torch.bfloat16, device="cuda") for _ in range(copies)]
        for rows in SIZE_ROWS:
            x = torch.randn(rows, SIZE_K, dtype=torch.bfloat16, device="cuda")
            y = torch.empty(rows, n, dtype=torch.bfloat16, device="cuda")

            def body(x=x, y=y, ws=ws) -> None:
                for w in ws:
                    torch.mm(x, w.t(), out=y)

            t = timed(torch, graph_of(torch, body), replays_for(copies * nbytes / 3e12)) / copies
            points.append({"n": n, "k": SIZE_K, "rows": rows, "weight_bytes": nbytes, "gemm_s": t,
                           "achieved_Bps": nbytes / t})
        del ws
    torch.cuda.empty_cache()
    fits = {}
    for rows in SIZE_ROWS:  # t = t0 + bytes / bandwidth, least squares over the sizes
        pts = [p for p in points if p["rows"] == rows]
        slope, t0 = np.polyfit([p["weight_bytes"] for p in pts], [p["gemm_s"] for p in pts], 1)
        fits[str(rows)] = {"fixed_s": float(t0), "bandwidth_Bps": float(1 / slope)}
    return {"points": points, "fits": fits}


def fp8_section(torch: Any, quick: bool) -> list[dict[str, Any]]:
    from analysis.catalog import resolve_model

    name, tp = FP8_MODEL
    a = resolve_model(name)[0]
    shapes = linear_shapes(a, tp)
    f8 = torch.float8_e4m3fn
    layers = [[(torch.randn(o, i, device="cuda") * 0.02).to(f8) for _, o, i in shapes] for _ in range(a.num_layers)]
    one = torch.ones((), device="cuda")
    body_bytes = sum(o * i for _, o, i in shapes) * a.num_layers
    out = []
    for rows in FP8_ROWS[:3] if quick else FP8_ROWS:
        xs = {i: (torch.randn(rows, i, device="cuda") * 0.1).to(f8) for _, _, i in shapes}

        def body(xs=xs, layers=layers) -> None:
            for ws in layers:
                for (_, _, i), w in zip(shapes, ws, strict=True):
                    torch._scaled_mm(xs[i], w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        try:  # cuBLASLt's fp8 GEMM has shape rules of its own: a refused shape is recorded, the others still run
            s = timed(torch, graph_of(torch, body), replays_for(body_bytes / 3e12 + rows * 2 * body_bytes / 1e15))
        except RuntimeError as e:
            out.append({"model": name, "tp": tp, "rows": rows, "error": str(e).splitlines()[0]})
            continue
        out.append({"model": name, "tp": tp, "rows": rows, "body_s": s, "weight_bytes": body_bytes,
                    "achieved_Bps": body_bytes / s, "achieved_flops": 2 * rows * body_bytes / s})
    del layers
    torch.cuda.empty_cache()
    return out


def attention_section(torch: Any, gpu: Any, quick: bool) -> list[dict[str, Any]]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from analysis.catalog import resolve_model
    from analysis.latency.step import step_terms, step_work

    a = resolve_model("llama-3.1-8b")[0]
    kvh, group, d = a.num_kv_heads, a.num_heads // a.num_kv_heads, a.head_dim
    out = []
    # (label, backends, query heads packed per KV head): FlashAttention 2 alone, and what torch picks itself
    # for grouped-query attention (enable_gqa, the query's 32 heads against the cache's 8).
    variants = (("flash2-packed", [SDPBackend.FLASH_ATTENTION], True), ("torch-gqa", None, False))
    for seqs, ctx in ATTENTION[:4] if quick else ATTENTION:
        per_layer = 2 * seqs * kvh * ctx * d * 2
        copies = max(1, min(8, int(2e9 // per_layer)))  # several layers' KV, far past L2
        kv = [(torch.randn(seqs, kvh, ctx, d, dtype=torch.bfloat16, device="cuda"),
               torch.randn(seqs, kvh, ctx, d, dtype=torch.bfloat16, device="cuda")) for _ in range(copies)]
        w = step_work(a, gpu, decode_seqs=seqs, decode_context=ctx)
        model_layer_s = step_terms(w)["kv_s"] / a.num_layers
        for label, backends, packed in variants:
            q = torch.randn(seqs, kvh, group, d, dtype=torch.bfloat16, device="cuda") if packed else \
                torch.randn(seqs, kvh * group, 1, d, dtype=torch.bfloat16, device="cuda")

            def body(kv=kv, q=q, backends=backends, packed=packed) -> None:
                with sdpa_kernel(backends) if backends else contextlib.nullcontext():
                    for k, v in kv:
                        sdpa(q, k, v, enable_gqa=not packed)

            try:
                s = timed(torch, graph_of(torch, body), replays_for(per_layer * copies / 2e12)) / copies
            except RuntimeError as e:
                out.append({"kernel": label, "seqs": seqs, "context": ctx, "error": str(e).splitlines()[0]})
                continue
            out.append({"kernel": label, "seqs": seqs, "context": ctx, "kv_bytes_per_layer": per_layer,
                        "layer_s": s, "achieved_Bps": per_layer / s, "model_kv_layer_s": model_layer_s,
                        "model_over_measured": model_layer_s / s})
        del kv
    torch.cuda.empty_cache()
    return out


def graph_floor_section(torch: Any) -> dict[str, Any]:
    x = torch.zeros(1, device="cuda")

    def body() -> None:
        for _ in range(GRAPH_NODES):
            x.add_(1)

    s = timed(torch, graph_of(torch, body), 10)
    from analysis.latency.step import shipped_constants

    c = shipped_constants()
    return {"nodes": GRAPH_NODES, "graph_s": s, "per_node_s": s / GRAPH_NODES,
            "model_layer_s": c.value("layer_s"), "model_full_layer_s": c.value("full_layer_s")}


def run(quick: bool = False) -> dict[str, Any]:
    import torch

    from analysis.catalog import UnknownName, resolve_gpu

    if not torch.cuda.is_available():
        raise SystemExit("torch sees no CUDA device")
    props = torch.cuda.get_device_properties(0)
    try:
        gpu, _ = resolve_gpu(props.name)
    except UnknownName as e:
        msg = f"{props.name} is not in kvprof's catalog, so there is no model to compare with: {e}"
        raise SystemExit(msg) from None
    report: dict[str, Any] = {"device": props.name, "catalog_gpu": gpu.name, "spec_bandwidth_Bps": gpu.bandwidth_Bps,
                              "spec_bf16_flops": gpu.peak_flops(), "torch": torch.__version__,
                              "cuda": torch.version.cuda, "sms": props.multi_processor_count,
                              "date": time.strftime("%Y-%m-%d"), "errors": {}}
    torch.backends.cuda.matmul.allow_tf32 = False
    for key, section in (("graph_floor", lambda: graph_floor_section(torch)),
                         ("gemm", lambda: gemm_section(torch, gpu, quick)),
                         ("gemm_sizes", lambda: gemm_size_section(torch)),
                         ("fp8_gemm", lambda: fp8_section(torch, quick)),
                         ("attention", lambda: attention_section(torch, gpu, quick))):
        t0 = time.monotonic()
        try:
            report[key] = section()
        except Exception as e:  # one kernel family failing must not lose the others' numbers
            report["errors"][key] = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
            torch.cuda.empty_cache()
        print(f"# {key}: {time.monotonic() - t0:.1f} s", flush=True)
    return report


def show(r: dict[str, Any]) -> None:
    bw, fl = r["spec_bandwidth_Bps"], r["spec_bf16_flops"]
    print(f"{r['device']} (catalog {r['catalog_gpu']}: {bw / 1e12:.2f} TB/s, {fl / 1e12:.0f} TFLOP/s bf16), "
          f"torch {r['torch']} CUDA {r['cuda']}, {r['sms']} SMs")
    if "graph_floor" in r:
        g = r["graph_floor"]
        full = g.get("model_full_layer_s")
        print(f"graph replay: {g['per_node_s'] * 1e6:.2f} µs a kernel node ({g['nodes']} nodes); "
              f"the model's per-layer floor is {g['model_layer_s'] * 1e6:.2f} µs under piecewise graphs"
              + (f", {full * 1e6:.2f} µs replaying a decode step's whole graph" if full else ""))
    if "gemm" in r:
        print(f"{'model':<14} {'tp':>2} {'rows':>5} {'body ms':>8} {'head ms':>8} {'TB/s':>6} {'%bw':>5} "
              f"{'TFLOP/s':>8} {'%pk':>5} {'model ms':>9} {'model/meas':>10}")
        for g in r["gemm"]:
            print(f"{g['model']:<14} {g['tp']:>2} {g['rows']:>5} {g['body_s'] * 1e3:8.3f} {g['lm_head_s'] * 1e3:8.3f} "
                  f"{g['achieved_Bps'] / 1e12:6.2f} {100 * g['achieved_Bps'] / bw:5.1f} "
                  f"{g['achieved_flops'] / 1e12:8.1f} {100 * g['achieved_flops'] / fl:5.1f} "
                  f"{g['model_weights_s'] * 1e3:9.3f} {g['model_over_measured']:10.3f}")
    if "gemm_sizes" in r:
        print(f"one GEMM of {SIZE_K} columns: fixed time + bytes / bandwidth")
        for rows, f in r["gemm_sizes"]["fits"].items():
            pts = [p for p in r["gemm_sizes"]["points"] if p["rows"] == int(rows)]
            spread = " ".join(f"{p['weight_bytes'] / 2**20:.1f}MiB:{p['gemm_s'] * 1e6:.1f}µs" for p in pts)
            print(f"  rows {rows:>3}: {f['fixed_s'] * 1e6:.2f} µs + bytes / {f['bandwidth_Bps'] / 1e12:.2f} TB/s "
                  f"({100 * f['bandwidth_Bps'] / bw:.0f} % of spec); {spread}")
    if "fp8_gemm" in r:
        print(f"{'fp8 model':<14} {'rows':>5} {'body ms':>8} {'TB/s':>6} {'%bw':>5} {'TFLOP/s':>8}")
        for g in r["fp8_gemm"]:
            if "error" in g:
                print(f"{g['model']:<14} {g['rows']:>5} refused: {g['error']}")
                continue
            print(f"{g['model']:<14} {g['rows']:>5} {g['body_s'] * 1e3:8.3f} {g['achieved_Bps'] / 1e12:6.2f} "
                  f"{100 * g['achieved_Bps'] / bw:5.1f} {g['achieved_flops'] / 1e12:8.1f}")
    if "attention" in r:
        print(f"{'kernel':<14} {'seqs':>5} {'context':>7} {'MB/layer':>9} {'µs/layer':>9} {'TB/s':>6} {'%bw':>5} "
              f"{'model µs':>9} {'model/meas':>10}")
        for g in r["attention"]:
            if "error" in g:
                print(f"{g['kernel']:<14} {g['seqs']:>5} {g['context']:>7} refused: {g['error']}")
                continue
            print(f"{g['kernel']:<14} {g['seqs']:>5} {g['context']:>7} {g['kv_bytes_per_layer'] / 1e6:9.1f} "
                  f"{g['layer_s'] * 1e6:9.1f} "
                  f"{g['achieved_Bps'] / 1e12:6.2f} {100 * g['achieved_Bps'] / bw:5.1f} "
                  f"{g['model_kv_layer_s'] * 1e6:9.1f} {g['model_over_measured']:10.3f}")
    for k, e in r["errors"].items():
        print(f"ERROR in {k}: {e}")


def report_out(r: dict[str, Any], out: Path | None, name: str, as_json: bool, show_table: Any) -> int:
    """Write the report to ``out/name`` (when given), print it as JSON or as tables; the exit status says whether
    any section failed. Shared by the GPU benchmarks."""
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(r, indent=1))
    print(json.dumps(r, indent=1)) if as_json else show_table(r)
    return 1 if r["errors"] else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="write decode_kernels.json here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quick", action="store_true", help="two models, fewer rows and attention shapes")
    args = p.parse_args()
    return report_out(run(args.quick), args.out, "decode_kernels.json", args.json, show)


if __name__ == "__main__":
    raise SystemExit(main())
