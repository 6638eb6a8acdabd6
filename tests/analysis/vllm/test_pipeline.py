"""Pipeline parallelism as vLLM lays it out (analysis.vllm.pipeline; issue #28): layers per stage as vLLM's
``get_pp_indices`` splits them, each stage's weights written out from the config, the pool the smallest stage's.
The published pp 2 and pp 4 start-ups are held in tests/analysis/planning/test_plan_vs_gpu_corpus.py."""

from __future__ import annotations

import pytest
from helpers import FIXTURES
from typer.testing import CliRunner

from analysis import catalog
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.vllm.pipeline import layer_partition, stages
from profiler.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("layers", "pp", "expected"), [
    (32, 2, [16, 16]),
    (32, 4, [8, 8, 8, 8]),
    # 80 // 3 = 26, two left over: onto the stages before the last, from the second-last back.
    (80, 3, [27, 27, 26]),
    # DeepSeek-V3's 61 layers on 4 stages: 15 each, the one left over on the second-last.
    (61, 4, [15, 15, 16, 15]),
    (62, 4, [15, 16, 16, 15]),
])
def test_layers_per_stage_as_vllm_splits_them(layers, pp, expected):
    assert layer_partition(layers, pp, "") == expected


def test_the_split_is_vllms_own_where_vllm_is_installed():
    utils = pytest.importorskip("vllm.distributed.utils", reason="vLLM is not installed")
    for layers in (2, 7, 32, 61, 80, 126):
        for pp in range(1, min(layers, 9) + 1):
            ours = layer_partition(layers, pp, "")
            theirs = [utils.get_pp_indices(layers, r, pp) for r in range(pp)]
            assert [end - start for start, end in theirs] == ours, (layers, pp)


def test_a_given_partition_is_used_and_a_wrong_one_named():
    assert layer_partition(32, 3, "10,12,10") == [10, 12, 10]
    with pytest.raises(ValueError, match="gives 2 stages; pipeline_parallel_size is 3"):
        layer_partition(32, 3, "16,16")
    with pytest.raises(ValueError, match="sums to 31 layers"):
        layer_partition(32, 2, "15,16")
    with pytest.raises(ValueError, match="more than the model's 32 layers"):
        layer_partition(32, 33, "")


def test_stage_weights_of_llama_8b_written_out():
    a, _ = catalog.resolve_model("llama-3.1-8b")
    # One layer: q, o 4096 × 4096, k, v 1,024 × 4096, the MLP 3 × 4096 × 14,336, two norms of 4096.
    per_layer = 2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert per_layer == 218_112_000
    embedding = lm_head = 128_256 * 4096  # untied: the input embedding on stage 0, the LM head on the last
    rope = 131_072 * 128 * 2  # every stage's layers build the RoPE cache; "Model loading took" counts it
    first, last = stages(a, 1, 2, "")
    assert (first.layers, last.layers) == (16, 16)
    assert first.weight_bytes == (embedding + 16 * per_layer) * 2 + rope == 8_063_811_584
    assert last.weight_bytes == (lm_head + 16 * per_layer) * 2 + rope
    middle = stages(a, 1, 4, "")[1]
    assert middle.weight_bytes == 8 * per_layer * 2 + rope  # neither embedding nor head
    # tp 2 halves every stage's shard; each GPU builds the whole RoPE cache.
    assert stages(a, 2, 2, "")[0].weight_bytes == (first.weight_bytes - rope) // 2 + rope


def test_the_pool_is_the_smallest_stages_and_the_last_stage_pays_the_sampler():
    a, _ = catalog.resolve_model("llama-3.1-8b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    p = make_plan(a, PlanInputs(pipeline_parallel_size=4, max_model_len=8192, vllm_version="0.19.0"), gpu)
    blocks = [s.num_blocks for s in p.pipeline_stages]
    assert p.num_blocks == min(blocks) == blocks[p.pool_stage]
    # Stages 1 and 2 hold neither embedding nor head and skip the sampler: the most room; the last pays both.
    assert blocks[1] == blocks[2] > blocks[0] > blocks[3] and p.pool_stage == 3
    assert p.pipeline_stages[3].activation_bytes > p.pipeline_stages[0].activation_bytes
    assert p.latency_note is not None and p.decode_step_s is None


def test_a_model_too_big_for_one_gpu_fits_on_a_pipeline_and_a_stage_that_does_not_is_named():
    a, _ = catalog.resolve_model("llama-3.1-70b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    with pytest.raises(PlanError, match="does not fit"):
        make_plan(a, PlanInputs(max_model_len=8192), gpu)
    p = make_plan(a, PlanInputs(pipeline_parallel_size=4, max_model_len=8192), gpu)
    assert p.kv_full_batch > 0
    with pytest.raises(PlanError, match="stage 0's weights"):
        make_plan(a, PlanInputs(pipeline_parallel_size=2, pp_layer_partition="70,10", max_model_len=8192), gpu)


def test_the_procurement_table_weighs_pipelines_and_gives_them_no_latency_yet():
    """Llama-3.1-405B in bf16 (810 GB of weights) fits on no 8 H100s: tp 8 with 2 stages holds it on 16."""
    from analysis.planning.procurement import procurement

    a, _ = catalog.resolve_model("llama-3.1-405b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    rows = procurement(a, PlanInputs(), [gpu], [8], pps=[1, 2], concurrency=16, context=32768)
    by = {(r.tensor_parallel_size, r.pipeline_parallel_size): r for r in rows}
    assert not by[8, 1].fits and by[8, 1].reason_kind == "weights"
    piped = by[8, 2]
    assert piped.fits and piped.gpus_needed == piped.replicas * 8 * 2 == 16
    assert piped.decode_step_s is None and piped.tokens_per_s_per_gpu is None
    slo = procurement(a, PlanInputs(), [gpu], [8], pps=[2], concurrency=16, context=32768, tpot_slo_s=0.1)
    assert slo[0].reason_kind == "pipeline" and "not modelled" in slo[0].reason


def test_recommend_takes_a_pipeline_where_asked_and_every_stage_holds_the_sequences():
    from analysis.planning.recommend import recommend

    a, _ = catalog.resolve_model("llama-3.1-405b")
    gpu, _ = catalog.resolve_gpu("h100-sxm")
    rec = recommend(a, PlanInputs(), gpu, [8], pps=[1, 2], concurrency=16, context=32768)
    assert (rec.tensor_parallel_size, rec.pipeline_parallel_size, rec.gpus_needed) == (8, 2, 16)
    assert "--pipeline-parallel-size 2" in rec.serve_flags
    back = make_plan(a, PlanInputs(pipeline_parallel_size=2, tensor_parallel_size=8, max_model_len=32768,
                                   context=32768, gpu_memory_utilization=rec.gpu_memory_utilization), gpu)
    assert back.kv_full_batch >= 16
    assert all(s.num_blocks >= 16 * 2048 + 1 for s in back.pipeline_stages)  # 32,768 tokens = 2,048 blocks


@pytest.mark.parametrize(("extra", "message"), [
    (["--pp", "3", "--pp-layer-partition", "16,16"], "gives 2 stages; pipeline_parallel_size is 3"),
    (["--pp", "0"], "--pp '0': '0' is not a positive integer"),
    (["--pp", "2", "--tp", "1,2"], "is the procurement table, `kvprof procure`"),
    (["procure", "--pp", "2", "--tp", "1,2"], "needs --concurrency N"),
    (["procure", "--pp", "1,64", "--concurrency", "4", "--json"], None),
])
def test_bad_pipeline_input_is_one_line_and_exit_2(extra, message):
    command = extra.pop(0) if extra[0] == "procure" else "plan"
    res = runner.invoke(app, [command, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *extra])
    if message is None:  # a pipeline longer than the model: its row says why, the others are planned
        assert res.exit_code == 0, res.output
        assert "more than the model's 32 layers" in res.output
        return
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_kvprof_log_reads_a_pipeline_and_predicts_its_pool_from_rank_0s_budget():
    """The published pp 2 start-up (Llama-3.1-8B on H100, vLLM 0.19; tests/fixtures/vllm_logs/) logs rank 0's
    'Available KV cache memory: 66.54 GiB' and the engine's 'GPU KV cache size: 1,075,312 tokens', the smallest
    stage's. kvprof log moves rank 0's budget to each stage (its weights, the last stage's sampler) and takes the
    smallest: within 0.5 % of the logged tokens (rank 0's budget alone would give 66.54 GiB ÷ 64 KiB a token,
    1,090,191 tokens: 1.4 % over)."""
    import json

    log = FIXTURES / "vllm_logs" / "v0.19.0_llama31_8b_pp2_h100_debug_profile.log"
    res = runner.invoke(app, ["log", str(log), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert (d["pipeline_parallel_size"], d["kv_cache_tokens"]) == (2, 1_075_312)  # as logged
    predicted = d["predicted"]
    assert predicted["pipeline_parallel_size"] == 2
    assert abs(predicted["kv_cache_tokens"] - 1_075_312) / 1_075_312 < 0.005, predicted["kv_cache_tokens"]
    # Rank 0's weights: 16 layers, the embedding and the RoPE cache, 8,063,811,584 B
    # (test_stage_weights_of_llama_8b_written_out); vLLM logged 7.51 GiB = 8,063,801,098 B: without the RoPE cache
    # the plan was 0.03 GiB short of it, with it 10 KiB over (the log rounds to 0.01 GiB).
    assert predicted["weights_bytes"] == 8_063_811_584
