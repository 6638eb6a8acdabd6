"""`kvprof plan`: sequences that fit at --context (null block), no-GPU answers, GPU short names.

Every expected number is written out from the model's config.json, the GPU
datasheet or vLLM's own behaviour, never from the helpers under test.
"""

import json
import re

import pytest
from typer.testing import CliRunner

from analysis.catalog import resolve_model
from analysis.vllm.allocator import batch_ceiling, paged_capacity
from profiler.cli import app

runner = CliRunner()
MiB, GiB = 2**20, 2**30

# tiny-llama-gqa/config.json: 4 layers, 2 KV heads, head_dim 32, bfloat16 (2 B).
# KV bytes per token = 2 (K and V) · 4 · 2 · 32 · 2 = 1,024 B.
# A 32-token block across the 4 layers = 32 · 1,024 = 32,768 B; 16 MiB / 32,768 B = 512 blocks.
# vLLM's BlockPool pops one block as its null block (vllm/v1/core/block_pool.py): 511 blocks for requests.
TINY = ("--model", "tiny-llama-gqa", "--kv-cache-memory-bytes", "16MiB", "--block-size", "32",
        "--max-model-len", "1024")


def plan_json(*args: str) -> dict:
    result = runner.invoke(app, ["plan", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("context, blocks_per_seq, fit", [
    (512, 16, 31),   # 512 / 32 = 16 blocks; 511 // 16 = 31 (31·16 = 496 ≤ 511 < 512 = 32·16)
    (513, 17, 30),   # one token more takes a 17th block; 511 // 17 = 30 (510 ≤ 511)
    (1024, 32, 15),  # 32 blocks; 511 // 32 = 15, although vLLM logs "maximum concurrency 16.00x" (512 / 32)
    (1, 1, 511),     # one block each: every block but the null block
])
def test_sequences_that_fit_at_context_leave_out_the_null_block(context, blocks_per_seq, fit):
    # --max-num-seqs 1024: the scheduler admits the batch (kvprof plan refuses a --batch above max_num_seqs)
    p = plan_json(*TINY, "--context", str(context), "--batch", str(fit + 1), "--max-num-seqs", "1024")
    assert p["kv_bytes_per_token"] == 1024 and p["bytes_per_block"] == 32_768 and p["num_blocks"] == 512
    assert p["kv_full_batch"] == fit
    assert p["batch_fits"] is False  # fit + 1 sequences do not
    assert p["blocks_per_sequence_at_context"] == blocks_per_seq
    fits = plan_json(*TINY, "--context", str(context), "--batch", str(fit), "--max-num-seqs", "1024")
    assert fits["batch_fits"] is True


def test_plan_at_context_and_batch_ceiling_agree():
    """`--context T` is a sequence holding T positions of KV: the batch ceiling of prompt + output − 1 = T."""
    p = plan_json(*TINY, "--context", "512", "--batch", "31")
    arch, _ = resolve_model("tiny-llama-gqa")
    cap = paged_capacity(arch, 16 * MiB, block_size=32, max_model_len=1024, max_num_batched_tokens=4096)
    # 448 + 65 − 1 = 512 positions (the last generated token is never fed back): the tiny-cpu saturation phase.
    c = batch_ceiling(cap, 448, 65, None, 4096)
    assert p["kv_full_batch"] == c.kv_limit == 31


def test_sliding_window_sequences_at_context_use_the_admission_worst_case():
    # tiny-mistral-swa: 2 layers, 2 KV heads, head_dim 32, bf16 → 512 B/token; block 32 → 16,384 B/block;
    # 8 MiB / 16,384 = 512 blocks. Sliding window 64, CPU chunk 4096 (vLLM's CPU default max_num_batched_tokens):
    # a sequence of 100 tokens is admitted for cdiv(min(64 − 1 + 4096, 100), 32) + 1 = 4 + 1 = 5 blocks.
    p = plan_json("--model", "tiny-mistral-swa", "--kv-cache-memory-bytes", "8MiB", "--block-size", "32",
                  "--max-model-len", "1024", "--context", "100", "--batch", "1")
    assert p["num_blocks"] == 512
    assert p["kv_full_batch"] == 102  # 511 // 5 = 102 (510 ≤ 511)
    assert p["blocks_per_sequence_at_context"] == 5


def test_context_longer_than_max_model_len_is_refused():
    result = runner.invoke(app, ["plan", *TINY, "--context", "1025"])
    assert result.exit_code == 2
    assert "--context 1025 exceeds max_model_len 1024" in result.output
    assert len(result.output.strip().splitlines()) == 1


# --- no GPU, no budget: the theory's first question -------------------------------------

def test_llama_70b_kv_cache_at_128k_needs_no_gpu():
    p = plan_json("--model", "llama-3.1-70b", "--context", "131072")
    # llama-3.1-70b/config.json: 80 layers, 8 KV heads, head_dim 128, bfloat16.
    assert p["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 2 == 327_680
    assert p["kv_bytes_per_sequence"] == 327_680 * 131_072 == 42_949_672_960 == 40 * GiB
    # Parameters from the same config (hidden 8192, intermediate 28672, vocab 128256, q 64×128, kv 8×128):
    # per layer q 8192² + k, v 2·8192·1024 + o 8192² + gated MLP 3·8192·28672 + 2 norms·8192 = 855,654,400;
    # 80 layers + embeddings and untied lm_head 2·128256·8192 + final norm 8192 = 70,553,706,496 (HF's 70.6B).
    assert p["params_total"] == 70_553_706_496
    # ... and the RoPE cache vLLM's model loading holds beside them: 131,072 positions × 128 × 2 B
    assert p["weight_bytes"] == 2 * 70_553_706_496 + 131_072 * 128 * 2
    assert p["bytes_per_block"] == 16 * 327_680  # default block 16
    assert p["blocks_per_request"] == 131_072 // 16 == p["blocks_per_sequence_at_context"]
    for key in ("kv_budget_bytes", "kv_budget_source", "num_blocks", "kv_cache_tokens", "max_concurrency",
                "ideal_kv_cache_tokens", "ideal_max_concurrency", "kv_full_batch"):
        assert key in p and p[key] is None, key
    assert p["gpu"] is None and "decode_step_s" not in p


def test_no_gpu_table_shows_dashes_for_budget_numbers():
    result = runner.invoke(app, ["plan", "--model", "llama-3.1-70b", "--context", "131072"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "327,680 B" in out and "40.00 GiB" in out
    blocks_row = next(line for line in out.splitlines() if re.match(r"\W*blocks\s", line))
    assert "—" in blocks_row
    assert "no KV budget" in out


def test_the_plan_reads_at_80_columns_and_keeps_both_columns_when_wide():
    """At 80 columns (a pipe, CI) one value a quantity: vLLM's, the seeds' ideal one in brackets where it differs or
    stands alone; wide, the two columns side by side (issue #48)."""
    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "16"]
    narrow = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.stdout.splitlines()
    assert max(len(x.rstrip()) for x in lines) <= 80
    assert "vLLM [ideal: seed arithmetic]" in narrow.stdout
    assert re.search(r"^\s*KV cache tokens\s+[\d,]+ \[[\d,]+\]\s*$", narrow.stdout, re.M)  # vLLM's, then the ideal
    assert re.search(r"^\s*KV bytes / token \(all layers\)\s+\[[\d,]+ B\]\s*$", narrow.stdout, re.M)  # ideal alone
    wide = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert wide.exit_code == 0, wide.output
    assert "ideal (seed arithmetic; roofline)" in wide.stdout
    assert "[" not in wide.stdout.split("KV cache tokens")[1].splitlines()[0]  # two columns, no brackets


def test_no_gpu_with_batch_leaves_batch_fits_unknown():
    p = plan_json("--model", "tiny-llama-gqa", "--context", "512", "--batch", "4")
    assert p["batch"] == 4 and p["batch_fits"] is None and p["kv_full_batch"] is None


# --- GPU names ------------------------------------------------------------------------------

def test_h100_means_the_sxm_part_and_says_so():
    p = plan_json("--model", "llama-3.1-8b", "--gpu", "h100", "--max-model-len", "8192")
    assert p["gpu"] == "h100-sxm"
    assert p["bandwidth_Bps"] == 3.35e12  # H100 SXM datasheet: 3.35 TB/s (the PCIe card has 2.0 TB/s)
    assert "h100-sxm" in p["gpu_note"] and "h100-pcie" in p["gpu_note"] and "h100-nvl" in p["gpu_note"]
    exact = plan_json("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192")
    assert "gpu_note" not in exact
    table = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "8192"])
    assert table.exit_code == 0, table.output
    assert "taken as h100-sxm" in table.stderr and "taken as" not in table.stdout


@pytest.mark.parametrize("name, listed", [
    ("a100", ["a100-40gb-sxm", "a100-40gb-pcie", "a100-80gb-sxm", "a100-80gb-pcie"]),
    ("a100-80gb", ["a100-80gb-sxm", "a100-80gb-pcie"]),
])
def test_ambiguous_gpu_short_names_list_the_candidates(name, listed):
    result = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", name])
    assert result.exit_code == 2
    assert f"gpu {name!r} is ambiguous" in result.output
    for candidate in listed:
        assert candidate in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_nvml_names_match_whole_words_only():
    from analysis.catalog import UnknownName, gpu

    assert gpu("NVIDIA H200").name == "h200"
    # a GH200 is not an H200 (different memory and bandwidth): its own entry, whose "480GB" is the Grace memory
    assert gpu("NVIDIA GH200 480GB").name == "gh200-96gb"
    # an L40 is not an L40S, nor the other way round
    assert (gpu("NVIDIA L40").name, gpu("NVIDIA L40S").name) == ("l40", "l40s")
    with pytest.raises(UnknownName):  # the 300 W Max-Q part is neither RTX PRO 6000 edition
        gpu("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")


def test_flashinfer_installed_shrinks_the_sampler_warm_up_where_that_vllm_uses_it():
    # vLLM 0.10.2 (0.9-0.11.0: the V1 sampler takes FlashInfer's top-k/top-p where FlashInfer is installed, as in
    # vLLM's Docker images) warms gpt-oss-120b's sampler up on min(1,024 max_num_seqs, 8,192 tokens) = 1,024 rows of
    # its 201,088-token vocabulary. The sort holds 36 B a logit beyond the logits, FlashInfer 8 B: the difference is
    # 1,024 × 201,088 × 28 B = 5.37 GiB. On one H100 at 0.9 the sort leaves no KV (the plan refuses and says
    # why); FlashInfer's leaves some, as GPUStack's run of this model on one H100 under vLLM 0.10.2 shows.
    base = ["plan", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--max-model-len", "32768"]
    result = runner.invoke(app, [*base, "--vllm-version", "0.10.2"])
    assert result.exit_code != 0
    assert "5.4 GiB less and it fits: --flashinfer" in result.output
    with_fi = runner.invoke(app, [*base, "--vllm-version", "0.10.2", "--flashinfer", "--json"])
    assert with_fi.exit_code == 0, with_fi.output
    assert json.loads(with_fi.output)["kv_budget_bytes"] > 0
    # the pinned vLLM's Model Runner V2 allocates no float32 copies for its warm-up: the flag changes nothing there
    pinned = [json.loads(runner.invoke(app, [*base, *flag, "--json"]).output)["kv_budget_bytes"]
              for flag in ((), ("--flashinfer",))]
    assert pinned[0] == pinned[1]
