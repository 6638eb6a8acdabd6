"""The file `kvprof plan … --save` writes and `kvprof check-plan` reads, as a pydantic model.

Only what check-plan reads is checked (the engine the plan describes and the predicted quantities); every
other key the plan carries is kept as written. A file that is not such a plan is a ``SavedPlanError`` naming
the file and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from analysis.results_schema import check_finite, describe_errors, read_record_text

PLAN_KIND = "kvprof-plan"


class SavedPlanError(ValueError):
    """A file that is not a readable saved plan (the message names the file and what is wrong)."""


Count = Field(None, ge=0)


class PlanPrediction(BaseModel):
    """``make_plan``'s result as saved: the engine it describes and the quantities check-plan measures."""

    model_config = ConfigDict(extra="allow")

    block_size: int = Field(gt=0)
    max_model_len: int = Field(gt=0)
    kv_cache_dtype: str
    tensor_parallel_size: int = Field(gt=0)
    max_num_batched_tokens: int = Field(gt=0)
    max_num_seqs: int = Field(gt=0)
    async_scheduling: bool
    context: int = Field(gt=0)
    batch: int | None = Field(None, gt=0)
    gpu: str | None = None
    kv_budget_bytes: int | None = Count
    num_blocks: int | None = Count
    kv_cache_tokens: int | None = Count
    max_concurrency: float | None = Count
    decode_step_s: float | None = Field(None, gt=0)
    calibrated_decode_step_s: float | None = Field(None, gt=0)
    tokens_per_s: float | None = Count


class PlanInputsSaved(BaseModel):
    """The plan's inputs as saved (analysis.plan.PlanInputs); check-plan reads the fixed KV budget."""

    model_config = ConfigDict(extra="allow")

    kv_cache_memory_bytes: int | None = Field(None, gt=0)


class SavedPlan(BaseModel):
    """A plan saved for `kvprof check-plan`: the prediction, its inputs and the model it was made for."""

    model_config = ConfigDict(extra="allow")

    kind: Literal["kvprof-plan"]
    model: str
    architecture: dict[str, Any] | None = Field(None, description="the architecture planned (absent: re-resolve "
                                                                  "`model`)")
    gpu: str | None = None
    inputs: PlanInputsSaved
    prediction: PlanPrediction


def load_saved_plan(path: str | Path) -> dict[str, Any]:
    """A saved plan as a dict (every key as written, the checked ones validated), or SavedPlanError."""
    path = Path(path)
    try:
        text = read_record_text(path)
        check_finite(text, path)
    except ValueError as exc:  # ResultsError: unreadable, not UTF-8, NaN
        raise SavedPlanError(f"{exc}") from None
    try:
        plan = SavedPlan.model_validate_json(text)
    except ValidationError as exc:
        kind = next((e for e in exc.errors() if e["loc"] == ("kind",)), None)
        if kind is not None:
            raise SavedPlanError(f"{path}: not a saved kvprof plan (write one with `kvprof plan … --save FILE`)"
                                 ) from None
        raise SavedPlanError(f"{path}: not a readable plan: {describe_errors(exc)} — save it again with "
                             "`kvprof plan … --save FILE`") from None
    return plan.model_dump()
