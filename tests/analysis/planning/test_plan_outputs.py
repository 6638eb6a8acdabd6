"""`kvprof plan`'s outputs are one typed contract (issue #48): the JSON it prints and writes validates against the
exported schema (analysis/planning/plan.schema.json), for every docs example, the procurement table, the
recommendation, the saved plan and a calibration; and a misspelt key is an error on both sides, never a None."""

from __future__ import annotations

import json
import shlex

import jsonschema
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from analysis.catalog import gpu, resolve_model
from analysis.planning import outputs
from analysis.planning.plan import PlanInputs, make_plan
from analysis.planning.plan_schema import PLAN_VERSION, Plan
from profiler.cli import app
from tests.test_docs_examples import EXAMPLES, _why_not_run

runner = CliRunner()
SCHEMA = json.loads(outputs.SCHEMA_FILE.read_text(encoding="utf-8"))
VALIDATORS = {name: jsonschema.Draft202012Validator(outputs.definition(name, SCHEMA)) for name in outputs.OUTPUTS}
# What each planning command's --json prints: one schema definition (a list of it for the procurement table).
KIND_OF_COMMAND = {"plan": "Plan", "procure": "ProcurementRow", "recommend": "Recommendation"}
PLAN_EXAMPLES = [(where, words) for where, words in EXAMPLES
                 if words.split()[0] in KIND_OF_COMMAND and _why_not_run(shlex.split(words)) is None]


def test_the_exported_schema_is_the_models():
    assert outputs.SCHEMA_FILE.read_text(encoding="utf-8") == outputs.json_schema_text(), (
        "analysis/planning/plan.schema.json is stale: run `python -m analysis.planning.outputs`")
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert set(SCHEMA["$defs"]) >= {"Plan", "ProcurementRow", "Recommendation", "SavedPlan", "Calibration"}


def _validate(name: str, value: object) -> None:
    errors = sorted(VALIDATORS[name].iter_errors(value), key=lambda e: list(e.absolute_path))
    assert not errors, f"{name}: " + "; ".join(f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                                               for e in errors[:5])


def test_every_plan_example_in_the_docs_prints_json_the_schema_takes(tmp_path, monkeypatch):
    """Each runnable `kvprof plan`, `procure` and `recommend` example of the README and docs/, with --json: a Plan,
    a list of ProcurementRow, a Recommendation — and what it prints reads back as the model it was written from,
    field for field."""
    monkeypatch.chdir(tmp_path)
    seen = set()
    assert len(PLAN_EXAMPLES) >= 10
    for where, words in PLAN_EXAMPLES:
        args = shlex.split(words)
        res = runner.invoke(app, [*args, *([] if "--json" in args else ["--json"])])
        assert res.exit_code == 0, f"{where}: kvprof {words}\n{res.output[-2000:]}"
        out = json.loads(res.stdout)
        kind = KIND_OF_COMMAND[args[0]]
        if kind == "ProcurementRow":
            assert isinstance(out, list) and out, words
            for row in out:
                _validate(kind, row)
        else:
            _validate(kind, out)
            if kind == "Plan":
                assert out["plan_version"] == PLAN_VERSION
                assert Plan.model_validate(out).to_json() == out, words  # read back, nothing lost or added
        seen.add(kind)
    assert seen == {"Plan", "ProcurementRow", "Recommendation"}


def test_a_saved_plan_follows_the_schema(tmp_path):
    path = tmp_path / "plan.json"
    res = runner.invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--batch", "8", "--context",
                              "4096", "--save", str(path)])
    assert res.exit_code == 0, res.output
    saved = json.loads(path.read_text())
    _validate("SavedPlan", saved)
    assert saved["prediction"]["kv_cache_tokens"] > 0 and saved["prediction"]["batch"] == 8


def test_a_misspelt_key_is_an_error_not_a_none():
    plan = make_plan(resolve_model("llama-3.1-8b")[0], PlanInputs(batch=8, context=4096), gpu("h100-sxm"))
    with pytest.raises(AttributeError):
        plan.decode_stepp_s  # noqa: B018 — the read itself is the test
    with pytest.raises(ValidationError, match="decode_stepp_s"):
        Plan.model_validate({**plan.to_json(), "decode_stepp_s": 0.01})
    with pytest.raises(ValidationError, match="gpu_note"):
        plan.gpu_note = 3  # assignment is validated too: the CLI adds its notes this way


def test_fields_the_plan_did_not_reach_are_absent_and_those_it_could_not_size_are_null():
    """No GPU: the budget-dependent numbers are null (asked, not answerable), the latency ones absent."""
    out = make_plan(resolve_model("llama-3.1-70b")[0], PlanInputs(context=131072)).to_json()
    assert out["kv_budget_bytes"] is None and out["num_blocks"] is None and out["gpu"] is None
    assert "decode_step_s" not in out and "ttft_s" not in out
    # 80 layers × 8 KV heads × 128 × K and V × 2 bytes: an integer stays one in the JSON
    assert out["kv_bytes_per_token"] == 327_680 and isinstance(out["kv_bytes_per_token"], int)
