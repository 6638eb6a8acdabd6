"""The replay in `kvprof plan` (issue #49): the load it replays, the evidence it quotes and its freshness, and what it
refuses."""

import json

import pytest
from typer.testing import CliRunner

from analysis import catalog
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.serving.evidence import current_hashes, replay_evidence
from profiler.cli import app

runner = CliRunner()
PLAN = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt-len", "1024", "--output-len", "128"]


def test_the_evidence_was_computed_with_the_constants_and_the_replay_shipped():
    ev = replay_evidence()
    assert (ev.constants_sha256, ev.replay_sha256) == current_hashes(), (
        "analysis/catalog/latency.yaml or analysis/serving/replay.py changed since the replay's evidence was "
        "measured: run `python benchmarks/replay_vs_corpus.py --write`")
    assert set(ev.figures) == {"ttft", "tpot"}
    for f in ev.figures.values():
        assert f.ratio_p10 < 1 < f.ratio_p90 and f.within_25_percent <= f.runs


def test_the_docs_quote_the_evidence_as_measured():
    from helpers import ROOT

    ev = replay_evidence().figures
    text = " ".join((ROOT / "docs/plan.md").read_text(encoding="utf-8").split())
    t, p = ev["ttft"], ev["tpot"]
    assert (f"{t.runs} TTFT figures at a median error of {100 * t.median_abs_error:.0f} % (the closed-form TTFT the "
            f"plan prints without a load: {100 * t.closed_form_median_abs_error:.0f} %) and {p.runs} TPOT figures at "
            f"{100 * p.median_abs_error:.0f} % (closed form: {100 * p.closed_form_median_abs_error:.0f} %)") in text
    assert f"({t.ratio_p10:.2f}–{t.ratio_p90:.2g}×)" in text


def test_plan_replays_a_closed_loop_and_quotes_its_evidence():
    res = runner.invoke(app, [*PLAN, "--max-concurrency", "16", "--num-prompts", "64", "--json"])
    assert res.exit_code == 0, res.output
    sv = json.loads(res.stdout)["served"]
    o = sv["outcome"]
    assert o["completed"] == 64 and o["workload"]["max_concurrency"] == 16 and o["max_running"] == 16
    # every request sent at once, 16 in flight: a closed loop of 64 is four lifetimes of 128 tokens, at least
    assert o["duration_s"] > 4 * 127 * o["tpot"]["median_s"]
    lo, hi = sv["ttft_median_interval_s"]
    ev = replay_evidence().figures["ttft"]
    assert (lo, hi) == pytest.approx((o["ttft"]["median_s"] * ev.ratio_p10, o["ttft"]["median_s"] * ev.ratio_p90))
    assert f"{ev.runs} published vllm bench serve TTFT figures" in sv["checked_against"]["ttft"]
    text = runner.invoke(app, [*PLAN, "--max-concurrency", "16", "--num-prompts", "64"], env={"COLUMNS": "80"})
    assert text.exit_code == 0 and "served, replayed through vLLM's scheduler" in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 80


def test_an_open_loop_past_capacity_queues():
    a = catalog.resolve_model("llama-3.1-8b")[0]
    p = make_plan(a, PlanInputs(prompt_len=2048, output_len=512, serve_request_rate=50.0, serve_num_prompts=2000,
                                max_model_len=4096), catalog.gpu("l4"))
    o = p.served.outcome
    # 50 requests a second of 512 tokens is 25,600 tokens/s asked of one L4: it serves far fewer, the queue grows.
    assert o.output_tokens_per_s < 25_600 / 4 and o.max_waiting > 100
    assert o.ttft.p99_s > 10 * o.ttft.median_s or o.ttft.median_s > 10


def test_a_load_needs_its_lengths():
    a = catalog.resolve_model("llama-3.1-8b")[0]
    with pytest.raises(PlanError, match="give both"):
        make_plan(a, PlanInputs(prompt_len=1024, serve_max_concurrency=8), catalog.gpu("h100-sxm"))


def test_without_a_gpu_the_plan_says_why_no_load_was_replayed():
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--kv-cache-memory-bytes", "8GiB", "--max-model-len",
                              "8192", "--prompt-len", "128", "--output-len", "16", "--max-concurrency", "4", "--json"])
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    assert "served" not in p and "give --gpu" in p["served_note"]


def test_procure_and_recommend_do_not_take_a_load_yet():
    for cmd in (["procure", "--concurrency", "4"], ["recommend", "--concurrency", "4", "--context", "2048"]):
        res = runner.invoke(app, [*cmd, "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-concurrency", "4"])
        assert res.exit_code == 2 and "No such option: --max-concurrency" in res.output


def test_procure_replays_each_fitting_rows_closed_loop_as_plan_does():
    """`kvprof procure --served`: each fitting row's batch in flight on one replica, replayed; the same figures as
    `kvprof plan` replaying that load on that configuration (8 requests a slot, 200 at least)."""
    args = ["--model", "llama-3.1-8b", "--context", "4096", "--prompt-len", "1024", "--output-len", "64"]
    res = runner.invoke(app, ["procure", *args, "--gpu", "h100-sxm,l4", "--tp", "1", "--concurrency", "40",
                              "--served", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["gpu"]: r for r in json.loads(res.stdout)}
    assert all(r["served_tpot_p99_s"] >= r["served_tpot_median_s"] > 0 for r in rows.values() if r["fits"])
    h100 = rows["h100-sxm"]
    one = runner.invoke(app, ["plan", *args, "--gpu", "h100-sxm", "--max-concurrency", str(h100["batch"]),
                              "--num-prompts", str(max(8 * h100["batch"], 200)), "--json"])
    o = json.loads(one.stdout)["served"]["outcome"]
    assert (h100["served_ttft_median_s"], h100["served_tpot_p99_s"]) == pytest.approx(
        (o["ttft"]["median_s"], o["tpot"]["p99_s"]))
    bad = runner.invoke(app, ["procure", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--concurrency", "4",
                              "--served"])
    assert bad.exit_code == 2 and "--served replays requests of --prompt-len and --output-len" in bad.stderr
