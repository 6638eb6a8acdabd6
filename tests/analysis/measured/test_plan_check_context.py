"""`kvprof check-plan` compares a decode prediction only with a point measured near its context
(analysis.measured.plan_check.CONTEXT_TOLERANCE, ±10 %), and otherwise says which point was nearest."""

import json

import pytest
from synthetic_results import Injected, make_results
from typer.testing import CliRunner

from profiler.cli import app

runner = CliRunner()
# The synthetic llama-3.1-8b run on an H100 SXM (tests/synthetic_results.py): decode points at prompts 512, 2048
# and 6144 (8192 + 128 does not fit max_model_len 8192) with output 128, mean context prompt + 128 / 2.
MEAN_CONTEXT_2048 = 2048 + 128 // 2  # 2,112


@pytest.fixture(scope="module")
def h100_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("h100")
    make_results(root, Injected(max_model_lens=(8192,), telemetry_samples_per_engine=20))
    return root


def decode_row(run, tmp_path, context: int) -> dict:
    plan = tmp_path / f"plan-{context}.json"
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192",
                              "--block-size", "16", "--batch", "4", "--context", str(context), "--save", str(plan),
                              "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["check-plan", str(plan), str(run), "--json"])
    assert res.exit_code == 0, res.output
    return {r["quantity"]: r for r in json.loads(res.stdout)}


def test_a_4097_token_prediction_is_not_compared_with_a_2112_token_measurement(h100_run, tmp_path):
    rows = decode_row(h100_run, tmp_path, 4097)
    row = rows["decode step time (s)"]
    assert row["measured"] is None and row["rel_error"] is None
    # |2,112 − 4,097| = 1,985 > 10 % of 4,097 (409.7); 6,208 is further still (2,111).
    assert row["note"] == ("no measured point near context 4,097 (within ±10%) at batch 4: the nearest has mean "
                           f"context {MEAN_CONTEXT_2048:,}; not compared")
    assert "tokens/s at that batch" not in rows


def test_a_prediction_within_the_tolerance_is_compared(h100_run, tmp_path):
    rows = decode_row(h100_run, tmp_path, 2048)  # |2,112 − 2,048| = 64 ≤ 204.8
    row = rows["decode step time (s)"]
    assert row["measured"] is not None and row["note"] == f"measured at batch 4, mean context {MEAN_CONTEXT_2048:,}"


@pytest.mark.parametrize("context, compared", [
    (2346, True),   # 2,346 − 2,112 = 234 ≤ 234.6
    (2347, False),  # 2,347 − 2,112 = 235 > 234.7
])
def test_the_tolerance_is_ten_percent_of_the_planned_context(h100_run, tmp_path, context, compared):
    row = decode_row(h100_run, tmp_path, context)["decode step time (s)"]
    assert (row["measured"] is not None) is compared
