"""The latency model's terms against the kernels of a decode step timed on a real H200.

benchmarks/results/h200-2026-12-04/ holds two runs of benchmarks/gpu_check.sh on H200s lent to this project
(benchmarks/gpu_decode_kernels.py: cuBLAS GEMMs through torch, which is what vLLM's bf16 linear layers call;
decode attention; CUDA-graph replay). The model's constants are fitted on published end-to-end vLLM
measurements, never on these, so each test checks a fitted term against an independent measurement of the
kernel it stands for: a term can fold in work its kernel does not do (the step's other kernels), but it can
never run faster than the kernel itself.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from analysis import catalog
from analysis.latency.step import expert_layer_terms, shipped_constants, step_terms, step_work

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "h200-2026-12-04"
RUNS = [json.loads((RESULTS / run / "decode_kernels.json").read_text()) for run in ("run1", "run2")]
H200 = catalog.resolve_gpu("h200")[0]


def terms(model: str, tp: int, rows: int) -> dict[str, float]:
    a = catalog.resolve_model(model)[0]
    decode = rows <= 512  # as the benchmark timed it: a prefill chunk samples one row in the LM head
    w = step_work(a, H200, tp=tp, decode_seqs=rows if decode else 0, decode_context=1,
                  prefill_tokens=0 if decode else rows, prefill_seqs=None if decode else 1)
    return step_terms(w)


def test_the_runs_are_an_h200_and_agree_with_each_other():
    for r in RUNS:
        assert r["device"] == "NVIDIA H200" and r["catalog_gpu"] == "h200" and not r["errors"]
    # Two boards, the same whole-model GEMM timings within 10 % at every shape and row count.
    for a, b in zip(RUNS[0]["gemm"], RUNS[1]["gemm"], strict=True):
        assert (a["model"], a["tp"], a["rows"]) == (b["model"], b["tp"], b["rows"])
        assert a["measured_s"] / b["measured_s"] == pytest.approx(1, abs=0.1)


@pytest.mark.parametrize("run", [0, 1])
def test_the_decode_weight_term_tracks_cublas_across_model_shapes(run):
    # At 1–16 sequences a step's GEMMs stream the weights. cuBLAS took 77 % of spec bandwidth for Llama-3.1-8B's
    # whole model but 50 % for a tp-4 rank of it (the same 129 kernels on a quarter of the bytes), 62 % for
    # Llama-3.2-1B and 64 % for a tp-8 rank of Llama-3.1-70B: a fixed cost per GEMM. The model's weight term is
    # never faster than the GEMMs it stands for, and it holds one ratio to them across the four shapes
    # (a bandwidth share alone ran from 0.69 to 1.08 of them).
    ratios = {}
    for g in RUNS[run]["gemm"]:
        if g["rows"] <= 16:
            model = terms(g["model"], g["tp"], g["rows"])["weights_s"]
            ratios[g["model"], g["tp"], g["rows"]] = model / g["measured_s"]
    assert len(ratios) == 4 * 5
    assert min(ratios.values()) >= 1.0, ratios
    assert max(ratios.values()) / min(ratios.values()) <= 1.2, ratios


@pytest.mark.parametrize("run", [0, 1])
def test_a_prefill_chunks_gemm_term_is_never_faster_than_cublas(run):
    # From 1,024 rows the GEMMs bind on arithmetic: cuBLAS ran them at 585–667 TFLOP/s (59–67 % of the
    # 989 TFLOP/s datasheet peak). The model's GEMM term (η_flops fitted on published prefill and TTFT figures,
    # which it also carries the chunk's other kernels for) is at least that long and at most 1.6 times it.
    for g in RUNS[run]["gemm"]:
        if g["rows"] >= 1024:
            ratio = terms(g["model"], g["tp"], g["rows"])["gemm_compute_s"] / g["measured_s"]
            assert 1.0 <= ratio <= 1.6, (g["model"], g["tp"], g["rows"], ratio)


def test_the_gemm_rate_ramp_follows_the_fitted_half_rows():
    # A GEMM of R rows runs at 1 / (1 + m½ / R) of its large-M rate in the model, m½ fitted on the corpus. cuBLAS
    # on the H200, over the four models' linear layers and both runs: its rate at 8,192 rows over its rate at R
    # (R ≥ 512, where the arithmetic binds), the median of the eight, within 5 % of the model's ramp. (One shape
    # alone scatters ±5 % with cuBLAS's tile choices: Llama-3.1-8B at 512 rows read 1.105 and 1.048.)
    m = shipped_constants().value("gemm_half_rows")
    by_shape: dict[tuple[int, str, int], dict[int, float]] = {}
    for i, r in enumerate(RUNS):
        for g in r["gemm"]:
            by_shape.setdefault((i, g["model"], g["tp"]), {})[g["rows"]] = g["achieved_flops"]
    assert len(by_shape) == 8
    for rows in (512, 1024, 2048, 4096):
        slowdown = statistics.median(v[8192] / v[rows] for v in by_shape.values())
        assert slowdown == pytest.approx((1 + m / rows) / (1 + m / 8192), rel=0.05), rows


def test_the_fitted_fixed_cost_per_gemm_is_the_h200s():
    # One GEMM of 0.5–512 MB on the H200: a fixed time plus its bytes over a bandwidth, fitted by the benchmark
    # at 1, 16 and 64 rows (5.2–5.8 µs). The model's gemm_call_s, fitted on published end-to-end steps with
    # the H200's figure as its prior, lands within 25 % of it.
    fits = RUNS[1]["gemm_sizes"]["fits"]
    assert [round(f["fixed_s"] * 1e6, 1) for f in fits.values()] == [5.6, 5.8, 5.2]
    assert shipped_constants().value("gemm_call_s") == pytest.approx(5.6e-6, rel=0.25)


@pytest.mark.parametrize("run", [0, 1])
def test_the_kv_read_lies_between_the_decode_attention_kernels_measured(run):
    # vLLM reads the KV cache with FlashAttention 3 on Hopper, which could not run there (vLLM cannot be installed).
    # Of torch's kernels, at 32 or more sequences (the grid fills the GPU), FlashAttention 2 read Llama-3.1-8B's KV
    # at about half of spec and torch's own GQA kernel at 88–96 %. FlashAttention 3 is Hopper's faster successor
    # of the first; no kernel reads faster than the second did. The model's KV rate on the H200 (η_kv × κ_fa3 of
    # 4.8 TB/s, fitted on published steps) lies between the two at every such shape.
    a = catalog.resolve_model("llama-3.1-8b")[0]
    shapes: dict[tuple[int, int], dict[str, float]] = {}
    for g in RUNS[run]["attention"]:
        if "layer_s" in g and g["seqs"] >= 32:
            # run 1 timed FlashAttention 2 alone (its rows name no kernel)
            shapes.setdefault((g["seqs"], g["context"]), {})[g.get("kernel", "flash2-packed")] = g["layer_s"]
    assert len(shapes) == 5
    for (seqs, ctx), kernels in shapes.items():
        model = step_terms(step_work(a, H200, decode_seqs=seqs, decode_context=ctx))["kv_s"] / a.num_layers
        assert model <= kernels["flash2-packed"], (seqs, ctx, model, kernels)
        assert model >= kernels.get("torch-gqa", 0.0), (seqs, ctx, model, kernels)
    assert run == 0 or all("torch-gqa" in k for k in shapes.values())


def test_the_per_layer_floor_covers_a_layers_other_kernels_at_graph_replay():
    # Under CUDA-graph replay a kernel node cost 0.83 µs on the H200 (2,000 one-element kernels). Besides its GEMMs
    # a Llama layer launches at least six more (two fused add-RMSNorms, rotary, the KV-cache write, attention,
    # SiLU-and-mul): the fitted per-layer floor is at least their replay cost.
    for r in RUNS:
        assert r["graph_floor"]["per_node_s"] == pytest.approx(0.83e-6, rel=0.05)
    assert shipped_constants().value("layer_s") >= 6 * RUNS[0]["graph_floor"]["per_node_s"]
    # Replaying a decode step's whole graph (vLLM 0.11 on), a layer costs those six nodes' replay and no more: the
    # shipped floor is that (its prior; the corpus cannot tell it from the host's) and below the piecewise one.
    full = shipped_constants().value("full_layer_s")
    assert full == pytest.approx(6 * RUNS[0]["graph_floor"]["per_node_s"], rel=0.1)
    assert full < shipped_constants().value("layer_s")


MOE_RUNS = {run: json.loads((RESULTS / run / "moe_kernel.json").read_text()) for run in ("run3", "run4")}
MOE = MOE_RUNS["run3"]


def moe_layer_model(case: dict) -> float:
    """The model's time for one MoE layer's two grouped GEMMs over the experts the case's tokens touched
    (``expert_layer_terms``: the shipped constants, the catalog model's kernel coefficients, bf16 or FP8 as its
    checkpoint is, on the H200)."""
    a = catalog.resolve_model(case["model"])[0]
    params = 3 * case["hidden"] * case["inter"] if "hidden" in case else case["touched_bytes"] / case["touched"] / 2
    return expert_layer_terms(a, H200, tp=case.get("tp", 1), tokens=case["tokens"],
                              expert_bytes=case["touched_bytes"],
                              expert_flops=2 * case["tokens"] * case["top_k"] * params)["weights_s"]


def test_the_moe_run_timed_vllms_own_kernel_and_checked_its_output():
    # benchmarks/gpu_moe_kernel.py launched vLLM 0.32.0's fused_moe_kernel (copied from its source) as vLLM does,
    # after checking each launch against torch's per-expert products (from the dequantized values for FP8).
    for r, cases in ((MOE_RUNS["run3"], 22), (MOE_RUNS["run4"], 44)):
        assert r["device"] == "NVIDIA H200" and r["vllm"] == "0.32.0" and not r["errors"]
        assert len(r["cases"]) == cases and all(c["max_rel_error"] < 2e-2 for c in r["cases"])
    # vLLM's tuned H200 configurations for every shape were used, not the defaults.
    assert {c["config_source"] for c in MOE_RUNS["run4"]["cases"]} == {
        "E=8,N=14336,device_name=NVIDIA_H200.json", "E=128,N=768,device_name=NVIDIA_H200.json",
        "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
        "E=128,N=768,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"}


@pytest.mark.parametrize("run", ["run3", "run4"])
def test_the_moe_expert_term_is_vllms_fused_moe_kernel_at_decode_batches(run):
    # At 1–128 tokens a layer's two grouped GEMMs stream the experts the tokens touch: bf16 Mixtral-8x7B's 2–8
    # experts of 352 MB and Qwen3-30B-A3B's 8–128 of 9.4 MB, and block-FP8 Qwen3-235B-A22B's (a tp-2 rank: 8–128
    # experts of 9.4 MB with their scales), at 2.5–4.5 TB/s. The model's expert term for the same touched
    # experts (their bytes at η_weights × κ[kernel] × κ_moe, two GEMM kernels' fixed time; fitted on published
    # end-to-end steps, never on these) is within 8 % of the bf16 kernel and 12 % of the FP8 one at every point.
    decode = [c for c in MOE_RUNS[run]["cases"] if c["tokens"] <= 128 and c["model"] != "deepseek-v3"]
    assert len(decode) == (16 if run == "run3" else 24)
    for c in decode:
        tolerance = 0.12 if c.get("weights") == "fp8" else 0.08
        assert moe_layer_model(c) / c["layer_s"] == pytest.approx(1, abs=tolerance), (c["model"], c["tokens"])


def test_deepseek_v3s_thin_fp8_experts_run_below_the_expert_rate():
    # A tp-8 rank of DeepSeek-V3 holds experts of 7168 × 256 (5.5 MB in FP8): the kernel streams them at 1.4–3.9
    # TB/s, below the rate every other shape reached, and the model's expert term takes 0.66–0.92 of its time at
    # 1–256 tokens (docs/latency.md, "still weak"): at worst 40 % short.
    cases = [c for c in MOE_RUNS["run4"]["cases"] if c["model"] == "deepseek-v3" and c["tokens"] <= 256]
    assert len(cases) == 9
    assert all(moe_layer_model(c) / c["layer_s"] >= 0.6 for c in cases)


def test_the_moe_prefill_term_is_no_faster_than_the_kernel():
    # From 1,024 tokens the grouped GEMMs compute-bind (Mixtral 429–525 TFLOP/s, Qwen3-30B-A3B 214–392). The model's
    # MoE FLOP rate (κ_moe_flops, fitted on published steps that also carry routing, alignment, the activation and
    # the final sum) takes 0.92–1.81 times the bf16 kernel's time there: never more than 10 % less. (Block-FP8
    # experts compute-bind below the FP8 rate the model gives them: 0.76–1.12 of the kernel's time, docs/latency.md.)
    for c in MOE["cases"] + [c for c in MOE_RUNS["run4"]["cases"] if c["weights"] == "bf16"]:
        if c["tokens"] >= 1024:
            assert moe_layer_model(c) / c["layer_s"] >= 0.9, (c["model"], c["tokens"])
