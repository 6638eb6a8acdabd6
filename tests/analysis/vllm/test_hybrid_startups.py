"""Published vLLM start-ups of hybrid recurrent models on CUDA GPUs, held against kvprof's allocator (issue #47).

Each record in tests/fixtures/hybrid_startups/ keeps its source URL, the settings the log states and its verbatim lines.
From the logged KV budget (rounded to 0.01 GiB), the model's layer shapes and the settings, kvprof must give the block
vLLM raised the attention block to ("Setting attention block size to N tokens"), the Mamba page's padding, the
padding layers, the concurrency and the logged token count by its version's formula. Nothing here is fitted: every
record is held out.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, ConfigDict

from analysis.catalog import resolve_model
from analysis.vllm.allocator import paged_capacity
from analysis.vllm.memory import rules_for

RECORDS = Path(__file__).parents[2] / "fixtures" / "hybrid_startups"
GiB = 2**30


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tensor_parallel_size: int
    kv_cache_dtype: str
    max_model_len: int
    enable_prefix_caching: bool
    mamba_ssm_cache_dtype: str


class Logged(BaseModel):
    model_config = ConfigDict(extra="forbid")
    block_size: int
    padding_pct: float | None  # None: no "Padding mamba page size" line (the pages are equal)
    padding_layers: int
    available_kv_gib: float
    kv_cache_tokens: int
    max_concurrency: float


class HybridStartup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str
    campaign: str
    vllm_version: str
    gpu: str
    model: str
    model_note: str
    settings: Settings
    logged: Logged
    excerpt: str
    excerpt_note: str


def _records() -> dict[str, HybridStartup]:
    return {p.stem: HybridStartup(**yaml.safe_load(p.read_text())) for p in sorted(RECORDS.glob("*.yaml"))}


@pytest.mark.parametrize("name", list(_records()))
def test_the_record_says_what_it_holds(name):
    rec = _records()[name]
    assert rec.source.startswith("https://github.com/")
    lines = rec.excerpt
    assert f"Setting attention block size to {rec.logged.block_size} tokens" in lines
    assert f"Available KV cache memory: {rec.logged.available_kv_gib:.2f} GiB" in lines
    assert f"GPU KV cache size: {rec.logged.kv_cache_tokens:,} tokens" in lines
    assert f"{rec.settings.max_model_len:,} tokens per request: {rec.logged.max_concurrency:.2f}x" in lines
    if rec.logged.padding_pct is not None:
        assert f"Padding mamba page size by {rec.logged.padding_pct:.2f}%" in lines
    if rec.logged.padding_layers:
        assert f"Add {rec.logged.padding_layers} padding layers" in lines


@pytest.mark.parametrize("name", list(_records()))
def test_kvprof_gives_the_logged_block_pool_and_capacity(name):
    rec = _records()[name]
    s, logged = rec.settings, rec.logged
    arch, _ = resolve_model(rec.model)
    arch = arch.model_copy(update={"recurrent": arch.recurrent.model_copy(
        update={"ssm_cache_dtype": s.mamba_ssm_cache_dtype})})

    def pool(budget: float):
        # CUDA: vLLM's default block of 16 tokens, the attention backends' 16-token kernel blocks
        return paged_capacity(arch, int(budget), block_size=16, max_model_len=s.max_model_len,
                              max_num_batched_tokens=8192, kv_cache_dtype=s.kv_cache_dtype,
                              tp=s.tensor_parallel_size, prefix_caching=s.enable_prefix_caching,
                              kernel_block_alignment=16)

    lo, hi = pool((logged.available_kv_gib - 0.005) * GiB), pool((logged.available_kv_gib + 0.005) * GiB)
    assert lo.block_size == logged.block_size
    (state, _), = [(k, n) for k, n in arch.attention_kinds if k.state_bytes()]
    padding = lo.page_bytes / state.state_bytes(s.tensor_parallel_size) - 1
    assert (round(100 * padding, 2) if padding else None) == logged.padding_pct
    assert lo.padding_layers == logged.padding_layers
    # the pool a budget within the log's rounding gives, and the two numbers vLLM printed from it
    formula = rules_for(rec.vllm_version).kv_tokens_logged
    printed = {(round(c.max_concurrency, 2), c.logged_tokens(formula))
               for c in (replace(lo, num_blocks=n) for n in range(lo.num_blocks, hi.num_blocks + 1))}
    assert (logged.max_concurrency, logged.kv_cache_tokens) in printed, printed


@pytest.mark.parametrize("name", list(_records()))
def test_kvprof_log_reads_a_hybrid_start_up_and_plans_what_it_ran(name):
    """`kvprof log` on the record's lines: the prefix cache as the engine ran it (off in each: stated in the engine's
    config line, or turned off by vLLM 0.13 for Qwen3-Next), then the pool from the logged budget."""
    from analysis.planning.startup_log_check import predict, summarize

    rec = _records()[name]
    logged = summarize(rec.excerpt, name)
    assert logged["enable_prefix_caching"] is False
    assert logged["attention_block_size"] == rec.logged.block_size
    ssm = logged["mamba_ssm_cache_dtype"] or rec.settings.mamba_ssm_cache_dtype  # else its config's
    p = predict(logged | {"mamba_ssm_cache_dtype": ssm, "kv_cache_dtype": rec.settings.kv_cache_dtype,
                          "tensor_parallel_size": rec.settings.tensor_parallel_size}, "catalog:" + rec.model)
    # from a budget rounded to 0.01 GiB: within a block of the logged pool (one block is concurrency ÷ blocks)
    one_block = p["max_concurrency"] / p["num_gpu_blocks"]
    assert p["max_concurrency"] == pytest.approx(rec.logged.max_concurrency, abs=one_block + 0.005)
    assert p["kv_cache_tokens"] == pytest.approx(rec.logged.kv_cache_tokens, rel=0.005)


def test_a_published_qwen3_6_start_up_is_planned_exactly_from_its_logged_budget():
    """Qwen3.6-35B-A3B (NVFP4 weights) on an RTX 5090, vLLM 0.24, fp8 KV, 131,072 tokens, the prefix cache asked for
    (tests/fixtures/vllm_logs/v0.24.0_qwen36_35b_rtx5090.log, from its GitHub issue): the architecture from NVIDIA's
    published Qwen3.6-35B-A3B config (the pool depends on the layer shapes, not on the weights' quantization). Ten
    attention layers of 2 KV heads × 256 × 2 × 1 B = 1,024 B a token; thirty gated DeltaNet states of
    3 × 8,192 × 2 + 32 × 128 × 128 × 4 (mamba_ssm_dtype float32) = 2,146,304 B: a 16 × cdiv(2,146,304, 16,384) =
    2,096-token block; ten layers a group, four groups; with the prefix cache cdiv(131,072, 2,096) = 63 attention
    blocks and two a DeltaNet group: 69 a request."""
    import json

    from analysis.model.architecture import Architecture
    from analysis.planning.startup_log_check import summarize

    cfg = json.loads((RECORDS.parent / "published_configs" / "nvidia--Qwen3.6-35B-A3B-NVFP4" / "config.json")
                     .read_text())
    cfg.pop("quantization_config")  # the pool only: the weights' scheme is not what this holds
    arch = Architecture.from_config(cfg, "qwen3.6-35b-a3b")
    log = summarize((RECORDS.parent / "vllm_logs" / "v0.24.0_qwen36_35b_rtx5090.log").read_text())
    assert log["enable_prefix_caching"] is True and log["kv_cache_dtype"] == "fp8"
    pool = paged_capacity(arch, log["available_kv_cache_bytes"], block_size=16, max_model_len=log["max_model_len"],
                          max_num_batched_tokens=log["max_num_batched_tokens"], kv_cache_dtype="fp8",
                          prefix_caching=True)
    assert (pool.block_size, pool.blocks_per_request) == (2096, 63 + 3 * 2)
    assert round(pool.max_concurrency, 2) == log["max_concurrency"] == 4.33
    assert pool.logged_tokens(rules_for("0.24.0").kv_tokens_logged) == log["kv_cache_tokens"] == 567_978
