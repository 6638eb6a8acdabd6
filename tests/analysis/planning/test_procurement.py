"""`kvprof procure --gpu A,B --tp 1,2,4 --concurrency N`: the procurement table, by arithmetic written out here."""

import json

import pytest
from typer.testing import CliRunner

from analysis import catalog
from analysis.planning.procurement import parse_tp_list
from analysis.units import parse_seconds
from profiler.cli import app
from profiler.cli.plan_tables import procurement_tables

runner = CliRunner()

# tiny-llama-gqa/config.json: 4 layers, 8 heads / 2 KV heads × 32, hidden 256, intermediate 512, vocab 2048,
# untied embeddings, bfloat16.
#   KV per token = 2 (K, V) · 2 KV heads · 32 · 2 B · 4 layers = 1,024 B at tp=1; at tp=2 one KV head per rank:
#   512 B; at tp=4 the 2 KV heads are replicated, still one per rank: 512 B.
#   parameters: per layer q 256·256 + k, v 2·256·64 + o 256·256 + MLP 3·256·512 + 2 norms·256 = 557,568, × 4
#   = 2,230,272; embedding and lm_head 2 · 2048 · 256 = 1,048,576; final norm 256 → 3,279,104.
#   A decode step reads every weight but the input embedding: (3,279,104 − 524,288) · 2 B = 5,509,632 B.
TINY_DECODE_WEIGHTS = 5_509_632
TINY_KV_PER_SEQUENCE = 1024 * 1024  # 1,024 tokens × 1,024 B at tp=1
H100_SXM_BW, H200_BW = 3.35e12, 4.8e12  # NVIDIA datasheets

# A fixed 8 MiB KV budget per GPU, 16-token blocks, sequences of 1,024 tokens (64 blocks each), 20 of them:
#   tp=1: a block is 16 · 1,024 B = 16 KiB → 512 blocks; the null block leaves 511 → 511 // 64 = 7 sequences;
#         replicas ceil(20 / 7) = 3, GPUs 3, each replica decodes ceil(20 / 3) = 7; 20 · 64 / 511 of the pool.
#   tp=2: an 8 KiB block → 1,024 blocks → 1,023 // 64 = 15 sequences; replicas 2, GPUs 4, batch 10.
#   tp=4: the same bytes per rank as tp=2 → 15 sequences; replicas 2, GPUs 8, batch 10.
TINY = ("--model", "tiny-llama-gqa", "--kv-cache-memory-bytes", "8MiB", "--max-model-len", "1024",
        "--context", "1024", "--concurrency", "20")

DOCUMENTED_KEYS = {
    "rank", "gpu", "gpu_display", "tensor_parallel_size", "pipeline_parallel_size", "context", "concurrency",
    "tpot_slo_s", "fits",
    "reason_kind", "reason", "weight_bytes", "kv_budget_bytes", "kv_bytes_per_sequence", "kv_fraction_needed",
    "sequences_fit", "max_num_seqs", "replicas", "gpus_needed", "batch", "batch_limited_by", "decode_step_s",
    "decode_bound", "tokens_per_s_per_gpu", "calibration_note", "calibrated_kv_budget_bytes",
    "calibrated_kv_fraction_needed", "calibrated_sequences_fit", "calibrated_replicas", "calibrated_gpus_needed",
    "calibrated_batch", "calibrated_decode_step_s", "calibrated_tokens_per_s_per_gpu",
    "decode_step_interval_s", "served_tpot", "speculative_tokens_per_step", "roofline_decode_step_s",
    "tokens_per_s_per_gpu_interval", "ttft_slo_s",
    "prompt_len",
    "ttft_s", "ttft_interval_s", "power_w_per_gpu", "power_w_interval", "kw", "j_per_output_token",
    "j_per_output_token_interval", "usd_per_gpu_hour", "price_source", "usd_per_million_tokens",
    "usd_per_million_tokens_interval", "served_ttft_median_s", "served_ttft_p99_s", "served_tpot_median_s",
    "served_tpot_p99_s", "served_note",
}


@pytest.fixture(autouse=True)
def roofline_constants(monkeypatch):
    """The procurement arithmetic is tested on the tiny model with the latency model reduced to the roofline's
    byte stream (every efficiency 1, no floors, no API cost), so each step is bytes / bandwidth as written out;
    the latency model's own terms are tests/analysis/latency/test_latency_model.py's."""
    from analysis.latency import step as latency
    params = {n: 1.0 for n in latency.parameter_names()}
    params.update({n: 0.0 for n in params if n.endswith("_s") or "_s." in n})
    monkeypatch.setattr(latency, "shipped_constants", lambda: latency.LatencyConstants(params=params))


def table(*args: str) -> list[dict]:
    result = runner.invoke(app, ["procure", *args, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert isinstance(rows, list)
    return rows


def by_config(rows: list[dict]) -> dict[tuple[str, int], dict]:
    return {(r["gpu"], r["tensor_parallel_size"]): r for r in rows}


def tiny_step(batch: int, bandwidth: float) -> float:
    return (TINY_DECODE_WEIGHTS + batch * TINY_KV_PER_SEQUENCE) / bandwidth


def test_sequences_replicas_and_gpus_by_arithmetic():
    rows = table(*TINY, "--gpu", "h100-sxm", "--tp", "1,2,4")
    assert all(r.keys() == DOCUMENTED_KEYS for r in rows)
    got = [(r["tensor_parallel_size"], r["sequences_fit"], r["replicas"], r["gpus_needed"], r["batch"])
           for r in rows]
    assert got == [(1, 7, 3, 3, 7), (2, 15, 2, 4, 10), (4, 15, 2, 8, 10)]
    assert [r["rank"] for r in rows] == [1, 2, 3] and all(r["fits"] for r in rows)
    tp1 = rows[0]
    assert tp1["kv_budget_bytes"] == 8 * 2**20
    assert tp1["kv_bytes_per_sequence"] == TINY_KV_PER_SEQUENCE
    assert tp1["kv_fraction_needed"] == pytest.approx(20 * 64 / 511)
    assert tp1["batch_limited_by"] == "kv_cache"
    # memory-bound: weights once plus 7 sequences' KV per step at the datasheet bandwidth
    assert tp1["decode_bound"] == "kv"  # 7 × 1,048,576 B of KV against 5,509,632 B of weights
    assert tp1["decode_step_s"] == pytest.approx(tiny_step(7, H100_SXM_BW), rel=2e-2)
    assert tp1["roofline_decode_step_s"] == pytest.approx(tiny_step(7, H100_SXM_BW))
    assert tp1["tokens_per_s_per_gpu"] == pytest.approx(7 / tiny_step(7, H100_SXM_BW), rel=2e-2)
    # tokens/s per GPU divides a replica's rate by its tp
    tp2 = rows[1]
    assert tp2["tokens_per_s_per_gpu"] == pytest.approx(10 / tp2["decode_step_s"] / 2)


def test_one_replica_when_n_fits():
    rows = table(*TINY[:-1], "5", "--gpu", "h100-sxm", "--tp", "1")
    # 5 sequences ≤ 7 that fit: one replica of one GPU decodes all 5
    (r,) = rows
    assert (r["replicas"], r["gpus_needed"], r["batch"], r["batch_limited_by"]) == (1, 1, 5, "concurrency")
    assert r["kv_fraction_needed"] == pytest.approx(5 * 64 / 511)


def test_same_gpus_needed_ranks_by_tokens_per_second_per_gpu():
    rows = table(*TINY, "--gpu", "h100-sxm,h200", "--tp", "1")
    # the fixed budget gives both 3 GPUs; the H200 reads 4.8 TB/s against 3.35, so it ranks first
    assert [(r["rank"], r["gpu"], r["gpus_needed"]) for r in rows] == [(1, "h200", 3), (2, "h100-sxm", 3)]
    assert rows[0]["decode_step_s"] == pytest.approx(tiny_step(7, H200_BW), rel=2e-2)


def test_not_one_sequence_fits():
    # 1 MiB = 64 blocks of 16 KiB; the null block leaves 63, one sequence of 1,024 tokens needs 64
    rows = table(*TINY[:3], "1MiB", *TINY[4:], "--gpu", "h100-sxm", "--tp", "1")
    (r,) = rows
    assert (r["fits"], r["reason_kind"], r["sequences_fit"], r["rank"]) == (False, "one_sequence", 0, None)
    assert "needs 64 blocks (1.00 MiB); the 1.00 MiB KV budget holds 63 (null block excluded)" in r["reason"]


def test_tpot_slo_caps_the_batch_per_replica_or_rules_a_row_out():
    # step(b) = (5,509,632 + b · 1,048,576) / 3.35e12 ≤ 3 µs ⇔ b ≤ (10,050,000 − 5,509,632) / 1,048,576 = 4.33
    # → 4 per replica, ceil(20 / 4) = 5 replicas of one GPU
    (r,) = table(*TINY, "--gpu", "h100-sxm", "--tp", "1", "--tpot-slo", "3us")
    assert (r["fits"], r["batch"], r["replicas"], r["gpus_needed"], r["batch_limited_by"]) == (
        True, 4, 5, 5, "tpot_slo")
    assert r["tpot_slo_s"] == pytest.approx(3e-6)
    assert r["decode_step_s"] == pytest.approx(tiny_step(4, H100_SXM_BW), rel=2e-2) and r["decode_step_s"] <= 3e-6
    # batch 1 steps in 6,558,208 / 3.35e12 = 1.96 µs: a 1 µs SLO is missed by every batch
    (r,) = table(*TINY, "--gpu", "h100-sxm", "--tp", "1", "--tpot-slo", "0.000001")
    assert (r["fits"], r["reason_kind"], r["gpus_needed"]) == (False, "tpot_slo", None)
    assert "1.96 µs" in r["reason"] and "1.00 µs" in r["reason"]


def test_whole_requests_are_judged_by_their_served_tpot():
    # With --output-len the table's step is a served request's time per output token: while it decodes, the other
    # batch − 1 slots take new prompts (6 every 64 steps), whose prefill rides in its steps, so it is longer than
    # the bare decode step of the same batch at the request's mean context, 512 + 64 / 2 = 544 tokens
    # ((5,509,632 + 7 · 544 · 1,024 B) / 3.35e12); the SLO and tokens/s are judged by it.
    from analysis.planning.plan import PlanInputs, make_plan

    (bare,) = table(*TINY, "--gpu", "h100-sxm", "--tp", "1")
    (whole,) = table(*TINY, "--gpu", "h100-sxm", "--tp", "1", "--prompt-len", "512", "--output-len", "64")
    assert (bare["served_tpot"], whole["served_tpot"]) == (False, True)
    assert whole["batch"] == bare["batch"] == 7
    assert bare["decode_step_s"] == pytest.approx(tiny_step(7, H100_SXM_BW), rel=2e-2)
    assert whole["decode_step_s"] > (TINY_DECODE_WEIGHTS + 7 * 544 * 1024) / H100_SXM_BW
    plan = make_plan(catalog.resolve_model("tiny-llama-gqa")[0],
                     PlanInputs(batch=7, prompt_len=512, output_len=64, context=1024, max_model_len=1024,
                                kv_cache_memory_bytes=8 * 2**20), catalog.gpu("h100-sxm"))
    assert whole["decode_step_s"] == pytest.approx(plan.served_tpot_s, rel=1e-9)
    assert whole["tokens_per_s_per_gpu"] == pytest.approx(7 / plan.served_tpot_s, rel=1e-9)
    out = runner.invoke(app, ["procure", *TINY, "--gpu", "h100-sxm", "--tp", "1", "--prompt-len", "512",
                              "--output-len", "64"])
    assert out.exit_code == 0 and "TPOT ms" in out.output


def test_a_70b_model_at_tp1_on_an_80gb_gpu_does_not_fit_for_its_weights():
    # 70.6 B parameters × 2 B = 141 GB of weights against 0.9 × 80 GB
    rows = by_config(table("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "1,3,8",
                           "--context", "32768", "--concurrency", "64"))
    tp1, tp3, tp8 = rows["h100-sxm", 1], rows["h100-sxm", 3], rows["h100-sxm", 8]
    assert (tp1["fits"], tp1["reason_kind"]) == (False, "weights")
    assert "weights" in tp1["reason"]
    # 64 attention heads: vLLM requires num_attention_heads % tp == 0
    assert (tp3["fits"], tp3["reason_kind"]) == (False, "heads")
    assert "64 attention heads" in tp3["reason"]
    assert tp8["fits"] and tp8["rank"] == 1
    # fitting rows first, then the others in the order asked
    assert [r["tensor_parallel_size"] for r in table("--model", "llama-3.1-70b", "--gpu", "h100-sxm",
                                                     "--tp", "1,3,8", "--context", "32768",
                                                     "--concurrency", "64")] == [8, 1, 3]


def test_fixed_kv_budget_beside_weights_that_overflow_the_gpu():
    # 141 GB of weights + 1 GiB of KV cannot sit in an H100's 80 GB whatever the utilization
    (r,) = table("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "1", "--kv-cache-memory-bytes", "1GiB",
                 "--context", "4096", "--concurrency", "1")
    assert (r["fits"], r["reason_kind"]) == (False, "weights")


def test_kv_heads_must_split_or_replicate_evenly():
    # qwen2.5-7b: 28 attention heads (28 % 7 == 0) but 4 KV heads: 7 ranks cannot replicate 4 heads evenly
    (r,) = table("--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--tp", "7", "--context", "4096",
                 "--concurrency", "8")
    assert (r["fits"], r["reason_kind"]) == (False, "heads")
    assert "4 KV heads" in r["reason"]


def test_all_is_exactly_the_datacenter_gpus(monkeypatch):
    real = catalog.gpus()
    h100 = real["h100-sxm"]
    patched = {
        "h100-sxm": h100,
        "rtx-6000-ada": h100.model_copy(update={"name": "rtx-6000-ada", "segment": "workstation",
                                                "nvml_names": ("RTX 6000 Ada",)}),
        "rtx-4090": h100.model_copy(update={"name": "rtx-4090", "segment": "consumer", "nvml_names": ("4090",)}),
        "h200": real["h200"],
    }
    monkeypatch.setattr(catalog, "gpus", lambda: patched)
    rows = table(*TINY, "--gpu", "all", "--tp", "1")
    assert sorted(r["gpu"] for r in rows) == ["h100-sxm", "h200"]


def test_every_catalog_gpu_states_its_segment():
    assert all(g.segment in ("datacenter", "workstation", "consumer") for g in catalog.gpus().values())
    rows = table(*TINY, "--gpu", "all", "--tp", "1")
    assert {"h100-sxm", "h200", "b200"} <= {r["gpu"] for r in rows}


def test_calibrated_figures_stand_beside_and_carry_to_other_gpus(tmp_path):
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"effective_bandwidth_Bps": H100_SXM_BW / 2, "device": "NVIDIA H100 80GB HBM3",
                               "source": "test sweep"}))
    refused = runner.invoke(app, ["procure", *TINY, "--gpu", "h100-sxm,h200", "--tp", "1", "--calibration", str(cal)])
    assert refused.exit_code == 2 and "fitted on NVIDIA H100 80GB HBM3, this plan is for NVIDIA H200" in refused.output
    rows = by_config(table(*TINY, "--gpu", "h100-sxm,h200", "--tp", "1", "--calibration", str(cal),
                           "--transfer-calibration"))
    for gpu, bw in (("h100-sxm", H100_SXM_BW), ("h200", H200_BW)):
        r = rows[gpu, 1]
        # half the bandwidth measured on the H100 is half of each GPU's datasheet figure: twice the step
        assert r["decode_step_s"] == pytest.approx(tiny_step(7, bw), rel=2e-2)
        assert r["calibrated_decode_step_s"] == pytest.approx(2 * tiny_step(7, bw))
        assert r["calibrated_tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_s_per_gpu"] / 2, rel=2e-2)
        assert r["calibrated_gpus_needed"] == r["gpus_needed"] == 3
        assert "test sweep" in r["calibration_note"]
    assert "scaled" in rows["h200", 1]["calibration_note"] and "TRANSFERRED" in rows["h200", 1]["calibration_note"]
    assert "TRANSFERRED" not in rows["h100-sxm", 1]["calibration_note"]  # measured there: nothing carried over
    # Calibrated, batch 1 steps in 2 × 1.96 µs: a 3 µs SLO that the spec sheet meets is missed
    (r,) = table(*TINY, "--gpu", "h100-sxm", "--tp", "1", "--calibration", str(cal), "--tpot-slo", "3us")
    assert (r["fits"], r["reason_kind"], r["gpus_needed"]) == (False, "tpot_slo", 5)
    assert r["reason"].startswith("calibrated:")


def test_step_overhead_calibration_adds_to_every_step(tmp_path):
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"step_overhead_s": 1e-3, "source": "overhead only"}))
    (r,) = table(*TINY, "--gpu", "h100-sxm", "--tp", "1", "--calibration", str(cal))
    assert r["calibrated_decode_step_s"] == pytest.approx(tiny_step(7, H100_SXM_BW) + 1e-3)


def test_human_table_right_aligns_numbers_with_units():
    result = runner.invoke(app, ["procure", "--model", "llama-3.1-70b", "--gpu", "h100-sxm,h200", "--tp", "1,8",
                                 "--context", "32768", "--concurrency", "64"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "GiB" in out and " ms" in out and "tok/s" in out and "weights" in out
    assert "by GPUs needed (fewest first), then tokens/s per GPU" in out
    from analysis.planning.plan import PlanInputs
    from analysis.planning.procurement import procurement

    a, _ = catalog.resolve_model("llama-3.1-70b")
    rows = procurement(a, PlanInputs(), [catalog.gpu("h200")], [1, 8], concurrency=64, context=32768)
    cap, lat, notes = procurement_tables(a.name, rows)
    for t in (cap, lat):
        justify = {c.header: c.justify for c in t.columns}
        assert justify["GPU"] == "left"
        assert {j for h, j in justify.items() if h not in ("GPU", "")} == {"right"}
    # tp=1 does not fit on one H200 (131 GiB of weights): its reason is note [1] under the table
    assert notes and notes[0].startswith("weights 131.4 GiB")


def test_the_tables_fit_an_80_column_terminal_with_reasons_as_numbered_notes():
    result = runner.invoke(app, ["procure", "--model", "llama-3.1-70b", "--gpu", "h100-sxm,h200,a100-80gb-pcie,l40s",
                                 "--tp", "1,2,4,8", "--context", "32768", "--concurrency", "64"],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(x.rstrip()) for x in lines) <= 80
    assert any(x.startswith("  [1] weights 131.4 GiB") for x in lines)
    assert "a100-80gb-pcie" in result.stdout and "TTFT ms" in result.stdout  # names are never folded


def test_single_gpu_and_tp_keeps_the_single_plan():
    result = runner.invoke(app, ["plan", *TINY[:6], "--gpu", "h100-sxm", "--tp", "2", "--json"])
    assert result.exit_code == 0, result.output
    p = json.loads(result.stdout)
    assert isinstance(p, dict) and p["tensor_parallel_size"] == 2


@pytest.mark.parametrize("args, message", [
    (["--gpu", "h100-sxm", "--tp", "1,x"], "'x' is not a positive integer"),
    (["--gpu", "h100-sxm", "--tp", "0"], "'0' is not a positive integer"),
    (["--gpu", "h100-sxm", "--tpot-slo", "fast"], "'fast' is not a duration"),
    (["--gpu", "h100-sxm", "--tpot-slo", "0ms"], "must be positive"),
    (["--gpu", "h100-sxm,h9000"], "unknown gpu 'h9000'"),
    (["--gpu", "h100-sxm,,h200"], "an empty name"),
    (["--gpu", "h100-sxm", "--batch", "4"], "--batch does not go with the procurement table"),
    (["--tp", "1,2"], "needs GPUs"),
    (["--gpu", "h100-sxm", "--concurrency", "0"], "at least one sequence"),
    (["--gpu", "h100-sxm,h200", "--price", "h100-sxm"], "GPU=USD_PER_HOUR pairs"),
    (["--gpu", "h100-sxm,h200", "--price", "h100-sxm=-2"], "must be positive"),
    (["--gpu", "h100-sxm,h200", "--price", "h9000=2"], "unknown gpu 'h9000'"),
    (["--gpu", "h100-sxm,h200", "--power-price", "cheap"], "'cheap' is not a number"),
    (["--gpu", "h100-sxm,h200", "--rank-by", "vibes"], "--rank-by 'vibes': give one of gpus, tokens, cost"),
])
def test_bad_procurement_input_is_one_line_and_exit_2(args, message):
    base = TINY[:-2] if "--concurrency" in args else TINY
    result = runner.invoke(app, ["procure", *base, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_list_without_concurrency_asks_for_it():
    result = runner.invoke(app, ["procure", *TINY[:-2], "--gpu", "h100-sxm,h200"])
    assert result.exit_code == 2 and "needs --concurrency N" in result.output


def test_calibration_from_a_device_outside_the_catalog_is_refused(tmp_path):
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"effective_bandwidth_Bps": 4e10, "device": "cpu", "source": "cpu sweep"}))
    result = runner.invoke(app, ["procure", *TINY, "--gpu", "h100-sxm,h200", "--calibration", str(cal),
                                 "--transfer-calibration"])
    assert result.exit_code == 2 and "not a catalog GPU" in result.output


@pytest.mark.parametrize("text, seconds", [("0.05", 0.05), ("50ms", 0.05), ("50 ms", 0.05), ("800us", 8e-4),
                                           ("800µs", 8e-4), ("1.5s", 1.5), ("2e-3", 2e-3)])
def test_durations(text, seconds):
    assert parse_seconds(text) == pytest.approx(seconds)


def test_tp_list_keeps_order_and_drops_repeats():
    assert parse_tp_list("8, 4,8,1") == [8, 4, 1]
    assert parse_tp_list("2") == [2]


def test_money_options_are_the_procurement_tables_only():
    for flag, value in (("--price", "h100-sxm=2"), ("--power-price", "0.1"), ("--rank-by", "cost")):
        result = runner.invoke(app, ["plan", *TINY[:-2], "--gpu", "h100-sxm", flag, value])
        assert result.exit_code == 2 and f"No such option: {flag}" in result.output, result.output


@pytest.mark.parametrize("args, given", [
    (["--gpu", "h100-sxm,h200"], "--gpu h100-sxm,h200"),
    (["--gpu", "all"], "--gpu all"),
    (["--gpu", "h100-sxm", "--tp", "1,2"], "--tp 1,2"),
    (["--gpu", "h100-sxm", "--pp", "1,2"], "--pp 1,2"),
    (["--gpu", "h100-sxm", "--concurrency", "20"], "--concurrency 20"),
])
def test_plan_points_a_procurement_question_to_procure(args, given):
    """`kvprof plan` plans one configuration; lists and --concurrency are the procurement table's, and the one line
    says so and names what was given, instead of answering another question than the one asked."""
    result = runner.invoke(app, ["plan", *TINY[:-2], *args])
    assert result.exit_code == 2, result.output
    assert given in result.output and "`kvprof procure`" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_cost_table_names_each_price_and_the_json_carries_energy_and_cost():
    result = runner.invoke(app, ["procure", "--model", "llama-3.1-8b", "--gpu", "h100-sxm,l4", "--context", "4096",
                                 "--concurrency", "32", "--price", "l4=0.5", "--power-price", "0.2",
                                 "--rank-by", "cost"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert max(len(x.rstrip()) for x in out.splitlines()) <= 80
    assert "energy and cost" in out and "--price" in out and "Lambda on-demand list price" in out
    assert "electricity: 0.2 USD per kWh (--power-price)" in out
    assert "by USD per million output tokens (cheapest" in out
    rows = json.loads(runner.invoke(app, ["procure", "--model", "llama-3.1-8b", "--gpu", "h100-sxm,l4", "--context",
                                          "4096", "--concurrency", "32", "--price", "l4=0.5", "--power-price",
                                          "0.2", "--json"]).stdout)
    for r in (r for r in rows if r["fits"]):
        # (price + W/1000 · 0.2 USD/kWh) per GPU-hour over the GPU's output tokens per hour
        hourly = r["usd_per_gpu_hour"] + r["power_w_per_gpu"] / 1000 * 0.2
        assert r["usd_per_million_tokens"] == pytest.approx(hourly / (r["tokens_per_s_per_gpu"] * 3600) * 1e6)
        assert r["kw"] == pytest.approx(r["gpus_needed"] * r["power_w_per_gpu"] / 1000)
        assert r["j_per_output_token"] == pytest.approx(r["power_w_per_gpu"] / r["tokens_per_s_per_gpu"])
        lo, hi = r["j_per_output_token_interval"]
        assert lo < r["j_per_output_token"] * 1.0001 and hi > r["j_per_output_token"]
    assert {r["gpu"]: r["price_source"] for r in rows if r["fits"]}["l4"] == "--price"
