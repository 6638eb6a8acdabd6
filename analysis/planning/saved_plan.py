"""The file `kvprof plan … --save` writes and `kvprof check-plan` reads, as a pydantic model.

The prediction is a ``Plan`` (analysis.planning.plan_schema), checked field by field as it is read; of the inputs,
what check-plan reads is checked and the rest kept as written. A file that is not such a plan is a
``SavedPlanError`` naming the file and the field.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analysis.planning.plan_schema import Plan
from analysis.results.schema import atomic_write_bytes, check_finite, describe_errors, read_record_text

PLAN_KIND = "kvprof-plan"


class SavedPlanError(ValueError):
    """A file that is not a readable saved plan (the message names the file and what is wrong)."""


class PlanInputsSaved(BaseModel):
    """The plan's inputs as saved (analysis.planning.plan.PlanInputs); check-plan reads the fixed KV budget."""

    model_config = ConfigDict(extra="allow")

    kv_cache_memory_bytes: Annotated[int, Field(strict=True, gt=0)] | None = None


class SavedPlan(BaseModel):
    """A plan saved for `kvprof check-plan`: the prediction, its inputs and the model it was made for."""

    model_config = ConfigDict(extra="forbid", title="SavedPlan")

    kind: Literal["kvprof-plan"]
    created_at: float | None = Field(None, description="when it was saved, Unix seconds")
    model: str = Field(description="the --model given")
    architecture: dict[str, Any] | None = Field(None, description="the architecture planned (absent: re-resolve "
                                                                  "`model`)")
    gpu: str | None = Field(None, description="the --gpu given")
    probe: str | None = Field(None, description="the --probe file given")
    calibration: str | None = Field(None, description="the --calibration file given")
    inputs: PlanInputsSaved
    prediction: Plan


def load_saved_plan(path: str | Path) -> SavedPlan:
    """A saved plan, validated, or SavedPlanError."""
    path = Path(path)
    try:
        text = read_record_text(path)
        check_finite(text, path)
    except ValueError as exc:  # ResultsError: unreadable, not UTF-8, NaN
        raise SavedPlanError(f"{exc}") from None
    try:
        plan = SavedPlan.model_validate_json(text)
    except ValidationError as exc:
        kind = next((e for e in exc.errors()  # no kind, or JSON that is not an object (a truncated file is damaged)
                     if e["loc"] == ("kind",) or (e["loc"] == () and e["type"] != "json_invalid")), None)
        if kind is not None:
            raise SavedPlanError(f"{path}: not a saved kvprof plan (write one with `kvprof plan … --save FILE`)"
                                 ) from None
        raise SavedPlanError(f"{path}: not a readable plan: {describe_errors(exc)} — save it again with "
                             "`kvprof plan … --save FILE`") from None
    return plan


def save_plan(path: str | Path, *, model: str, architecture: dict[str, Any], gpu: str | None, probe: str | None,
              calibration: str | None, inputs: dict[str, Any], prediction: Plan) -> None:
    """Write a plan for `kvprof check-plan`, whole or not at all. It is held against ``SavedPlan`` first, so a
    plan is never saved that check-plan would refuse (SavedPlanError names the field)."""
    plan = {"kind": PLAN_KIND, "created_at": time.time(), "model": model, "architecture": architecture,
            "gpu": gpu, "probe": probe, "calibration": calibration, "inputs": inputs,
            "prediction": prediction.to_json()}
    try:
        SavedPlan.model_validate(plan)
    except ValidationError as exc:
        raise SavedPlanError(f"{path}: this plan does not follow the saved-plan model ({describe_errors(exc)}); "
                             "nothing was written") from None
    atomic_write_bytes(Path(path), (json.dumps(plan, indent=2, sort_keys=True, default=str) + "\n").encode())
