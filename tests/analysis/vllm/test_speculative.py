"""Speculative decoding's memory (issue #28): the drafter's weights, its KV layers and each request's lookahead
slots as vLLM 0.32 lays them out (analysis/vllm/speculative.py cites the source), written out by hand, and a
published n-gram start-up planned exactly."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from analysis import catalog
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.vllm.speculative import parse_speculative_config
from profiler.cli import app

runner = CliRunner()
MiB, GiB = 2**20, 2**30


def plan(model="llama-3.1-8b", gpu="h100-sxm", spec=None, **kw):
    a, _ = catalog.resolve_model(model)
    g, _ = catalog.resolve_gpu(gpu)
    return make_plan(a, PlanInputs(**kw, speculative_config=parse_speculative_config(spec) if spec else None), g)


EAGLE3 = '{"method": "eagle3", "model": "eagle3-llama-3.1-8b", "num_speculative_tokens": 3}'


def test_an_eagle3_head_for_llama_3_1_8b_written_out():
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (llama_eagle3.py): one layer whose qkv takes embedding + hidden state
    #   qkv 8,192 × (4,096 + 2 × 1,024) = 50,331,648   o 4,096 × 4,096 = 16,777,216
    #   MLP 3 × 4,096 × 14,336 = 176,160,768           norms (input, post-attention, hidden, final) 4 × 4,096
    #   fc 3 × 4,096 → 4,096 = 50,331,648               LM head 32,000 × 4,096 = 131,072,000
    # = 424,689,664 parameters × 2 B, + the draft→target id map 32,000 × 8 B = 849,635,328 B
    base, spec = plan(max_model_len=8192, context=8192), plan(spec=EAGLE3, max_model_len=8192, context=8192)
    assert spec.speculative.draft_weight_bytes == 849_635_328
    assert spec.weight_bytes - base.weight_bytes == 849_635_328
    # its one layer's KV in every block: 2 × 8 KV heads × 128 × 2 B = 4,096 B per token
    assert spec.kv_bytes_per_token - base.kv_bytes_per_token == 4096
    assert spec.bytes_per_block == 16 * (131_072 + 4096)
    # a request at 8,192 tokens holds 1 + k + k = 7 more slots (capped at max_model_len 8,192: none past it)
    assert spec.speculative.slots_beyond_context == 7 and spec.blocks_per_sequence_at_context == 512
    # the budget loses the head's weights; the pool is divided by the wider block
    assert spec.num_blocks == spec.kv_budget_bytes // (16 * 135_168)


def test_lookahead_slots_take_a_block_where_the_context_ends_on_a_boundary():
    spec = plan(spec=EAGLE3, max_model_len=16384, context=8192)
    assert spec.blocks_per_sequence_at_context == 513  # 8,192 + 7 tokens: 512 blocks and one more


def test_ngram_adds_no_weights_and_no_kv_only_its_token_history():
    base = plan(max_model_len=8192, context=8192)
    ng = plan(spec='{"model": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}', max_model_len=8192,
              context=8192)
    assert ng.weight_bytes == base.weight_bytes and ng.kv_bytes_per_token == base.kv_bytes_per_token
    # Model Runner V2 keeps max_num_seqs × max_model_len int32 token ids on the GPU: 1,024 × 8,192 × 4 B = 32 MiB
    assert ng.max_num_seqs == 1024 and ng.speculative.reserve_bytes == 32 * MiB
    assert base.kv_budget_bytes - ng.kv_budget_bytes == 32 * MiB
    assert ng.speculative.slots_beyond_context == 5  # 1 + k, no lookahead


def test_a_published_ngram_start_up_is_planned_exactly():
    """yuanjuju/vllm-lab, vLLM 0.18.0 on a 48 GB RTX 4090, Qwen3-8B, ngram k=4, max_model_len 4,096
    (https://github.com/yuanjuju/vllm-lab/blob/b71c05fae143b011899c3049419af61636f7d56d/phase3/results/
    spec_ngram_ngram_r570_v018_20261009.log):
        Available KV cache memory: 19.76 GiB
        GPU KV cache size: 143,872 tokens
        Maximum concurrency for 4,096 tokens per request: 35.12x
    and its baseline without speculation logs the same three numbers. Qwen3-8B: 36 layers × 2 × 8 × 128 × 2 B =
    147,456 B a token, 2,359,296 B a block of 16; 143,872 tokens = 8,992 blocks = 19.758 GiB, logged 19.76."""
    budget = 8992 * 2_359_296
    assert round(budget / GiB, 2) == 19.76
    for spec in (None, '{"method": "ngram", "num_speculative_tokens": 4}'):
        p = plan("qwen3-8b", spec=spec, max_model_len=4096, kv_cache_memory_bytes=budget, block_size=16)
        assert p.kv_bytes_per_token == 147_456 and p.num_blocks == 8992
        assert p.kv_cache_tokens == 143_872 and f"{p.max_concurrency:.2f}x" == "35.12x"


def test_published_eagle3_start_ups_on_an_h100_are_planned_within_1_percent():
    """vLLM 0.20.0 on one H100 80GB, Qwen/Qwen3-8B, EAGLE-3 heads trained with vLLM's speculators, each beside the
    same server without speculation:

    * dishantghai/ai-perf-hw3-spec-decode-quant@d1c3b59 logs/c1_server.log and c2_n2_server.log (max_model_len
      40,960, gpu_memory_utilization unset: "The current --gpu-memory-utilization=0.9200"; a full-vocabulary head,
      "Detected EAGLE model with lm_head identical to the target model. Sharing target model lm_head weights"):
          Model loading took 15.27 GiB / 15.78 GiB; Available KV cache memory: 54.63 GiB / 51.73 GiB;
          GPU KV cache size: 397,808 tokens / 366,480 tokens; Maximum concurrency for 40,960 tokens: 9.71x / 8.95x
    * ana-alekseeva/speculative-decoding@e5608b1 results_task4/1_baseline.server.log and 2_spec_n2.server.log
      (max_model_len 4,096, gpu_memory_utilization 0.85; a head of 32,000 draft tokens):
          Model loading took 15.27 GiB / 16.02 GiB; Available KV cache memory: 49.09 GiB / 45.94 GiB

    The full-vocabulary head, written out: its layer's qkv 8,192 × 6,144 = 50,331,648 (embedding and hidden state
    in), o 4,096² = 16,777,216, MLP 3 × 4,096 × 12,288 = 150,994,944, fc 3 × 4,096 × 4,096 = 50,331,648, four norms
    16,384: 268,451,840 parameters, 536,903,680 B in bf16 (0.50 GiB: the logged 15.78 − 15.27); the 32,000-token
    head adds its LM head 32,000 × 4,096 × 2 B = 262,144,000 B and the int64 id map 256,000 B (0.74 GiB: 16.02 −
    15.27). A block of 16 holds 37 layers' 4,096 B a token: 22,905 blocks of 2,424,832 B are 51.7275 GiB, the logged
    51.73, and 366,480 tokens, 8.95 × 40,960."""
    from analysis.latency.speculative_evidence import EVIDENCE_DIR

    full = str(EVIDENCE_DIR / "drafters/qwen3-8b-eagle3-full-vocab")
    small = str(EVIDENCE_DIR / "drafters/qwen3-8b-eagle3-draft-vocab-32000")

    def eagle3(head):
        return json.dumps({"method": "eagle3", "model": head, "num_speculative_tokens": 2})

    kw = dict(vllm_version="0.20.0", max_model_len=40960)
    base, spec = plan("qwen3-8b", **kw), plan("qwen3-8b", spec=eagle3(full), **kw)
    assert spec.weight_bytes - base.weight_bytes == 536_903_680
    assert "LM head" in spec.speculative.shares
    assert spec.kv_bytes_per_token == 37 * 4096 == 151_552
    budget = 22_905 * 16 * 151_552
    assert round(budget / GiB, 2) == 51.73
    logged = plan("qwen3-8b", spec=eagle3(full), kv_cache_memory_bytes=budget, block_size=16, **kw)
    assert logged.kv_cache_tokens == 366_480 and f"{logged.max_concurrency:.2f}x" == "8.95x"
    # From the spec sheet (0.92 of the H100's 79.19 GiB, vLLM 0.20's rules): both pools within 1 %.
    assert base.kv_budget_bytes / GiB == pytest.approx(54.63, rel=0.01)
    assert spec.kv_budget_bytes / GiB == pytest.approx(51.73, rel=0.01)
    kw = dict(vllm_version="0.20.0", max_model_len=4096, gpu_memory_utilization=0.85)
    base, spec = plan("qwen3-8b", **kw), plan("qwen3-8b", spec=eagle3(small), **kw)
    assert spec.weight_bytes - base.weight_bytes == 536_903_680 + 262_144_000 + 256_000
    assert base.kv_budget_bytes / GiB == pytest.approx(49.09, rel=0.01)
    assert spec.kv_budget_bytes / GiB == pytest.approx(45.94, rel=0.01)
    # The pinned vLLM runs speculation in Model Runner V2, whose profile run warms no rejection sampler.
    pinned = plan("qwen3-8b", spec=eagle3(full), max_model_len=40960)
    assert "rejection" not in pinned.reserve.source


def test_mtp_loads_the_checkpoints_own_layer_and_its_kv():
    kw = dict(gpu="b200", tensor_parallel_size=8, max_model_len=8192, context=8192, quantization="fp8_per_block")
    base, mtp = plan("deepseek-v3", **kw), plan("deepseek-v3", spec='{"method": "mtp", "num_speculative_tokens": 1}',
                                                 **kw)
    # one more MLA layer in every block: (512 latent + 64 rope) × 2 B = 1,152 B a token
    assert mtp.kv_bytes_per_token - base.kv_bytes_per_token == 1152
    extra = mtp.weight_bytes - base.weight_bytes
    # one MoE decoder layer per GPU (256 experts × 3 × 7,168 × 2,048 FP8 bytes ÷ 8 ≈ 1.41 GB, with its attention,
    # shared expert and block scales) and eh_proj 2 × 7,168 × 7,168 × 2 B = 205.5 MB on every GPU
    assert 256 * 3 * 7168 * 2048 / 8 + 2 * 7168 * 7168 * 2 < extra < 1.15 * (256 * 3 * 7168 * 2048 / 8
                                                                             + 2 * 7168 * 7168 * 2)
    assert mtp.speculative.shares.startswith("the target's embedding and LM head")


@pytest.mark.parametrize("text, message", [
    ("nope", "is not JSON"),
    ('{"method": "medusa", "num_speculative_tokens": 2}', "method 'medusa' is not planned"),
    ('{"method": "eagle3", "num_speculative_tokens": 2}', "needs the draft's model"),
    ('{"method": "ngram", "model": "x", "num_speculative_tokens": 2}', "takes no model"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "greater than 0"),
    ('{"method": "ngram", "num_speculative_tokens": 65}', "less than or equal to 64"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "foo": 1}', "foo not planned"),
    ("[1, 2]", "must be a JSON object"),
    ('{"method": "ngram", "num_speculative_tokens": true}', "valid integer"),
])
def test_bad_speculative_configs_say_which_field(text, message):
    with pytest.raises(ValueError, match=message):
        parse_speculative_config(text)


def test_what_is_not_planned_is_refused_by_name():
    with pytest.raises(PlanError, match="no multi-token-prediction layers"):
        plan(spec='{"method": "mtp", "num_speculative_tokens": 1}')
    with pytest.raises(PlanError, match="mixes attention kinds"):
        plan("gemma-2-9b", spec=EAGLE3)
    with pytest.raises(PlanError, match="pipeline parallelism"):
        plan(spec=EAGLE3, pipeline_parallel_size=2)
    with pytest.raises(PlanError, match="one vocabulary"):
        plan(spec='{"method": "draft_model", "model": "qwen2.5-0.5b", "num_speculative_tokens": 2}')


def test_the_cli_plans_it_and_refuses_bad_json_in_one_line():
    ok = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--speculative-config", EAGLE3],
                       env={"COLUMNS": "200"})
    assert ok.exit_code == 0, ok.output
    assert "of which the eagle3 drafter (k=3)" in ok.stdout and "810.28 MiB" in ok.stdout
    bad = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--speculative-config", "{"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "is not JSON" in bad.output


# The published n-gram start-up above, its lines as logged (the engine-config line cut to the fields read).
NGRAM_LOG = """\
INFO 10-09 10:18:50 [core.py:75] Initializing a V1 LLM engine (v0.18.0) with config: model='Qwen/Qwen3-8B', \
speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=4), max_seq_len=4096, \
tensor_parallel_size=1
INFO 10-09 10:19:00 [gpu_model_runner.py:4566] Model loading took 15.27 GiB memory and 3.494333 seconds
INFO 10-09 10:19:04 [gpu_worker.py:456] Available KV cache memory: 19.76 GiB
INFO 10-09 10:19:04 [kv_cache_utils.py:1316] GPU KV cache size: 143,872 tokens
INFO 10-09 10:19:04 [kv_cache_utils.py:1321] Maximum concurrency for 4,096 tokens per request: 35.12x
"""


def test_kvprof_log_reads_the_speculative_config_and_predicts_the_logged_pool(tmp_path):
    import json

    log = tmp_path / "ngram.log"
    log.write_text(NGRAM_LOG)
    res = runner.invoke(app, ["log", str(log), "--json"])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert (rec["speculative_method"], rec["speculative_model"], rec["num_speculative_tokens"]) == ("ngram", None, 4)
    assert rec["predicted"]["kv_cache_tokens"] == rec["kv_cache_tokens"] == 143_872
    human = runner.invoke(app, ["log", str(log)], env={"COLUMNS": "200"}).stdout
    assert "speculative decoding: ngram, k=4; no drafter" in human
    # an EAGLE-3 drafter kvprof has no config for is named, not silently dropped
    eagle = NGRAM_LOG.replace("method='ngram', model=None", "method='eagle3', model='acme/eagle3-head'")
    log.write_text(eagle)
    rec = json.loads(runner.invoke(app, ["log", str(log), "--json"]).stdout)
    assert "drafter 'acme/eagle3-head' is not in the catalog" in rec["predicted"]["speculative_note"]


def test_recommend_pastes_the_speculative_config_it_planned():
    import json

    res = runner.invoke(app, ["recommend", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192",
                              "--concurrency", "32", "--json", "--speculative-config", EAGLE3])
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)
    assert f"--speculative-config '{json.dumps(json.loads(EAGLE3))}'" in rec["serve_flags"]
    assert any("give vLLM its checkpoint" in n for n in rec["notes"])
