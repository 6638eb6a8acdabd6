"""The latency model's terms (analysis.latency.step), each held against arithmetic written out here.

The constants are set by each test (round numbers), so every expected value follows from the config facts,
the datasheet and those numbers alone, not from the fitted file.
"""

from __future__ import annotations

import pytest

from analysis import catalog
from analysis.latency import step as latency
from analysis.latency.step import (
    Engine,
    LatencyConstants,
    burst_tpot_schedule,
    burst_ttft_schedule,
    decode_schedule,
    kernel_family,
    latency_schedule,
    prefill_schedule,
    queued_ttft_schedule,
    served_step_schedule,
    step_terms,
    step_time,
    ttft_schedule,
)
from analysis.latency.work import gemm_kernels
from analysis.vllm.release import allreduce_kind, era

H100 = catalog.resolve_gpu("h100-sxm")[0]  # 3.35 TB/s, 989 TFLOP/s bf16, NVLink 450 GB/s per direction
LLAMA8B = catalog.resolve_model("llama-3.1-8b")[0]
# Llama-3.1-8B: 8,030,261,248 parameters, 128,256 × 4,096 = 525,336,576 in the (untied) input embedding;
# a decode step reads every weight but the embedding: 2 B × 7,504,924,672 = 15,009,849,344 B.
# KV: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 131,072 B a token.
LLAMA8B_WEIGHTS_READ = 15_009_849_344
KV_PER_TOKEN = 131_072


def constants(**over: float) -> LatencyConstants:
    base = {n: 1.0 for n in latency.parameter_names()}
    base.update({n: 0.0 for n in base if n.endswith("_s") or "_s." in n})
    base["gemm_half_rows"] = 0.0  # GEMMs at their large-M rate unless a test sets the ramp
    base["host_overlap"] = 0.0  # the host's time in full, async scheduling or not, unless a test sets its share
    base.update(over)
    return LatencyConstants(params=base)


def test_a_dense_decode_step_is_its_terms_written_out():
    c = constants(**{"eta_weights.hopper": 0.5, "eta_kv.hopper": 0.25, "eta_flops.hopper": 0.5,
                     "host_s.0.9": 1e-3, "full_layer_s": 1e-5, "seq_s": 2e-5})
    s = decode_schedule(Engine(LLAMA8B, H100), 4, 1024)
    t = s.terms(c)
    # the weight stream; the GEMM arithmetic (4 tokens × 2 × 7.5e9 FLOPs at 494.5 TFLOP/s = 0.12 ms) rounds the
    # smooth max up by (0.12 / 8.96)^4 / 4 ≈ 1e-8
    assert t["weights_s"] == pytest.approx(LLAMA8B_WEIGHTS_READ / (3.35e12 * 0.5), rel=1e-7)
    assert t["kv_s"] == pytest.approx(4 * 1024 * KV_PER_TOKEN / (3.35e12 * 0.25), rel=1e-12)
    # Attention: 4 sequences × 32 layers × 1,024 cached tokens × 4 FLOPs × 32 heads × 128 (QKᵀ and AV)
    assert t["attention_s"] == pytest.approx(4 * 32 * 1024 * 4 * 32 * 128 / (989e12 * 0.5), rel=1e-12)
    assert t["communication_s"] == 0.0
    assert t["floor_s"] == pytest.approx(1e-3 + 4 * 2e-5 + 32 * 1e-5, rel=1e-12)
    assert s.time(c) == pytest.approx(sum(t[k] for k in latency.TERMS), rel=1e-12)


def test_each_gemm_kernel_pays_a_fixed_time_besides_its_bytes():
    # vLLM launches per Llama layer the fused QKV, O, fused gate/up and down GEMMs, and the LM head once:
    # 32 × 4 + 1 = 129 kernels. At 5 µs each, besides the 15 GB stream at half of 3.35 TB/s.
    assert gemm_kernels(LLAMA8B) == 129
    c = constants(**{"eta_weights.hopper": 0.5}, gemm_call_s=5e-6)
    w = Engine(LLAMA8B, H100).step(decode_seqs=1, decode_context=100)
    assert step_terms(w, c)["weights_s"] == pytest.approx(LLAMA8B_WEIGHTS_READ / (3.35e12 * 0.5) + 129 * 5e-6,
                                                          rel=1e-6)
    # A tensor-parallel rank launches the same kernels on a quarter of the bytes.
    w4 = Engine(LLAMA8B, H100, tp=4).step(decode_seqs=1, decode_context=100)
    assert step_terms(w4, c)["weights_s"] == pytest.approx(
        LLAMA8B_WEIGHTS_READ / 4 / (3.35e12 * 0.5) + 129 * 5e-6, rel=1e-6)
    # Mixtral-8x7B: per layer QKV, O, the router and the two grouped expert GEMMs: 32 × 5 + 1.
    assert gemm_kernels(catalog.resolve_model("mixtral-8x7b")[0]) == 161
    # DeepSeek-V3: 61 latent-attention layers of five GEMMs (the fused q_a/kv_a down-projection, q_b, the
    # absorbed K and V up-projections, O); 3 dense MLPs of two; 58 MoE layers: router, two grouped GEMMs and the
    # shared expert's two; and the LM head: 61 × 5 + 3 × 2 + 58 × 5 + 1.
    assert gemm_kernels(catalog.resolve_model("deepseek-v3")[0]) == 61 * 5 + 3 * 2 + 58 * 5 + 1


def test_gemm_arithmetic_binds_a_large_batch():
    # 4,096 tokens in one step: 2 × (8,030,261,248 − 2 × 525,336,576) FLOPs per token through the body and the
    # LM head once per sequence; the weight stream is 15 GB. At η_f 0.5: 4,096 × 13.96e9 / 494.5e12 = 0.116 s,
    # far past the stream's 4.5 ms: the smooth max is the arithmetic to within (4.5/116)^4 / 4.
    c = constants(**{"eta_flops.hopper": 0.5})
    w = Engine(LLAMA8B, H100).step(prefill_tokens=4096, prefill_seqs=1)
    body = 8_030_261_248 - 2 * 525_336_576
    gemm = (2 * body * 4096 + 2 * 525_336_576) / (989e12 * 0.5)
    t = step_terms(w, c)
    assert t["gemm_compute_s"] == pytest.approx(gemm, rel=1e-12)
    assert t["weights_s"] == pytest.approx(gemm, rel=1e-5)


def test_a_gemm_of_few_rows_runs_below_its_large_m_rate():
    # Half the large-M rate at m½ rows: at m½ = 64, 4,096 prompt tokens run at 4,096 / 4,160 of it, so the
    # arithmetic takes (1 + 64/4,096) times the large-M time. Rows are counted from a 16-row MMA tile up: a decode
    # of 4 sequences runs its 4 rows' FLOPs at 16 / 80 of the rate, (1 + 64/16) = 5 times the large-M time.
    c = constants(**{"eta_flops.hopper": 0.5}, gemm_half_rows=64.0)
    body = 8_030_261_248 - 2 * 525_336_576
    e = Engine(LLAMA8B, H100)
    prefill = e.step(prefill_tokens=4096, prefill_seqs=1)
    assert step_terms(prefill, c)["gemm_compute_s"] == pytest.approx(
        (2 * body * 4096 + 2 * 525_336_576) / (989e12 * 0.5) * (1 + 64 / 4096), rel=1e-12)
    decode = e.step(decode_seqs=4, decode_context=100)
    assert step_terms(decode, c)["gemm_compute_s"] == pytest.approx(
        4 * 2 * (8_030_261_248 - 525_336_576) / (989e12 * 0.5) * 5, rel=1e-12)  # body + LM head, 4 rows
    # ... which still hides under the 15 GB weight stream (4.5 ms at peak against 0.3 ms)
    assert step_terms(decode, c)["weights_s"] == pytest.approx(LLAMA8B_WEIGHTS_READ / 3.35e12, rel=1e-4)
    # A calibration's FLOP rate was measured at the sweep's batches: no ramp on top of it.
    from analysis.latency.step import Overrides
    t = step_terms(prefill, c, Overrides(flops=400e12))
    assert t["gemm_compute_s"] == pytest.approx((2 * body * 4096 + 2 * 525_336_576) / 400e12, rel=1e-12)


def test_tensor_parallel_all_reduces_pay_latency_and_bytes():
    c = constants(**{"allreduce_s.nvlink": 1e-5})
    w = Engine(LLAMA8B, H100, tp=2, vllm_version="0.8.5").step(decode_seqs=8, decode_context=512)
    # two all-reduces a layer × 32 layers; each moves 8 tokens × 4,096 × 2 B × 2(tp−1)/tp per GPU
    assert w.allreduces == 64
    assert step_terms(w, c)["communication_s"] == pytest.approx(64 * 1e-5 + 64 * 8 * 4096 * 2 * 1.0 / 450e9)
    assert w.dense_bytes == pytest.approx(LLAMA8B_WEIGHTS_READ / 2)
    # Before vLLM 0.9 an all-reduce's latency grows with log2 of the ranks it synchronises: at tp 8, three times
    # tp 2's; the bytes each GPU moves are 2(tp−1)/tp = 1.75 of the tensor.
    w8 = Engine(LLAMA8B, H100, tp=8, vllm_version="0.8.5").step(decode_seqs=8, decode_context=512)
    assert step_terms(w8, c)["communication_s"] == pytest.approx(
        64 * 3 * 1e-5 + 64 * 8 * 4096 * 2 * 1.75 / 450e9)
    # From 0.9 on its latency is flat in tp: tp 8 pays tp 2's latency, and still its bytes.
    new8 = Engine(LLAMA8B, H100, tp=8, vllm_version="0.15.1").step(decode_seqs=8, decode_context=512)
    assert step_terms(new8, c)["communication_s"] == pytest.approx(64 * 1e-5 + 64 * 8 * 4096 * 2 * 1.75 / 450e9)


def test_async_scheduling_hides_the_hosts_time_behind_the_gpus():
    # vLLM 0.14 on schedules step N + 1 while step N runs (async scheduling, on by default): the host's time
    # (its per-step cost and per-sequence cost) shows only where it outlasts the GPU's, by the smooth max
    # (gpu⁴ + host⁴)^¼ − gpu, and host_overlap is the share of it hidden so.
    c = constants(**{"eta_weights.hopper": 0.5, "eta_kv.hopper": 0.25, "eta_flops.hopper": 0.5,
                     "host_s.0.9": 1e-3, "full_layer_s": 1e-5, "seq_s": 2e-5, "host_overlap": 0.5})
    sync = Engine(LLAMA8B, H100, vllm_version="0.13.0").step(decode_seqs=4, decode_context=1024)
    ahead = Engine(LLAMA8B, H100, vllm_version="0.14.0").step(decode_seqs=4, decode_context=1024)
    assert (sync.overlap, ahead.overlap) == (False, True)
    host, launches = 1e-3 + 4 * 2e-5, 32 * 1e-5
    assert step_terms(sync, c)["floor_s"] == pytest.approx(launches + host, rel=1e-12)
    t = step_terms(ahead, c)
    gpu = t["weights_s"] + t["kv_s"] + t["attention_s"] + launches  # ≈ 9.9 ms against the host's 1.08 ms
    shown = (gpu ** 4 + host ** 4) ** 0.25 - gpu  # ≈ 0.3 µs: nearly all of it hides
    assert t["floor_s"] == pytest.approx(launches + host - 0.5 * (host - shown), rel=1e-9)
    # asked for explicitly, or off, whatever the version's default
    assert Engine(LLAMA8B, H100, vllm_version="0.10.1", async_scheduling=True).step(decode_seqs=1).overlap
    assert not Engine(LLAMA8B, H100, async_scheduling=False).step(decode_seqs=1).overlap


def test_attention_kernels_of_older_vllm_eras_have_their_own_efficiency():
    # The KV read runs at η_kv of the generation; before vLLM 0.9 (V0's paged-attention kernels) × kv_era, and where
    # FlashAttention 3 reads it (Hopper from vLLM 0.7.0 on, vLLM PRs 12093 and 15231) × κ_fa3.
    c = constants(**{"eta_kv.hopper": 0.8, "eta_kv.ampere": 0.6, "kv_era.0.6": 0.5, "kv_kernel.fa3": 1.25})
    kv = 4 * 1024 * KV_PER_TOKEN

    def kv_s(gpu, version):
        return step_terms(Engine(LLAMA8B, gpu, vllm_version=version).step(decode_seqs=4, decode_context=1024),
                          c)["kv_s"]

    assert kv_s(H100, "0.10.1") == pytest.approx(kv / (3.35e12 * 0.8 * 1.25))
    assert kv_s(H100, "0.7.2") == pytest.approx(kv / (3.35e12 * 0.8 * 0.5 * 1.25))  # V0 era, FA3 already
    assert kv_s(H100, "0.6.3") == pytest.approx(kv / (3.35e12 * 0.8 * 0.5))  # FlashAttention 2
    assert kv_s(H100, None) == pytest.approx(kv / (3.35e12 * 0.8 * 1.25))  # unstated: the newest
    a100 = catalog.resolve_gpu("a100-80gb-sxm")[0]  # 2.039 TB/s; FA3 is Hopper's alone
    assert kv_s(a100, "0.10.1") == pytest.approx(kv / (2.039e12 * 0.6))


def test_an_moe_step_reads_the_experts_its_tokens_touch():
    mixtral = catalog.resolve_model("mixtral-8x7b")[0]  # 8 experts, top 2
    e = Engine(mixtral, H100)
    # E · (1 − (1 − k/E)^B): batch 1 touches 2, batch 4 touches 8 · (1 − 0.75⁴) = 5.46875 of 8
    one, four = e.step(decode_seqs=1, decode_context=100), e.step(decode_seqs=4, decode_context=100)
    assert one.experts_touched == pytest.approx(2.0) and four.experts_touched == pytest.approx(5.46875)
    assert four.expert_bytes / one.expert_bytes == pytest.approx(5.46875 / 2)
    c = constants(moe_kernel=0.5)
    # with the MoE kernel at half the dense stream, the experts' bytes take twice as long
    t = step_terms(one, c)
    assert t["weight_stream_s"] == pytest.approx(one.dense_bytes / 3.35e12 + one.expert_bytes / (3.35e12 * 0.5))


def test_every_expert_a_step_touches_costs_a_gemm_of_its_own_in_every_moe_layer_before_vllm_0_9():
    # Before vLLM 0.9 a fused-MoE kernel paid a cost per expert GEMM on top of the expert's bytes, in every MoE
    # layer. Mixtral, 32 MoE layers: batch 1 calls 2 experts a layer, batch 4 8 · (1 − 0.75⁴) = 5.46875.
    mixtral = catalog.resolve_model("mixtral-8x7b")[0]
    e = Engine(mixtral, H100, vllm_version="0.6.3")
    one, four = e.step(decode_seqs=1, decode_context=100), e.step(decode_seqs=4, decode_context=100)
    assert (one.expert_calls, four.expert_calls) == (pytest.approx(32 * 2), pytest.approx(32 * 5.46875))
    c = constants(**{"expert_call_s.0.6": 3e-6})  # the cost of the 0.6–0.8 era's kernels (each era has its own)
    for w in (one, four):
        assert step_terms(w, c)["weight_stream_s"] == pytest.approx(
            (w.dense_bytes + w.expert_bytes) / 3.35e12 + w.expert_calls * 3e-6)
    # From vLLM 0.9 on an expert costs its bytes alone: no constant is fitted for it
    assert "expert_call_s.0.9" not in latency.parameter_names()
    new = Engine(mixtral, H100, vllm_version="0.10.0").step(decode_seqs=4, decode_context=100)
    assert step_terms(new, c)["weight_stream_s"] == pytest.approx((new.dense_bytes + new.expert_bytes) / 3.35e12)
    # a dense model calls none
    assert Engine(LLAMA8B, H100).step(decode_seqs=4, decode_context=100).expert_calls == 0


def test_a_weight_only_quantized_gemm_computes_below_the_bf16_rate():
    # AWQ int4 Llama-3.1-8B: Marlin/AWQ kernels dequantize each weight tile to bf16 in the main loop, so a
    # 4,096-token prefill's GEMMs run at kernel_flops × η_f of the bf16 peak; the same prompt through bf16
    # weights runs at η_f alone. 2 × 4,096 tokens × (8,030,261,248 − 525,336,576 looked up − 525,336,576 LM head)
    # body parameters + 2 × 1 sampled row × the LM head.
    import json

    from analysis.model.architecture import Architecture

    config = json.loads((catalog.model_dir("llama-3.1-8b") / "config.json").read_text(encoding="utf-8"))
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                     "version": "gemm"}
    awq = Architecture.from_config(config, "llama-3.1-8b-awq")
    c = constants(**{"eta_flops.hopper": 0.5, "kernel_flops.int4": 0.5})
    w = Engine(awq, H100).step(prefill_tokens=4096, prefill_seqs=1)
    assert w.kernel == "int4"
    flops = 2 * 4096 * (8_030_261_248 - 2 * 525_336_576) + 2 * 525_336_576
    assert w.gemm_flops == pytest.approx(flops)
    assert step_terms(w, c)["gemm_compute_s"] == pytest.approx(flops / (989e12 * 0.5 * 0.5))
    bf16 = Engine(LLAMA8B, H100).step(prefill_tokens=4096, prefill_seqs=1)
    assert step_terms(bf16, c)["gemm_compute_s"] == pytest.approx(flops / (989e12 * 0.5))
    # MXFP4 experts on Blackwell run FlashInfer's native FP4 MoE, not a weight-only kernel: no such factor
    oss = catalog.resolve_model("gpt-oss-20b")[0]
    b200 = catalog.resolve_gpu("b200")[0]
    hopper = Engine(oss.with_quantization(None, generation="hopper"), H100).step(prefill_tokens=512,
                                                                                   prefill_seqs=1)
    blackwell = Engine(oss.with_quantization(None, generation="blackwell"), b200).step(prefill_tokens=512,
                                                                                         prefill_seqs=1)
    assert (latency.weight_only(hopper), latency.weight_only(blackwell)) == (True, False)


def test_an_moe_prefill_runs_its_experts_grouped_gemms_at_their_own_efficiency():
    mixtral = catalog.resolve_model("mixtral-8x7b")[0]
    # Mixtral: 32 layers × 2 of 8 experts × 3 × 4,096 × 14,336 = 11,274,289,152 routed parameters a token;
    # 2,048 prompt tokens run 2 × 2,048 × that through the experts' grouped GEMMs, at moe_flops × η_f
    experts = 32 * 2 * 3 * 4096 * 14336
    c = constants(**{"eta_flops.hopper": 0.5}, moe_flops=0.25)
    w = Engine(mixtral, H100).step(prefill_tokens=2048, prefill_seqs=1)
    assert w.expert_gemm_flops == pytest.approx(2 * 2048 * experts)
    t = step_terms(w, c)
    assert t["gemm_compute_s"] == pytest.approx((w.gemm_flops + w.expert_gemm_flops / 0.25) / (989e12 * 0.5))
    # a dense model has none
    assert Engine(LLAMA8B, H100).step(prefill_tokens=2048, prefill_seqs=1).expert_gemm_flops == 0


def test_latent_attention_layers_pay_their_own_per_layer_floor():
    # DeepSeek-V3: 61 layers, every one MLA (absorbed up-projections, more kernels a layer), 58 of them MoE
    # (first_k_dense_replace 3); a GQA model pays none of it.
    v3 = catalog.resolve_model("deepseek-v3")[0]
    c = constants(**{"host_s.0.9": 1e-3, "full_layer_s": 1e-5, "moe_layer_s": 2e-5, "mla_layer_s": 4e-5})
    w = Engine(v3, H100, tp=8).step(decode_seqs=1, decode_context=100)
    assert (w.layers, w.moe_layers, w.mla_layers) == (61, 58, 61)
    assert step_terms(w, c)["floor_s"] == pytest.approx(1e-3 + 61 * 1e-5 + 58 * 2e-5 + 61 * 4e-5)
    dense = Engine(LLAMA8B, H100).step(decode_seqs=1, decode_context=100)
    assert dense.mla_layers == 0
    assert step_terms(dense, c)["floor_s"] == pytest.approx(1e-3 + 32 * 1e-5)


def test_a_decode_step_replays_one_whole_graph_from_vllm_0_11_and_mixed_steps_stay_piecewise():
    # vLLM 0.11.0's default cudagraph mode is FULL_AND_PIECEWISE: a pure decode batch replays one graph, so a layer
    # costs its kernels' replay (full_layer_s); before 0.11, and for a step that carries prompt tokens, the graph
    # breaks around attention (layer_s); eager mode launches every kernel (eager_layer_s). 32 Llama layers each.
    c = constants(**{"full_layer_s": 5e-6, "layer_s": 8e-6, "eager_layer_s": 6e-5})

    def floor(version: str | None, eager: bool = False, prefill: float = 0) -> float:
        w = Engine(LLAMA8B, H100, vllm_version=version, enforce_eager=eager).step(
            decode_seqs=4, decode_context=1024, prefill_tokens=prefill, prefill_seqs=1 if prefill else None)
        return step_terms(w, c)["floor_s"]

    assert floor("0.10.2") == pytest.approx(32 * 8e-6)
    assert floor("0.11.0") == floor(None) == pytest.approx(32 * 5e-6)
    assert floor("0.11.0", prefill=512) == pytest.approx(32 * 8e-6)
    assert floor("0.11.0", eager=True) == floor("0.10.2", eager=True) == pytest.approx(32 * 6e-5)


def test_quantized_kernels_and_eras_are_named_from_the_checkpoint_and_version():
    assert kernel_family(LLAMA8B) == "bf16"
    assert kernel_family(catalog.resolve_model("gpt-oss-120b")[0]) == "mxfp4"
    assert kernel_family(catalog.resolve_model("qwen3-235b-a22b-fp8")[0]) == "fp8"
    assert [era(v) for v in ("0.2.7", "0.5.4", "0.6.0", "0.8.5", "0.9.0", "0.32.0", None)] == [
        "0.5", "0.5", "0.6", "0.6", "0.9", "0.9", "0.9"]
    # vLLM's custom all-reduce (PR 2192) shipped in 0.3.0 and runs over NVLink; before it, and over PCIe, NCCL's
    l40s = catalog.resolve_gpu("l40s")[0]
    assert [allreduce_kind(H100, v) for v in ("0.2.7", "0.3.0", None)] == ["nccl", "nvlink", "nvlink"]
    assert allreduce_kind(l40s, "0.32.0") == "pcie"


def test_schedules_compose_steps_as_the_benchmarks_run_them():
    c = constants(**{"host_s.0.9": 1e-3}, api_s=5e-3)
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=2048)
    dec = decode_schedule(e, 8, 1024 + 64).time(c)
    pre = prefill_schedule(e, 8, 1024).time(c)
    # vllm bench latency: the batch's prefill (8 × 1,024 tokens in 4 chunks of 2,048), then 127 decode steps
    assert len(prefill_schedule(e, 8, 1024).steps) == 4
    assert latency_schedule(e, 8, 1024, 128).time(c) == pytest.approx(pre + 127 * dec)
    # TTFT while 3 others decode: half their step's wait, the prompt mixed into one step, the API server
    ttft = ttft_schedule(e, 1024, decoding=3, context=500).time(c)
    mixed = step_time(e.step(decode_seqs=3, decode_context=500, prefill_tokens=1024, prefill_seqs=1), c)
    assert ttft == pytest.approx(0.5 * decode_schedule(e, 3, 500).time(c) + mixed + 5e-3)


def test_a_served_step_carries_an_arriving_prompt_in_its_share_of_the_steps():
    c = constants(**{"host_s.0.9": 1e-3})
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=8192)
    # 10 in flight, 1,024 tokens out each: while one request decodes, each of the 9 others takes a new prompt
    # every 1,024 steps, so 9/1,024 of its steps carry 2,048 prompt tokens (its own prompt ran before its TPOT)
    s = served_step_schedule(e, 10, 2048, 1024)
    f = 9 / 1024
    dec = decode_schedule(e, 10, 2048 + 512).time(c)
    mixed = step_time(e.step(decode_seqs=10, decode_context=2560, prefill_tokens=2048, prefill_seqs=1), c)
    assert s.time(c) == pytest.approx((1 - f) * dec + f * mixed)
    # every request started together: the decode step alone; and so at concurrency 1, where no other prompt comes
    assert served_step_schedule(e, 10, 2048, 1024, steady=False).time(c) == pytest.approx(dec)
    assert served_step_schedule(e, 1, 2048, 1024).time(c) == pytest.approx(decode_schedule(e, 1, 2560).time(c))


def test_more_than_one_arriving_prompt_a_step_fills_every_step_and_then_the_token_budget():
    c = constants(**{"host_s.0.9": 1e-3})
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=8192)
    # 201 in flight, 100 tokens out each: 200 / 100 = 2 prompts of 1,000 tokens arrive a step; 2,000 prompt tokens
    # fit beside the 201 decodes in the 8,192-token budget, so every step carries them
    every = step_time(e.step(decode_seqs=201, decode_context=1050, prefill_tokens=2000, prefill_seqs=2), c)
    assert served_step_schedule(e, 201, 1000, 100).time(c) == pytest.approx(every)
    # 4,000-token prompts: 8,000 prompt tokens a step do not fit beside 201 decodes; the budget binds, and the engine
    # decodes the D sequences it can refill: D + D · 4,000 / 100 = 8,192, D = 8,192 / 41 = 199.8, the step full
    d = 8192 / 41
    full = step_time(e.step(decode_seqs=d, decode_context=4050, prefill_tokens=8192 - d,
                            prefill_seqs=(8192 - d) / 4000), c)
    assert served_step_schedule(e, 201, 4000, 100).time(c) == pytest.approx(full)
    # without chunked prefill (V0) the two prompts run as prefill steps of their own between decode steps
    v0 = Engine(LLAMA8B, H100, max_num_batched_tokens=8192, chunked_prefill=False)
    alone = decode_schedule(v0, 201, 1050).time(c) + prefill_schedule(v0, 2, 1000).time(c)
    assert served_step_schedule(v0, 201, 1000, 100).time(c) == pytest.approx(alone)


def test_a_burst_of_prompts_waits_for_the_chunks_before_its_own():
    c = constants(**{"host_s.0.9": 1e-3})
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=2048)
    # 4 prompts of 1,000 tokens: chunks of 2,048 and 1,952; prompts 1 and 2 end in the first, 3 and 4 in the
    # second, whose step also decodes the two started (chunked prefill mixes them)
    first = step_time(e.step(prefill_tokens=2048, prefill_seqs=2.048), c)
    second = step_time(e.step(prefill_tokens=1952, prefill_prefix=48, prefill_seqs=1.952, decode_seqs=2,
                              decode_context=1000), c)
    assert burst_ttft_schedule(e, 4, 1000, "mean", served=False).time(c) == pytest.approx(first + 0.5 * second)
    assert burst_ttft_schedule(e, 4, 1000, "median", served=False).time(c) == pytest.approx(first)
    # 8 such prompts where the engine runs 4 at once: the last 4 wait for a whole first wave, its prefill and
    # output_len − 1 = 9 decode steps of 4 sequences (at 1,000 + 10/2 tokens); the mean request waits half a wave
    dec = decode_schedule(e, 4, 1005).time(c)
    wave = first + second + 9 * dec
    assert burst_ttft_schedule(e, 8, 1000, "mean", served=False, running=4, output_len=10).time(c) == \
        pytest.approx(first + 0.5 * second + 0.5 * wave)
    # the median request (the 4th of 8, counting from 1) is in the first wave
    assert burst_ttft_schedule(e, 8, 1000, "median", served=False, running=4, output_len=10).time(c) == \
        pytest.approx(first)


def test_a_burst_pays_the_prefill_behind_each_first_token_in_its_tpot():
    c = constants(**{"host_s.0.9": 1e-3})
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=2048)
    # as above: requests 1 and 2 get their first token from the first chunk, so their next token comes with the
    # second chunk's step; their other 9 of 10 tokens, and all 10 of requests 3 and 4, are decode steps of 4
    second = step_time(e.step(prefill_tokens=1952, prefill_prefix=48, prefill_seqs=1.952, decode_seqs=2,
                              decode_context=1000), c)
    dec = decode_schedule(e, 4, 1000 + 5.5).time(c)
    mean = (2 * (second + 9 * dec) + 2 * 10 * dec) / 40
    assert burst_tpot_schedule(e, 4, 1000, 11, "mean").time(c) == pytest.approx(mean)
    # the median request (the 2nd by first token) is one of the first two
    assert burst_tpot_schedule(e, 4, 1000, 11, "median").time(c) == pytest.approx((second + 9 * dec) / 10)


def test_a_burst_beyond_what_the_engine_runs_decodes_later_requests_in_its_steady_state():
    c = constants(**{"host_s.0.9": 1e-3})
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=2048)
    # 12 prompts at once where 4 run: the first 4 are the burst above; the other 8 are admitted as slots free, into
    # an engine that stays full, and decode in its steady state (served_step_schedule at 4): the mean weighs 4/12
    # and 8/12; the median request (the 6th) is one of the later ones
    first = burst_tpot_schedule(e, 4, 1000, 11, "mean").time(c)
    steady = served_step_schedule(e, 4, 1000, 11).time(c)
    assert burst_tpot_schedule(e, 12, 1000, 11, "mean", running=4).time(c) == \
        pytest.approx(first / 3 + 2 * steady / 3)
    assert burst_tpot_schedule(e, 12, 1000, 11, "median", running=4).time(c) == pytest.approx(steady)
    # 6 where 4 run: the median request (the 3rd) is of the first wave
    assert burst_tpot_schedule(e, 6, 1000, 11, "median", running=4).time(c) == \
        pytest.approx(burst_tpot_schedule(e, 4, 1000, 11, "median").time(c))


def test_a_closed_loop_beyond_what_the_engine_runs_queues_for_whole_lifetimes():
    c = constants(**{"host_s.0.9": 1e-3}, api_s=5e-3)
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=8192)
    # 12 clients where 4 run: by Little's law each request spends 12/4 lifetimes in the system, one of them
    # running, so it queues 2 lifetimes of 100 served steps of 4 before the TTFT of a prompt joining 3 others
    life = served_step_schedule(e, 4, 500, 100).time(c)
    ttft = ttft_schedule(e, 500, decoding=3, context=550).time(c)
    assert queued_ttft_schedule(e, 12, 4, 500, 100).time(c) == pytest.approx(ttft + 2 * 100 * life)


def test_a_latency_run_of_one_output_token_is_its_batch_prefill():
    import yaml

    from analysis.latency.corpus import LatencyRecord
    from analysis.latency.fit import record_targets

    doc = yaml.safe_load("""
source: https://example.org/run
description: sixteen 1,024-token prompts, one token each
settings: {model: meta-llama/Llama-3.1-8B, catalog_model: llama-3.1-8b, gpu: h100-sxm, vllm_version: "0.10.0",
           max_num_batched_tokens: 8192}
workload: {benchmark: latency, batch_size: 16, input_len: 1024, output_len: 1}
reported: {avg_latency_s: 0.5}
derive: prefill
excerpt: "Avg latency: 0.5 seconds"
""")
    (t,) = record_targets("x", LatencyRecord.model_validate(doc))
    assert (t.kind, t.regime, t.measured_s) == ("ttft", "ttft", 0.5)
    c = constants(**{"eta_weights.hopper": 0.5, "eta_flops.hopper": 0.5, "host_s.0.9": 1e-3})
    # 16,384 prompt tokens in chunks of the 8,192-token budget: two steps of eight whole prompts each
    e = Engine(LLAMA8B, H100, max_num_batched_tokens=8192, vllm_version="0.10.0")
    step = e.step(prefill_tokens=8192, prefill_seqs=8)
    assert t.schedule.time(c) == pytest.approx(2 * step_time(step, c))
    # a run that generates more than one token is not a prefill, and a prefill is a latency run
    with pytest.raises(ValueError, match="output_len 1"):
        LatencyRecord.model_validate({**doc, "workload": {**doc["workload"], "output_len": 2}})
    with pytest.raises(ValueError, match="output_len 1"):
        LatencyRecord.model_validate({**doc, "workload": {"benchmark": "serve", "max_concurrency": 16,
                                                          "input_len": 1024, "output_len": 1}})


def test_the_plan_reports_the_model_its_terms_the_roofline_and_intervals():
    from analysis.planning.plan import PlanInputs, make_plan

    p = make_plan(LLAMA8B, PlanInputs(batch=1, context=1024, prompt_len=512, max_model_len=8192), H100)
    assert p.decode_step_s == pytest.approx(sum(p.decode_terms[k] for k in latency.TERMS))
    assert p.roofline_decode_step_s == pytest.approx((LLAMA8B_WEIGHTS_READ + 1024 * KV_PER_TOKEN) / 3.35e12)
    assert p.decode_step_s > p.roofline_decode_step_s
    assert p.tokens_per_s == pytest.approx(1 / p.decode_step_s)
    lo, hi = p.decode_step_interval_s
    assert lo < hi and "published vLLM measurements" in p.decode_checked_against
    assert p.ttft_s > p.prefill_s > 0 and p.ttft_interval_s[0] < p.ttft_interval_s[1]


def test_a_cpu_plan_keeps_the_roofline_and_says_why():
    from analysis.planning.plan import PlanInputs, make_plan

    cpu = catalog.GPU(name="probe: cpu", display="cpu", memory_mib=65536, bandwidth_tbs=0.02, bf16_tflops=1.0,
                      cpu=True)
    p = make_plan(LLAMA8B, PlanInputs(batch=1, context=1024, max_model_len=8192), cpu)
    assert p.decode_step_s == p.roofline_decode_step_s
    assert "no evidence-fitted constants for CPUs" in p.latency_model


def test_a_gpu_of_no_catalogued_generation_gets_the_pooled_efficiencies():
    c = constants(eta_weights=0.5, **{"eta_weights.hopper": 0.9})
    probed = catalog.GPU(name="probe: x", display="x", memory_mib=81920, bandwidth_tbs=3.35, bf16_tflops=989)
    w = Engine(LLAMA8B, probed).step(decode_seqs=1, decode_context=1)
    assert w.generation == "pooled" and w.link == "pcie"  # nothing known about its links: the slower kind
    assert step_terms(w, c)["effective_weight_bandwidth_Bps"] == pytest.approx(3.35e12 * 0.5)


def test_a_latency_printed_in_milliseconds_is_the_same_figure_and_not_both():
    import yaml
    from pydantic import ValidationError

    from analysis.latency.corpus import LatencyRecord
    from analysis.latency.fit import record_targets

    doc = yaml.safe_load("""
source: https://example.org/ci
description: vLLM CI's latency table, batch 8, 32 in / 128 out
settings: {model: meta-llama/Meta-Llama-3-8B, catalog_model: llama-3-8b, gpu: h100-sxm, vllm_version: "0.6.3"}
workload: {benchmark: latency, batch_size: 8, input_len: 32, output_len: 128}
reported: {mean_latency_ms: 997.542}
derive: latency
excerpt: "latency_llama8B_tp1 8xH100 997.542 997.365 999.409"
""")
    (t,) = record_targets("x", LatencyRecord.model_validate(doc))
    assert (t.kind, t.per, t.measured_s) == ("decode", "latency", pytest.approx(0.997542))
    doc["reported"]["avg_latency_s"] = 0.997542
    with pytest.raises(ValidationError, match="the same figure"):
        LatencyRecord.model_validate(doc)
