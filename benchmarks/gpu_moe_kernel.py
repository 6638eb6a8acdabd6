"""vLLM's fused-MoE Triton kernel, timed on a real NVIDIA GPU, beside the latency model's MoE terms.

    python benchmarks/gpu_moe_kernel.py --vendor DIR          # here, where vLLM is installed: copy the kernel
    python benchmarks/gpu_moe_kernel.py --kernel DIR [--out OUT] [--json]   # there, with torch and Triton

vLLM runs a bf16 MoE layer's experts on NVIDIA GPUs as two launches of one Triton kernel
(``fused_moe_kernel`` in ``model_executor/layers/fused_moe/fused_moe.py``): the fused gate/up projection of
every (token, expert) pair, grouped by expert in blocks of BLOCK_SIZE_M rows, then the down projection
weighted by the router. A GPU machine without vLLM can still run that kernel: ``--vendor`` copies its
source (two ``@triton.jit`` functions) and vLLM's tuned configurations for the GPU into DIR, and the run
launches it the way ``invoke_fused_moe_triton_kernel`` does, with the token-to-expert alignment
(``moe_align_block_size``, a CUDA op in vLLM) written in torch. Each case is checked against a torch
reference before it is timed.

Timed: one MoE layer's two expert GEMMs inside a CUDA graph, for bf16 Mixtral-8x7B (8 experts, top 2) and
Qwen3-30B-A3B (128 experts, top 8), and block-FP8 (128 × 128 weight scales, 128-wide activation groups, as
vLLM runs DeepSeek's and Qwen's FP8 checkpoints) DeepSeek-V3 at a tp-8 rank (256 experts of 7168 × 256) and
Qwen3-235B-A22B at a tp-2 rank (128 of 4096 × 768), at 1 to 4,096 tokens, routed uniformly at random.
Printed beside each: the distinct experts the tokens touched, the bytes those experts hold, the bandwidth
that implies, and the latency model's time for the same experts (``analysis.latency.step``: the experts'
bytes at the weight efficiency × κ[kernel] × κ_moe, two GEMM kernels' fixed time, or their FLOPs at
κ_moe_flops where those bind).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KERNEL_FILE = "vllm_fused_moe_kernel.py"
# (catalog model, tensor-parallel size, experts, top-k, hidden, a rank's expert intermediate, weights): bf16 experts
# of Mixtral-8x7B and Qwen3-30B-A3B on one GPU, and block-FP8 experts (128 × 128 scales, as the checkpoints ship
# them) of a tp-8 rank of DeepSeek-V3 and a tp-2 rank of Qwen3-235B-A22B-FP8.
CASES = (("mixtral-8x7b", 1, 8, 2, 4096, 14336, "bf16"), ("qwen3-30b-a3b", 1, 128, 8, 2048, 768, "bf16"),
         ("deepseek-v3", 8, 256, 8, 7168, 256, "fp8"), ("qwen3-235b-a22b-fp8", 2, 128, 8, 4096, 768, "fp8"))
FP8_BLOCK = 128
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096)


# -- here: vendor the kernel ------------------------------------------------------------------------------

def vendor(directory: Path) -> None:
    """Copy vLLM's fused-MoE Triton kernel and its H100/H200 configurations for CASES into ``directory``."""
    import vllm
    from vllm.model_executor.layers.fused_moe import fused_moe as fm

    src = Path(fm.__file__).read_text()
    parts = []
    for name in ("write_zeros_to_output", "fused_moe_kernel"):
        m = re.search(rf"@triton\.jit\ndef {name}\(.*?(?=\n\n\n|\n# NOTE)", src, re.S)
        if not m:
            raise SystemExit(f"{name} not found in {fm.__file__}: vLLM's layout changed")
        parts.append(m.group(0))
    directory.mkdir(parents=True, exist_ok=True)
    header = (f'"""Copied by benchmarks/gpu_moe_kernel.py --vendor from vLLM {vllm.__version__}\n'
              f"({Path(fm.__file__).relative_to(Path(vllm.__file__).parents[1])}), Apache-2.0, the vLLM project.\n"
              '"""\n\nimport triton\nimport triton.language as tl\n\n\n')
    (directory / KERNEL_FILE).write_text(header + "\n\n\n".join(parts) + "\n")
    configs = Path(fm.__file__).parent / "configs"
    (directory / "configs").mkdir(exist_ok=True)
    for _, _, experts, _, _, inter, weights in CASES:
        for f in configs.glob(f"E={experts},N={inter},device_name=*.json"):
            if ("dtype" not in f.name) == (weights == "bf16") and ("block_shape" in f.name) == (weights == "fp8"):
                shutil.copy(f, directory / "configs" / f.name)
    (directory / "VERSION").write_text(vllm.__version__ + "\n")
    print(f"vLLM {vllm.__version__}'s fused_moe_kernel and {len(list((directory / 'configs').iterdir()))} "
          f"configurations written to {directory}")


# -- there: run it -------------------------------------------------------------------------------------------

def default_config(m: int, experts: int) -> dict[str, int]:
    """vLLM's get_default_config for bf16 on CUDA (fused_moe.py), where no tuned file matches."""
    return {"BLOCK_SIZE_M": 16 if m <= 32 else 32 if m <= 96 else 64 if m <= 512 else 128,
            "BLOCK_SIZE_N": 64 if m <= 64 else 128, "BLOCK_SIZE_K": 128 if m <= 64 else 64,
            "GROUP_SIZE_M": 16 if m // max(experts, 1) > 128 else 1, "num_warps": 4 if m <= 128 else 8,
            "num_stages": 4 if m <= 32 else 3}


def tuned_config(directory: Path, device: str, experts: int, inter: int, m: int,
                 weights: str = "bf16") -> tuple[dict[str, int], str]:
    """vLLM's try_get_optimal_moe_config: the tuned file's entry nearest to M, else the default."""
    dtype = f",dtype=fp8_w8a8,block_shape=[{FP8_BLOCK},{FP8_BLOCK}]" if weights == "fp8" else ""
    path = directory / "configs" / f"E={experts},N={inter},device_name={device.replace(' ', '_')}{dtype}.json"
    if path.exists():
        table = {int(k): v for k, v in json.loads(path.read_text()).items()}
        return dict(table[min(table, key=lambda k: abs(k - m))]), path.name
    return default_config(m, experts), "default"


def align(torch: Any, topk_ids: Any, block_m: int, experts: int) -> tuple[Any, Any, Any]:
    """moe_align_block_size in torch: the (token, expert) pairs sorted by expert, each expert's run padded
    to a multiple of block_m with the invalid index numel; the expert of each block; the padded length.
    Sized as vLLM sizes it (numel + experts × (block_m − 1)), so the kernel's grid is the same."""
    flat = topk_ids.flatten().to(torch.int64)
    n = flat.numel()
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(padded, 0) - padded
    order = torch.argsort(flat, stable=True)
    ranked = flat[order]
    rank = torch.arange(n, device=flat.device) - (torch.cumsum(counts, 0) - counts)[ranked]
    size = n + experts * (block_m - 1)
    sorted_ids = torch.full((size,), n, dtype=torch.int32, device=flat.device)
    sorted_ids[starts[ranked] + rank] = order.to(torch.int32)
    expert_ids = torch.full((size // block_m + 1,), -1, dtype=torch.int32, device=flat.device)
    blocks = torch.repeat_interleave(torch.arange(experts, device=flat.device), padded // block_m)
    expert_ids[: blocks.numel()] = blocks.to(torch.int32)
    total = torch.tensor([int(padded.sum())], dtype=torch.int32, device=flat.device)
    return sorted_ids, expert_ids, total


def launch(kernel_mod: Any, torch: Any, a: Any, b: Any, c: Any, weights: Any, sorted_ids: Any, expert_ids: Any,
           total: Any, routed: bool, top_k: int, config: dict[str, int], a_scale: Any = None,
           b_scale: Any = None) -> None:
    """One launch as invoke_fused_moe_triton_kernel makes it: bf16 weights, or FP8 ones with 128 × 128 block
    scales and 128-wide token-group scales of the activations (no bias)."""
    import triton
    import triton.language as tl

    fp8 = b_scale is not None
    # vLLM's enable_swap_ab: on compute capability 9.0, FP8 tiles of fewer than 64 rows and 64 or more columns
    swap = fp8 and torch.cuda.get_device_capability() == (9, 0) and config["BLOCK_SIZE_M"] < 64 \
        and config["BLOCK_SIZE_N"] >= 64

    m = a.size(0)
    num_tokens = m * top_k
    if sorted_ids is not None:
        em = sorted_ids.size(0)
        if m < config["BLOCK_SIZE_M"]:
            em = min(em, m * top_k * config["BLOCK_SIZE_M"])
    else:
        em = num_tokens * config["BLOCK_SIZE_M"]
    cfg = dict(config)
    block_k = cfg.pop("BLOCK_SIZE_K")
    if fp8:
        block_k = min(block_k, FP8_BLOCK)
    cfg["SPLIT_K"] = 1
    grid = (triton.cdiv(em, cfg["BLOCK_SIZE_M"]) * triton.cdiv(b.size(1), cfg["BLOCK_SIZE_N"]),)
    scales = (a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(2), b_scale.stride(1)) \
        if fp8 else (0, 0, 0, 0, 0)
    kernel_mod.fused_moe_kernel[grid](
        a, b, c, None, a_scale, b_scale, weights, sorted_ids, expert_ids, total,
        b.size(1), b.size(2), em, num_tokens,
        a.stride(0), a.stride(1), b.stride(0), b.stride(2), b.stride(1), c.stride(1), c.stride(2),
        *scales, 0, 0, FP8_BLOCK if fp8 else 0, FP8_BLOCK if fp8 else 0,
        MUL_ROUTED_WEIGHT=routed, top_k=top_k, compute_type=tl.bfloat16, use_fp8_w8a8=fp8,
        use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
        naive_block_assignment=sorted_ids is None, HAS_BIAS=False, BLOCK_SIZE_K=block_k, SWAP_AB=swap,
        USE_TD=False, **cfg)


def model_layer_s(name: str, tp: int, m: int, top_k: int, touched_bytes: int,
                  params_per_expert: int) -> dict[str, float]:
    """The latency model's time for one MoE layer's expert GEMMs at m tokens (``expert_layer_terms`` on the H200)."""
    from analysis.catalog import resolve_gpu, resolve_model
    from analysis.latency.step import expert_layer_terms

    t = expert_layer_terms(resolve_model(name)[0], resolve_gpu("h200")[0], tp=tp, tokens=m,
                           expert_bytes=touched_bytes, expert_flops=2 * m * top_k * params_per_expert)
    return {"model_s": t["weights_s"], "model_stream_s": t["weight_stream_s"], "model_gemm_s": t["gemm_compute_s"]}


def run(directory: Path, quick: bool = False) -> dict[str, Any]:
    import torch
    from gpu_decode_kernels import graph_of, replays_for, timed

    spec = importlib.util.spec_from_file_location("vllm_fused_moe_kernel", directory / KERNEL_FILE)
    if spec is None or spec.loader is None or not (directory / KERNEL_FILE).exists():
        raise SystemExit(f"no {KERNEL_FILE} in {directory}: run --vendor there first, where vLLM is installed")
    kernel_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel_mod)
    device = torch.cuda.get_device_name()
    report: dict[str, Any] = {"device": device, "torch": torch.__version__,
                              "vllm": (directory / "VERSION").read_text().strip(), "date": time.strftime("%Y-%m-%d"),
                              "cases": [], "errors": {}}
    torch.manual_seed(0)
    fp8_dtype = torch.float8_e4m3fn
    for name, tp, experts, top_k, hidden, inter, weights in CASES:
        fp8 = weights == "fp8"

        def make(*shape: int, fp8: bool = fp8) -> tuple[Any, Any]:
            """A bf16 tensor, or an FP8 one with float32 scales of 128 × 128 blocks over its last two dimensions
            (weights) or 128-wide groups of its last (activations, 2-D)."""
            x = torch.randn(*shape, device="cuda") * (0.02 if len(shape) == 3 else 1.0)
            if not fp8:
                return x.to(torch.bfloat16), None
            blocks = (*shape[:-2], shape[-2] // FP8_BLOCK, shape[-1] // FP8_BLOCK) if len(shape) == 3 else \
                (shape[0], shape[1] // FP8_BLOCK)
            return x.to(fp8_dtype), torch.rand(*blocks, device="cuda") * 1e-2 + 1e-3

        def dequant(x: Any, scale: Any) -> Any:
            if scale is None:
                return x.float()
            if x.dim() == 1:  # one activation row: its groups' scales
                return x.float() * scale.repeat_interleave(FP8_BLOCK)
            return x.float() * scale.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)

        (w13, w13_s), (w2, w2_s) = make(experts, 2 * inter, hidden), make(experts, hidden, inter)
        params = 3 * inter * hidden
        per_expert = params * w13.element_size() + (0 if w13_s is None else 4 * (w13_s[0].numel() + w2_s[0].numel()))
        for m in TOKENS[:6] if quick else TOKENS:
            try:
                config, source = tuned_config(directory, device, experts, inter, m, weights)
                x, x_s = make(m, hidden)
                topk_w, topk_ids = torch.rand(m, experts, device="cuda").topk(top_k, dim=1)
                topk_w = (topk_w / topk_w.sum(1, keepdim=True)).float()
                topk_ids = topk_ids.to(torch.int32)
                if m * top_k * 4 <= experts:  # vLLM's naive block assignment for a sparse few tokens
                    sorted_ids, expert_ids = None, topk_ids.view(-1)
                    total = torch.tensor([topk_ids.numel() * config["BLOCK_SIZE_M"]], dtype=torch.int32,
                                         device="cuda")
                else:
                    sorted_ids, expert_ids, total = align(torch, topk_ids, config["BLOCK_SIZE_M"], experts)
                c1 = torch.empty(m, top_k, 2 * inter, dtype=torch.bfloat16, device="cuda")
                act, act_s = make(m * top_k, inter)
                c2 = torch.empty(m, top_k, hidden, dtype=torch.bfloat16, device="cuda")

                def body(x=x, x_s=x_s, c1=c1, act=act, act_s=act_s, c2=c2, s=sorted_ids, e=expert_ids, t=total,
                         w=topk_w, config=config, w13=w13, w13_s=w13_s, w2=w2, w2_s=w2_s, top_k=top_k) -> None:
                    launch(kernel_mod, torch, x, w13, c1, w, s, e, t, False, top_k, config, x_s, w13_s)
                    launch(kernel_mod, torch, act, w2, c2, w, s, e, t, True, 1, config, act_s, w2_s)

                body()
                torch.cuda.synchronize()
                # Against torch, for the first tokens (each token's rows are its own): every (token, expert)
                # pair's gate/up projection, and its down projection weighted by the router, from the
                # dequantized values where the weights are FP8.
                err = 0.0
                for t in range(min(m, 4)):
                    xt = dequant(x[t], None if x_s is None else x_s[t])
                    for j in range(top_k):
                        e, row_ = int(topk_ids[t, j]), t * top_k + j
                        ref1 = xt @ dequant(w13[e], None if w13_s is None else w13_s[e]).T
                        at = dequant(act[row_], None if act_s is None else act_s[row_])
                        ref2 = (at @ dequant(w2[e], None if w2_s is None else w2_s[e]).T) * topk_w[t, j]
                        err = max(err, float((c1[t, j].float() - ref1).abs().max() / ref1.abs().max()),
                                  float((c2[t, j].float() - ref2).abs().max() / ref2.abs().max()))
                if err > 2e-2:
                    raise RuntimeError(f"kernel output differs from torch's by {err:.3g} (relative)")
                touched = int(torch.unique(topk_ids).numel())
                s = timed(torch, graph_of(torch, body), replays_for(touched * per_expert / 3e12))
                row = {"model": name, "tp": tp, "weights": weights, "experts": experts, "top_k": top_k,
                       "hidden": hidden, "inter": inter, "tokens": m, "config": config, "config_source": source,
                       "max_rel_error": err, "touched": touched, "layer_s": s,
                       "touched_bytes": touched * per_expert, "achieved_Bps": touched * per_expert / s,
                       "achieved_flops": 2 * m * top_k * params / s}
                row.update(model_layer_s(name, tp, m, top_k, touched * per_expert, params))
                row["model_over_measured"] = row["model_s"] / s
                report["cases"].append(row)
                del x, c1, act, c2
            except Exception as e:  # one case failing must not lose the others
                report["errors"][f"{name} m={m}"] = f"{type(e).__name__}: {e}"
        del w13, w2, w13_s, w2_s
        torch.cuda.empty_cache()
    return report  # the activation between the GEMMs is not timed (vLLM's silu_and_mul is a CUDA op)


def show(r: dict[str, Any]) -> None:
    print(f"{r['device']}, torch {r['torch']}, vLLM {r['vllm']}'s fused_moe_kernel")
    print(f"{'model':<20} {'tok':>5} {'exp':>4} {'MB':>7} {'µs':>8} {'TB/s':>6} {'TFLOP/s':>8} {'model µs':>9} "
          f"{'model/meas':>10} {'config':<10}")
    for c in r["cases"]:
        label = c["model"][:15] + " " + c["weights"]
        print(f"{label:<20} {c['tokens']:>5} {c['touched']:>4} {c['touched_bytes'] / 1e6:7.0f} "
              f"{c['layer_s'] * 1e6:8.1f} {c['achieved_Bps'] / 1e12:6.2f} {c['achieved_flops'] / 1e12:8.1f} "
              f"{c['model_s'] * 1e6:9.1f} {c['model_over_measured']:10.3f} {c['config_source'][:10]:<10}")
    if r["cases"]:
        print("median model/measured:", round(statistics.median(c["model_over_measured"] for c in r["cases"]), 3))
    for k, e in r["errors"].items():
        print(f"ERROR {k}: {e}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vendor", type=Path, help="copy vLLM's kernel and configurations here (needs vLLM)")
    p.add_argument("--kernel", type=Path, default=ROOT / ".device" / "moe", help="a --vendor directory")
    p.add_argument("--out", type=Path, help="write moe_kernel.json here")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="fewer token counts")
    args = p.parse_args()
    if args.vendor:
        vendor(args.vendor)
        return 0
    sys.path.insert(0, str(Path(__file__).parent))
    from gpu_decode_kernels import report_out

    return report_out(run(args.kernel, args.quick), args.out, "moe_kernel.json", args.json, show)


if __name__ == "__main__":
    raise SystemExit(main())
