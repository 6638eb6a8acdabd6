"""`kvprof recommend`, the inverse plan (issue #28): what to set so that N sequences of T tokens fit.

Expected values are arithmetic written out from config.json (bytes per token, blocks) and vLLM's own printed
numbers: the published start-up logs of tests/fixtures/gpu_corpus/ give, for the utilization the author set,
the concurrency vLLM logged; the inverse plan asked for that concurrency must land on that utilization.
"""

from __future__ import annotations

import json
import math

import pytest
from gpu_corpus import EXPLAINED, load_corpus, plan_quantization, speculative_config, unplannable, vllm_version
from typer.testing import CliRunner

from analysis import catalog
from analysis.model.kv import kv_bytes_per_token
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.planning.recommend import recommend
from profiler.cli import app

runner = CliRunner()
MiB = 2**20
H100_CUDA_TOTAL = 85_030_076_416  # catalog h100-sxm: cudaMemGetInfo's total (what vLLM budgets against)


def test_llama_8b_16_sequences_of_8k_on_one_h100_written_out():
    a, _ = catalog.resolve_model("llama-3.1-8b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    rec = recommend(a, PlanInputs(), gpu, [1], concurrency=16, context=8192)
    # KV per token: 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes = 131,072 B; a 16-token block 2 MiB.
    assert rec.bytes_per_block == 16 * 32 * 8 * 128 * 2 * 2 == 2 * MiB
    # 8,192 tokens = 512 blocks a sequence; 16 sequences and vLLM's null block: 8,193 blocks.
    assert rec.blocks_per_sequence == 512
    assert rec.kv_cache_memory_bytes == (16 * 512 + 1) * 2 * MiB == 17_181_966_336
    # Weights: 8,030,261,248 parameters (the published count) × 2 bytes, and the RoPE cache vLLM's model loading
    # also holds: 131,072 positions × 128 rotary dims × 2 bytes.
    assert rec.weight_bytes == 8_030_261_248 * 2 + 131_072 * 128 * 2 and rec.device_total_bytes == H100_CUDA_TOTAL
    # vLLM's budget is ceil(total × utilization) − weights − reserve: the recommended utilization gives at least
    # the budget, and one millionth less does not.
    def budget(u: float) -> int:
        return math.ceil(H100_CUDA_TOTAL * u) - rec.weight_bytes - rec.reserve_bytes

    assert budget(rec.gpu_memory_utilization) >= rec.kv_cache_memory_bytes
    assert budget(rec.gpu_memory_utilization - 1e-6) < rec.kv_cache_memory_bytes
    assert (rec.tensor_parallel_size, rec.replicas, rec.gpus_needed) == (1, 1, 1)
    assert (rec.sequences_fit, rec.sequences_fit_one_block_less) == (16, 15)
    assert rec.serve_flags == ["--tensor-parallel-size 1", "--max-model-len 8192",
                               f"--gpu-memory-utilization {rec.gpu_memory_utilization}"]
    assert rec.serve_flags_fixed_kv[-1] == "--kv-cache-memory-bytes 17181966336"
    # Planned back through the forward plan, as a user would check it: both settings hold the 16.
    for setting in ({"gpu_memory_utilization": rec.gpu_memory_utilization},
                    {"kv_cache_memory_bytes": rec.kv_cache_memory_bytes}):
        back = make_plan(a, PlanInputs(max_model_len=8192, context=8192, **setting), gpu)
        assert back.kv_full_batch == 16, setting


def test_more_than_one_replica_holds_what_one_cannot_and_says_so():
    a, _ = catalog.resolve_model("llama-3.1-70b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    rec = recommend(a, PlanInputs(), gpu, [8], concurrency=64, context=32768)
    # tp 8: 80 layers × (8 KV heads ÷ 8) × 128 × 2 × 2 B = 40,960 B a token per GPU, a block 640 KiB; 32,768 tokens
    # are 2,048 blocks. At 0.9 one replica of 8 H100s holds fewer than 64 (41), so two replicas of 32 each.
    assert rec.bytes_per_block == 16 * 80 * 1 * 128 * 2 * 2 == 655_360
    assert (rec.replicas, rec.gpus_needed, rec.sequences_per_replica) == (2, 16, 32)
    assert rec.kv_cache_memory_bytes == (32 * 2048 + 1) * 655_360
    assert "--data-parallel-size 2" in rec.serve_flags
    assert any("2 replicas of tp 8" in n for n in rec.notes)


def test_what_no_tp_holds_is_one_error_naming_each_tp():
    a, _ = catalog.resolve_model("llama-3.1-70b")
    gpu, _ = catalog.resolve_gpu("l4")
    with pytest.raises(PlanError, match=r"no tensor-parallel size of 1, 2 holds one sequence .* tp 1: .*tp 2: "):
        recommend(a, PlanInputs(), gpu, [1, 2], concurrency=4, context=8192)


CORPUS = load_corpus()


def _logged_concurrency(name: str) -> tuple[float, int] | None:
    """(C, T): vLLM's 'Maximum concurrency for T tokens per request: C' where logged; else, for a model whose
    layers all hold every token (no sliding window), its 'GPU KV cache size: K tokens' ÷ max_model_len T (the
    same ratio: blocks × block size ÷ T), T as stated or the model's own."""
    r = CORPUS[name]
    if r.logged.max_concurrency is not None and r.logged.max_concurrency_len is not None:
        return r.logged.max_concurrency, r.logged.max_concurrency_len
    a, _ = catalog.resolve_model(r.settings.catalog_model)
    if any(layer.kind == "sliding" for layer, _ in a.attention_kinds):
        return None
    t = r.settings.max_model_len or a.max_len_limit
    block = r.settings.block_size or 16
    if r.logged.kv_cache_tokens is not None:
        return r.logged.kv_cache_tokens / t, t
    if r.logged.num_gpu_blocks is not None:  # blocks × block size ÷ T
        return r.logged.num_gpu_blocks * block / t, t
    if r.logged.available_kv_gib is not None and r.logged.available_kv_gib > 0:
        # 'Available KV cache memory' ÷ (T × the KV bytes of a token: the seeds' 2 × layers × KV heads × head_dim
        # × bytes, per rank)
        per_token = kv_bytes_per_token(a.with_dtype(r.settings.dtype or "auto"), r.settings.kv_cache_dtype,
                                       r.settings.tensor_parallel_size)
        return r.logged.available_kv_gib * 2**30 / (t * per_token), t
    return None


def _concurrency_cases() -> list[str]:
    return sorted(name for name, r in CORPUS.items()
                  if unplannable(r) is None and name not in EXPLAINED
                  and "kv_cache_memory_bytes" not in r.settings.other_args
                  and (c := _logged_concurrency(name)) is not None and c[0] >= 3)


@pytest.mark.parametrize("name", _concurrency_cases())
def test_the_inverse_of_a_published_start_up_is_the_utilization_its_author_set(name):
    """vLLM logged C sequences of T tokens (its maximum concurrency) at the utilization the author set: asked for
    floor(C) − 1 sequences of T (the null block and rounding kept out of the way), the inverse plan recommends a
    utilization at most the author's (plus the plan's 2 % KV tolerance, as device memory) and at least the
    author's less the room of two sequences and that tolerance."""
    r = CORPUS[name]
    s = r.settings
    a, _ = catalog.resolve_model(s.catalog_model)
    gpu, _ = catalog.resolve_gpu(s.gpu)
    base = PlanInputs(kv_cache_dtype=s.kv_cache_dtype, block_size=s.block_size or 16,
                      gpu_memory_utilization=min(1.0, s.gpu_memory_utilization + 0.05),
                      max_num_batched_tokens=s.max_num_batched_tokens, max_num_seqs=s.max_num_seqs,
                      enforce_eager=s.enforce_eager, entry=s.entry, vllm_version=vllm_version(s),
                      quantization=plan_quantization(r, a), dtype=s.dtype or "auto",
                      speculative_config=speculative_config(r))
    c, t = _logged_concurrency(name)
    n = math.floor(c) - 1
    rec = recommend(a, base, gpu, [s.tensor_parallel_size], concurrency=n, context=t,
                    pps=[s.pipeline_parallel_size])
    assert rec.pipeline_parallel_size == s.pipeline_parallel_size
    assert rec.replicas == 1 and rec.sequences_fit >= n > rec.sequences_fit_one_block_less
    kv_tolerance = 0.02 * rec.kv_cache_memory_bytes / rec.device_total_bytes
    two_sequences = 2 * rec.blocks_per_sequence * rec.bytes_per_block / rec.device_total_bytes
    assert rec.gpu_memory_utilization <= s.gpu_memory_utilization + kv_tolerance, (rec.gpu_memory_utilization,
                                                                                     s.gpu_memory_utilization)
    assert rec.gpu_memory_utilization >= s.gpu_memory_utilization - two_sequences - kv_tolerance, (
        rec.gpu_memory_utilization, s.gpu_memory_utilization)


def test_the_corpus_gives_the_inverse_enough_published_start_ups():
    cases = _concurrency_cases()
    assert len(cases) >= 20 and len({CORPUS[c].settings.gpu for c in cases}) >= 2, cases


def test_cli_prints_the_flags_and_json_is_the_recommendation():
    args = ["recommend", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192", "--concurrency", "16",
            "--tp", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert "16 sequences of 8,192 tokens need 1 GPU(s): tp 1 × 1 replica(s)" in flat
    assert "--kv-cache-memory-bytes 17181966336" in flat and "--gpu-memory-utilization 0." in flat
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert rec["kv_cache_memory_bytes"] == 17_181_966_336 and rec["sequences_fit"] == 16


@pytest.mark.parametrize(("extra", "message"), [
    (["--gpu", "h100-sxm,h200", "--context", "8192", "--concurrency", "4"], "recommend needs one GPU"),
    (["--gpu", "h100-sxm"], "recommend needs --concurrency N and --context T"),
    (["--gpu", "h100-sxm", "--context", "8192", "--concurrency", "4", "--kv-cache-memory-bytes", "8GiB"],
     "--kv-cache-memory-bytes does not go with recommend"),
    (["--gpu", "h100-sxm", "--context", "8192", "--concurrency", "4", "--batch", "4"],
     "--batch does not go with recommend"),
    (["--gpu", "h100-sxm", "--context", "8192", "--concurrency", "4", "--tpot-slo", "50ms"],
     "No such option: --tpot-slo"),
    (["--gpu", "h100-sxm", "--context", "0", "--concurrency", "4"], "must be at least 1"),
])
def test_bad_recommend_input_is_one_line_and_exit_2(extra, message):
    res = runner.invoke(app, ["recommend", "--model", "llama-3.1-8b", *extra])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_plan_points_recommend_to_its_command():
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--recommend"])
    assert res.exit_code == 2 and "--recommend is its own command: kvprof recommend" in res.output
