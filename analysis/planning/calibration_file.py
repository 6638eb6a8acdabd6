"""The calibration a plan is given (`kvprof plan --calibration FILE`): a sweep's calibration.json or a saved
`kvprof log --json` (its reserve), read bounded, and checked against the GPU and model being planned.

A file that is neither, or one fitted on another GPU without ``transfer``, is a ``PlanError`` naming the file
and what is wrong; one fitted on another model on the same GPU is applied, and named in its provenance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from analysis import catalog
from analysis.catalog import GPU
from analysis.planning.calibration import (
    Calibration,
    CalibrationMismatch,
    calibration_provenance,
    transferred_calibration,
)
from analysis.planning.plan_inputs import PlanError
from analysis.planning.startup_log_check import LOG_KIND, calibration_from_log
from analysis.results.inputs import InputFileError, read_json
from analysis.results.schema import describe_errors

# What a sweep's calibration.json holds at least one of (the decode fit's figures, the measured reserve).
FITTED = ("effective_bandwidth_Bps", "effective_flops", "step_overhead_s", "reserve_bytes")


def load_calibration(path: Path, gpu_spec: GPU | None) -> Calibration:
    """calibration.json from a sweep, or a saved `kvprof log --json` (its reserve, on ``gpu_spec``)."""
    try:
        raw = read_json(path)
    except InputFileError as exc:
        raise PlanError(f"--calibration {exc}: not a JSON calibration; give a sweep's calibration.json or a saved "
                        "`kvprof log --json`") from None
    if isinstance(raw, dict) and raw.get("kind") == LOG_KIND:
        return calibration_from_log(raw, gpu_spec, source=str(path))
    if not isinstance(raw, dict) or not any(k in raw for k in FITTED):
        raise PlanError(f"--calibration {path}: not a calibration (a JSON object with at least one of "
                        f"{', '.join(FITTED)}); give a sweep's calibration.json or a saved `kvprof log --json`")
    try:
        return Calibration.model_validate(raw)
    except ValidationError as exc:
        raise PlanError(f"--calibration {path}: {describe_errors(exc)}") from None


def checked_calibration(cal: Calibration, path: Path, gpu_spec: GPU | None, name: str, model: str,
                        vllm_version: str | None, transfer: bool) -> tuple[Calibration, dict[str, Any]]:
    """The calibration as the plan applies it (labelled when transferred) and its provenance; one fitted on
    another GPU without ``transfer`` (--transfer-calibration) is a PlanError naming both (another model on the
    same GPU is applied, and named). ``name``: the planned architecture's; ``model``: the --model given."""
    try:
        provenance = calibration_provenance(cal, gpu_spec, name, catalog.model_config_sha256(model), vllm_version,
                                            transfer=transfer)
    except CalibrationMismatch as exc:
        raise PlanError(f"--calibration {path}: {exc}") from None
    return transferred_calibration(cal, provenance, gpu_spec), provenance
