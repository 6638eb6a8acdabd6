"""A speculative decoding step's latency (analysis/latency/speculative.py): the target verifying 1 + k tokens a
request, the drafter's passes, the acceptance length, and the published runs it is held against."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from analysis import catalog
from analysis.latency import speculative as spec_latency
from analysis.latency import speculative_evidence as evidence
from analysis.latency.step import Engine, decode_schedule, served_step_schedule, step_work
from analysis.planning.plan import PlanInputs, make_plan
from analysis.vllm.speculative import SpeculativeConfig, parse_speculative_config
from profiler.cli import app

runner = CliRunner()
EAGLE3 = '{"method": "eagle3", "model": "eagle3-llama-3.1-8b", "num_speculative_tokens": 3}'

# Llama-3.1-8B written out: a layer is q 4,096² + k, v 2 × 4,096 × 1,024 + o 4,096² + gate/up/down 3 × 4,096 ×
# 14,336 + two norms of 4,096 = 218,112,000; 32 of them and the final norm 6,979,588,096; the LM head
# 128,256 × 4,096 = 525,336,576.
LLAMA_BODY, LLAMA_LM_HEAD = 6_979_588_096, 525_336_576


def llama():
    return catalog.resolve_model("llama-3.1-8b")[0]


def h100():
    return catalog.gpu("h100-sxm")


def eagle3_engine(k=3, acceptance=None, version=None):
    a, d = llama(), catalog.resolve_model("eagle3-llama-3.1-8b")[0]
    s = spec_latency.speculation(a, SpeculativeConfig(method="eagle3", model="eagle3-llama-3.1-8b",
                                                      num_speculative_tokens=k), d, acceptance)
    return Engine(a, h100(), vllm_version=version, speculation=s)


def test_verifying_k_drafts_runs_every_token_through_the_gemms_but_reads_the_kv_once():
    # 2 requests verifying 3 drafts each: 8 rows through the body and the LM head (vLLM samples all 1 + k).
    one = step_work(llama(), h100(), decode_seqs=2, decode_context=1000)
    four = step_work(llama(), h100(), decode_seqs=2, decode_context=1000, decode_query=4)
    assert four.gemm_flops + four.expert_gemm_flops == 2 * (LLAMA_BODY + LLAMA_LM_HEAD) * 8 == 120_078_794_752
    assert four.kv_bytes == one.kv_bytes  # each sequence's context is read once a step
    assert four.attention_flops == pytest.approx(4 * one.attention_flops)
    assert four.tokens == 8
    with pytest.raises(ValueError, match="at least one token"):
        step_work(llama(), h100(), decode_seqs=2, decode_context=1000, decode_query=0.5)


def test_an_eagle3_pass_streams_its_layer_and_its_draft_vocabulary_head_written_out():
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B in the target's bf16: its decoder layer (Llama-3.1-8B's, 218,112,000) and
    # final norm 4,096; its qkv's second input (the hidden state) 4,096 × 6,144 = 25,165,824; its LM head of 32,000
    # draft tokens 32,000 × 4,096 = 131,072,000; the first pass also folds three hidden states, fc 3 × 4,096 × 4,096
    # = 50,331,648. The embedding is a lookup.
    w = decode_schedule(eagle3_engine(k=3), 2, 1000).steps[0][1]
    first, *later = w.drafter
    assert len(later) == 2  # k passes in all
    assert first.dense_bytes == 2 * (218_112_000 + 4_096 + 25_165_824 + 131_072_000 + 50_331_648) == 849_371_136
    assert later[0].dense_bytes == 2 * (218_112_000 + 4_096 + 25_165_824 + 131_072_000)
    assert first.tokens == 8 and later[0].tokens == 2  # the target's tokens, then one a request
    # The first pass's GEMMs: the layer (and final norm) and both extra matrices over all 8 tokens, its LM head over
    # the 2 rows it samples: 2 × (218,116,096 × 8 + 131,072,000 × 2 + (25,165,824 + 50,331,648) × 8).
    assert first.gemm_flops == 2 * (218_116_096 * 8 + 131_072_000 * 2 + 75_497_472 * 8) == 5_222_105_088
    assert not first.host and first.graphs == "full"  # graph replays within the step, no scheduler iteration
    assert w.decode_query == 4


def test_a_step_yields_the_acceptance_length_and_tpot_is_the_step_over_it():
    e = eagle3_engine(acceptance=2.8)
    step = decode_schedule(e, 1, 300).time()
    # At concurrency 1 no prompt interrupts a served request: its TPOT is the step over the tokens it yields.
    assert served_step_schedule(e, 1, 100, 400).time() == pytest.approx(step / 2.8)
    p = make_plan(llama(), PlanInputs(batch=4, context=300, speculative_config=parse_speculative_config(EAGLE3),
                                      acceptance_length=2.8), h100())
    assert p.tpot_s * 2.8 == pytest.approx(p.decode_step_s)
    assert p.tokens_per_s == pytest.approx(4 * 2.8 / p.decode_step_s)
    assert p.speculative.acceptance_length == 2.8
    lo, hi = p.decode_step_interval_s
    assert lo < p.decode_step_s < hi


def test_without_an_acceptance_length_every_step_yields_one_token_and_the_plan_says_so():
    p = make_plan(llama(), PlanInputs(batch=4, context=300, speculative_config=parse_speculative_config(EAGLE3)),
                  h100())
    base = make_plan(llama(), PlanInputs(batch=4, context=300), h100())
    assert p.decode_tokens_per_step == 1.0 and p.tpot_s == p.decode_step_s
    assert p.decode_step_s > base.decode_step_s  # verifying and drafting cost more than decoding alone
    assert "none accepted" in p.speculative.latency


@pytest.mark.parametrize("kw, message", [
    (dict(acceptance_length=4.5, speculative_config=parse_speculative_config(EAGLE3)), "more than 1 \\+ k = 4"),
    (dict(acceptance_length=2.0), "goes with a speculative config"),
    (dict(acceptance_length=0.5, speculative_config=parse_speculative_config(EAGLE3)), "greater than or equal to 1"),
])
def test_an_impossible_acceptance_length_is_refused_by_name(kw, message):
    with pytest.raises(ValidationError, match=message):
        PlanInputs(**kw)


def test_the_cli_takes_the_acceptance_length_and_refuses_it_alone():
    ok = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "1", "--context",
                             "300", "--speculative-config", EAGLE3, "--acceptance-length", "2.8", "--json"])
    assert ok.exit_code == 0, ok.output
    rec = json.loads(ok.stdout)
    assert rec["decode_tokens_per_step"] == 2.8 and "speculative decoding: 39 published" in rec[
        "decode_checked_against"]
    bad = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--acceptance-length", "2"])
    assert bad.exit_code != 0 and "goes with a speculative config" in bad.output
    assert "Traceback" not in bad.output


def test_before_vllm_0_11_a_speculative_step_pays_the_host_its_sync_from_0_11_none():
    # PR 24539 (0.11.0): "free of GPU->CPU sync during the EAGLE drafting phase".
    old = decode_schedule(eagle3_engine(k=3, version="0.10.1"), 1, 300).steps[0][1]
    new = decode_schedule(eagle3_engine(k=3, version="0.11.0"), 1, 300).steps[0][1]
    assert old.speculative_host_s == pytest.approx(spec_latency.V1_STEP_S + 2 * spec_latency.V1_PASS_S)
    assert new.speculative_host_s == 0.0


# -- the published runs -------------------------------------------------------------------------------------------

def test_the_published_baselines_are_predicted_within_11_percent_but_one_setup():
    # Without speculation, the step model alone (fitted without these records): Llama-3.1-8B at batch 1, TPOT 7.07 ms
    # (issue 20780); Llama-3-8B one request at a time, 128.64 output tok/s (PR 16035); Qwen3-8B at 8 requests in flight
    # over MT-Bench on vLLM 0.20, 7.25 / 7.02 / 7.03 ms in bf16 and 5.01 / 4.59 / 5.39 ms in FP8 (three campaigns).
    # Llama-3.3-70B at tp 2 on Brev's H100s (tomasruizt) decodes at 43.31 ms, 1.39 times an H100 SXM's prediction.
    ratios = {(r.campaign, r.settings.quantization): f.measured / f.kernels_s
              for r in evidence.evidence() for f in evidence.figures(r, baseline=True)}
    assert len(ratios) == 9
    slow = ratios.pop(("tomasruizt/vllm-scripts (2026-01)", None))
    assert all(0.94 < x < 1.11 for x in ratios.values()), ratios
    assert slow == pytest.approx(1.39, abs=0.01)


def _baseline_ratio(campaign: str, label: str) -> float:
    (r,) = [r for r in evidence.evidence() if r.campaign == campaign
            and any(f.label == label for f in evidence.figures(r))][:1]
    (f,) = evidence.figures(r, baseline=True)
    return f.measured / f.kernels_s


def test_every_published_speculative_figure_held_out_is_within_25_percent_of_its_setups_offset():
    # A campaign's own offset (its GPU, host, build) shows in its baseline; what speculation adds on top of it is the
    # figure's ratio over its baseline's: within 0.85-1.25 for all 39 (the widest, 1.23, July 2025's EAGLE-3 at k 6).
    ratios = evidence.held_out_ratios()
    assert len(ratios) == 39
    for campaign, label, x in ratios:
        if campaign.startswith(("ana-alekseeva", "dgwalters", "dishantghai")):
            continue  # two records (bf16, FP8) a campaign, each with its baseline: checked below
        assert 0.85 < x / _baseline_ratio(campaign, label) < 1.25, (campaign, label, x)
    for r in evidence.evidence():
        (b,) = evidence.figures(r, baseline=True)
        for f in evidence.figures(r):
            assert 0.85 < (f.measured / f.predicted()) / (b.measured / b.kernels_s) < 1.25, (r.campaign, f.label)
    # EAGLE-1 at k = 2 over MT-Bench (PR 16035, vLLM 0.8): 175.49 tok/s, within 3 % held out.
    (pr,) = [x for s, label, x in ratios if s.startswith("vllm PR 16035") and label == "eagle k=2"]
    assert pr == pytest.approx(1.0, abs=0.03)


def test_from_vllm_0_11_the_source_alone_prices_the_published_steps():
    # vLLM 0.20 on an H100, EAGLE-3 k = 1-4 at 8 requests in flight: no fitted speculative constant applies (the host
    # costs end at 0.11), and the 19 figures of three campaigns come back 0.97-1.18 times the prediction.
    modern = [f for r in evidence.evidence() if r.settings.vllm_version == "0.20.0" for f in evidence.figures(r)]
    assert len(modern) == 19 and all(f.steps == 0 for f in modern)
    assert all(0.97 < f.measured / f.kernels_s < 1.18 for f in modern)


def test_a_full_vocabulary_head_costs_its_lm_head_every_pass():
    # The same homework's heads at k = 2: 32,000 draft tokens (ana-alekseeva: 5.73 ms, dgwalters: 5.30 ms) against the
    # whole 151,936 (dishantghai: 6.43 ms), each pass reading (151,936 − 32,000) × 4,096 × 2 B = 982,515,712 B more.
    by = {(r.campaign.split("/")[0], r.settings.quantization): r for r in evidence.evidence()}
    small, full = (next(f for f in evidence.figures(by[(who, None)]) if f.label == "eagle3 k=2")
                   for who in ("ana-alekseeva", "dishantghai"))
    assert full.measured > small.measured and full.kernels_s > small.kernels_s
    # two passes of 982.5 MB at an H100's 3.35 TB/s are at least 0.59 ms a step, over 1.40 tokens a step
    assert (full.kernels_s - small.kernels_s) * 1.40 > 2 * 982_515_712 / 3.35e12


def test_the_shipped_host_costs_are_the_fit_of_the_published_runs():
    figs = [f for r in evidence.evidence() for f in evidence.figures(r)]
    step_s, pass_s = evidence.fit_host_costs(figs)
    assert step_s == pytest.approx(spec_latency.V1_STEP_S, rel=0.02)
    assert pass_s == pytest.approx(spec_latency.V1_PASS_S, rel=0.02)


def test_the_interval_a_speculative_plan_carries_holds_every_published_figure():
    ratios = np.array([x for *_, x in evidence.held_out_ratios()])
    lo, hi = evidence.widened([1.0, 1.0], 1.0)[0]
    assert np.all((ratios >= lo) & (ratios <= hi))
    assert lo == pytest.approx(0.87, abs=0.01) and hi == pytest.approx(1.39, abs=0.01)  # docs/latency.md's range


def test_the_procurement_table_counts_the_tokens_a_speculative_step_yields():
    from analysis.planning.procurement import procurement

    base = PlanInputs(speculative_config=parse_speculative_config(EAGLE3), acceptance_length=2.5)
    (row,) = procurement(llama(), base, [h100()], [1], concurrency=16, context=2000)
    p = make_plan(llama(), base.model_copy(update={"batch": 16, "context": 2000, "prompt_len": 1999}), h100())
    assert row.speculative_tokens_per_step == 2.5
    assert row.decode_step_s == pytest.approx(p.decode_step_s / 2.5)  # the time per output token
    assert row.tokens_per_s_per_gpu == pytest.approx(16 / row.decode_step_s)
