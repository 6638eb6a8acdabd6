"""The latency model held against every published measurement in the corpus (issue #25).

The corpus (analysis/catalog/latency/) is real GPU evidence: each record's numbers are transcribed from its
source, with a verbatim excerpt. Every figure here is leave-one-source-out: a record is predicted by constants
fitted on every other source, so the error quoted is the error on evidence the fit did not see.
"""

from __future__ import annotations

import re

import pytest

from analysis import catalog
from analysis.latency import interval_for, shipped_constants
from analysis.latency_corpus import load_latency_corpus, vllm_version
from analysis.latency_fit import calibration_check, evaluate, record_architecture, summary

CORPUS = load_latency_corpus()

# Records beyond 25 % under leave-one-source-out, and why. A new miss fails the test until it is explained here
# (or the model is fixed); an explained record that comes back within 25 % fails too, so the list stays true.
EXPLAINED = {
    "dennislee_qwen2-7b_a100-80gb_tp1": "a vLLM 0.10 server on A100 with prefix caching at gpu_memory_utilization "
                                        "0.5: 1.3x slower than the other A100 sources (2024 latency runs and the "
                                        "Qwen team's 0.6.3 table) imply once it is held out",
    "issue9471_llama-3.1-8b-fp8": "FP8 weights with num_scheduler_steps=8 (multi-step scheduling hides the host "
                                  "floor): the only FP8 and the only multi-step record; held out, FP8 keeps its prior",
    "pr13747_deepseek-v2-lite": "the only MLA model (FlashMLA) and a 2 GB-per-GPU MoE at tp 8: its step is floors "
                                "and all-reduces of 27 layers of 64-expert routing, twice what the Mixtral-fitted "
                                "MoE layer floor gives",
    "pr2192_llama-2-70b": "vLLM 0.2.6 at tp 4 and batch 64 on A100 (the PR's custom all-reduce): the only source of "
                          "its era at that batch; held out, the 0.5 era's host cost keeps its prior",
    "pr23151_qwen3-30b-a3b": "a 128-expert MoE served at concurrency 10 with DeepGEMM: held out, the MoE kernel "
                             "efficiency comes from 2024 Mixtral (8 experts, Triton fused MoE) and runs 1.6x slow",
    "pr2542_mixtral-8x7b": "the first fused-MoE Triton kernel (vLLM 0.2.7, untuned) at tp 8 on H100 at batch 16 and "
                           "64, whose per-GPU expert GEMMs are 1,792 wide: 1.3-2.3x slower than the tuned kernels of "
                           "the other MoE sources (its batches 1-8 are within 20 %)",
    "pr3240_mixtral-8x7b": "Mixtral on A100 at tp 2 (vLLM 0.3.3): 1.5x faster than the H100 tp 8 run of the same "
                           "era implies; the two 2024 Mixtral sources disagree by 2x and the model has one MoE "
                           "kernel efficiency",
    "qwen25speed_qwen2.5-0.5b": "a 0.5B model at batch 1 (1 GB of weights): the step is the host floor of vLLM "
                                "0.6.3's offline generate, 1.7x the floor fitted on the other sources",
    "argonne_mixtral-8x7b_a100-40gb": "Mixtral on A100 40GB at tp 4 and batch 64 (vLLM 0.5.4): faster than the "
                                      "pooled MoE efficiency, like PR 3240's A100 Mixtral; the MoE sources disagree "
                                      "by 2x between A100 and H100",
    "dstack_llama-3.1-405b-fp8_h100_tp8_b4_32784x2048": "four 32,784-token prompts at tp 8: the per-step figure is "
                                                        "the latency less the predicted prefill (131k tokens, "
                                                        "quadratic attention, chunked); what that prediction misses "
                                                        "lands in the step",
    "dstack_llama-3.1-405b-fp8_h100_tp8": "405B in FP8 (fbgemm per-channel) at tp 8: 1.27x slower than the FP8 "
                                          "efficiency fitted on the FP8 cards at tp 1-2 (single runs, no warm-up)",
    "wmx_qwen2.5-0.5b_l4": "TTFT of a 0.5B model on an L4 in a 4-vCPU cloud instance: 27-135 ms where the prefill "
                           "takes 2-20 ms; the API server and the small host are the TTFT, and held out the API "
                           "cost comes from the other sources' prefill-bound TTFTs (its ITLs are within 20 %)",
    "r1llama70bcard_llama-3.1-70b-w4a16_h100": "W4A16 (Marlin) on H100 runs 1.3x slower than the int4 efficiency "
                                               "fitted mostly on A100 records (these cards' A100 W4A16 rows are "
                                               "within 8%): Marlin reaches a smaller share of Hopper's bandwidth",
    "r1llama8bcard_llama-3.1-8b-w4a16_h100": "as the 70B card's H100 W4A16 row: Marlin on Hopper",
    "r1llama8bcard_llama-3.1-8b_h100_tp1_b1_10240x1536": "a 10,240-token prompt at batch 1: the step is 1.3x the "
                                                         "prediction; the card rounds its latency to 0.1 s and "
                                                         "does not say whether prefix caching or chunking ran",
}


def _explained(record: str) -> str | None:
    return next((why for key, why in EXPLAINED.items() if record.startswith(key)), None)


@pytest.fixture(scope="module")
def fitted():
    return evaluate(CORPUS)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_record_names_what_kvprof_can_plan_and_quotes_its_numbers(name):
    rec = CORPUS[name]
    catalog.model_dir(rec.settings.catalog_model)
    catalog.resolve_gpu(rec.settings.gpu)
    assert vllm_version(rec.settings), "stated or inferred (notes say how)"
    record_architecture(rec)
    assert str(rec.source).startswith("https://")
    # Every reported number appears in the excerpt as printed (at least its leading digits), so a transcription
    # can be checked against the source's own lines.
    digits = re.sub(r"[,\s]", "", rec.excerpt)
    for field, value in rec.reported.model_dump(exclude_none=True).items():
        lead = f"{value:.15g}"[:4].rstrip(".")
        assert lead in digits, f"{field} {value} is not in the excerpt"


def test_the_shipped_constants_are_the_fit_on_the_corpus(fitted):
    constants, _ = fitted
    shipped = shipped_constants()
    assert shipped.params.keys() == constants.params.keys()
    for k, v in constants.params.items():
        assert shipped.params[k] == pytest.approx(v, rel=1e-6), f"{k}: rerun python -m analysis.latency_fit --write"
    assert shipped.fitted_on == constants.fitted_on
    assert shipped.intervals.keys() == constants.intervals.keys()


def test_held_out_the_model_beats_the_roofline_and_every_miss_is_explained(fitted):
    _, rows = fitted
    s = summary(rows)
    assert s["decode_records"] == sum(1 for r in rows if r.kind == "decode") >= 20
    assert len({r.source for r in rows}) >= 8
    # The bare roofline is optimistic on every record: real steps take 1.2-3x its time.
    assert s["roofline_median_ratio"] > 1.5
    assert all(r.roofline_ratio > 1.0 for r in rows if r.roofline_ratio)
    # Leave-one-source-out, the model is about three times closer than the roofline (see the note for the target).
    assert s["decode_median_abs_error"] < 0.35 < s["roofline_median_abs_error"]
    assert s["decode_median_abs_error"] < s["roofline_median_abs_error"] / 2.5
    missed = {r.record for r in rows if abs(r.loso_ratio - 1) > 0.25}
    assert {m for m in missed if _explained(m) is None} == set()
    stale = {key for key in EXPLAINED if not any(m.startswith(key) for m in missed)}
    assert stale == set(), "explained records that are no longer misses: drop them from EXPLAINED"


def test_every_interval_holds_most_of_its_held_out_records(fitted):
    constants, rows = fitted
    for regime, iv in constants.intervals.items():
        if iv.n < 6:  # too few to bound anything: the plan quotes the pooled decode interval instead
            assert interval_for(regime, constants) == constants.intervals["decode" if regime != "ttft" else "ttft"]
            continue
        rs = [r for r in rows if r.regime == regime or (regime == "decode" and r.kind == "decode")]
        inside = sum(iv.low_ratio <= r.loso_ratio <= iv.high_ratio for r in rs)
        assert inside >= 0.7 * len(rs) - 1, regime  # a 10th-90th percentile range holds ~80 %
        assert iv.low_ratio <= iv.median_ratio <= iv.high_ratio


def test_a_one_point_calibration_of_the_same_setup_predicts_its_other_records(fitted):
    _, rows = fitted
    check = calibration_check(rows, CORPUS)
    same = check["same_source"]
    assert same["pairs"] >= 20
    # one measurement of a setup fixes what the spec sheet cannot know about it (its version, kernels, host)
    assert same["calibrated_median_abs_error"] < 0.5 * same["uncalibrated_median_abs_error"]
    assert same["calibrated_median_abs_error"] < 0.10


def test_ttft_is_held_against_the_published_ttfts(fitted):
    _, rows = fitted
    ttft = [r for r in rows if r.kind == "ttft"]
    assert len(ttft) >= 9 and len({r.source for r in ttft}) >= 3
    # prefill-bound TTFTs (bursts and closed-loop waves of long prompts) within 25 %; the rest are explained
    assert all(abs(r.loso_ratio - 1) <= 0.25 or _explained(r.record) for r in ttft)
    assert sum(abs(r.loso_ratio - 1) <= 0.25 for r in ttft) >= 4
