"""A plan's calibration: a sweep's measured decode figures (``calibration.json``, :class:`Calibration`), where they
were measured, whether they apply to the plan's model and GPU (:func:`calibration_provenance`), how they transfer to
another GPU by its spec sheet (:func:`transferred_calibration`), and the interval their own leave-one-out errors give
(:func:`calibration_interval`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog import GPU, UnknownName, resolve_gpu
from analysis.model.architecture import Architecture
from analysis.planning.plan_inputs import PlanError


class CalibrationDevice(BaseModel):
    """The device a calibration was measured on: the ceilings its fit was set against (the probe's where one
    ran, else the spec sheet's) and its total memory (device memory on a GPU, host RAM on a CPU)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    kind: Literal["cpu", "cuda"] | None = None
    bandwidth_Bps: float = Field(gt=0)
    peak_flops: float = Field(gt=0)
    memory_total_bytes: int = Field(gt=0)
    ceilings: str = "probe"


class CalibrationPower(BaseModel):
    """The draw a calibrating sweep measured (analysis.measured.energy.measured_power): per GPU at each decode
    batch, its idle draw, what was counted and how."""

    model_config = ConfigDict(extra="forbid")

    power_w_by_batch: list[tuple[int, float]] = Field(min_length=1)
    idle_power_w: float | None = None
    counted: str = ""
    method: str = ""
    points: int = 0

    def at(self, batch: float) -> float:
        """The measured draw at ``batch``: linear in log2(batch) between the measured batches, flat beyond them."""
        import numpy as np

        b = np.log2([max(x, 1) for x, _ in self.power_w_by_batch])
        w = [y for _, y in self.power_w_by_batch]
        return float(np.interp(np.log2(max(batch, 1)), b, w))


class CalibrationRegime(BaseModel):
    """What the calibrating sweep's decode steps were made of (analysis.measured.decode_fit.DecodeRegime)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["overhead", "memory", "compute"]
    overhead_share: float = Field(ge=0, le=1)
    memory_share: float = Field(ge=0, le=1)
    compute_share: float = Field(ge=0, le=1)
    arithmetic_intensity: float | None = Field(None, description="FLOP per byte, the points' median")
    ridge_point: float | None = None
    ridge_source: str | None = None
    roofline_bound: Literal["memory", "compute"] | None = None
    sentence: str = ""


class CalibrationFit(BaseModel):
    """The decode fit a calibration carries (analysis.measured.decode_fit.DecodeFit): step time = step_overhead_s +
    bytes / effective_bandwidth_Bps (+ FLOPs / effective_flops), with its goodness and leave-one-out errors."""

    model_config = ConfigDict(extra="forbid")

    effective_bandwidth_Bps: float | None = Field(None, gt=0)
    step_overhead_s: float = Field(ge=0)
    effective_flops: float | None = Field(None, gt=0)
    r2: float
    n: int = Field(ge=0, description="decode points fitted")
    loo_rel_errors: list[float] = Field(default_factory=list, description="each point's (predicted − measured) ÷ "
                                                                          "measured, predicted without it")
    loo_median_abs_rel_error: float | None = None
    spec_bandwidth_Bps: float | None = None
    probe_bandwidth_Bps: float | None = None
    spec_flops: float | None = None
    probe_flops: float | None = None
    mbu_spec: float | None = Field(None, description="effective ÷ spec-sheet bandwidth")
    mbu_probe: float | None = Field(None, description="effective ÷ probed bandwidth")
    regime: CalibrationRegime | None = None
    note: str = ""


class Calibration(BaseModel):
    """``calibration.json``: measured corrections from a sweep (written by ``kvprof report``,
    analysis.measured.decode_fit.calibration_dict), or a start-up log's reserve."""

    model_config = ConfigDict(extra="forbid", title="Calibration")

    effective_bandwidth_Bps: float | None = Field(None, gt=0)
    effective_flops: float | None = Field(None, gt=0)
    step_overhead_s: float = Field(0.0, ge=0)
    reserve_bytes: int | None = Field(None, ge=0)
    source: str = ""
    device: str | None = None  # the device's name as the sweep recorded it
    model: str | None = None
    model_dtype: str | None = None  # what vLLM ran the calibrated model's weights in
    # sha256 of the calibrated model's config.json contents (analysis.catalog.config_sha256)
    model_config_sha256: str | None = None
    vllm_version: str | None = None  # the vLLM the calibrating sweep ran
    measured_on: CalibrationDevice | None = None
    power: CalibrationPower | None = None  # measured draw per batch (the device's own; not carried to another)
    kv_cache_dtype: str | None = None  # the KV-cache dtype the calibrating sweep ran
    regime: Literal["overhead", "memory", "compute"] | None = None  # what its decode steps were made of
    fit: CalibrationFit | None = None  # the decode fit, with its leave-one-out errors
    log_available_kv_cache_bytes: int | None = None  # a start-up log's KV budget, beside the reserve taken from it

    def device_spec(self) -> GPU | None:
        """The calibration's device as a plan target (its ceilings and memory), or None where the
        calibration does not record it (written before kvprof did, or a `kvprof log` reserve)."""
        d = self.measured_on
        if d is None:
            return None
        return GPU(name=f"calibration: {d.name}", display=d.name, memory_mib=max(1, d.memory_total_bytes // 2**20),
                   bandwidth_tbs=d.bandwidth_Bps / 1e12, bf16_tflops=d.peak_flops / 1e12, cpu=d.kind == "cpu")


def _same_device(name: str, gpu: GPU) -> bool:
    """Whether a device name a sweep recorded is the plan's GPU (catalog part, probed or calibrated device)."""
    if gpu.name.startswith(("probe: ", "calibration: ")):
        return gpu.display == name
    try:
        return resolve_gpu(name)[0].name == gpu.name
    except UnknownName:
        return False


class CalibrationMismatch(PlanError):
    """A calibration fitted on another GPU or another model, applied without ``--transfer-calibration``."""


def calibration_provenance(calibration: Calibration, gpu: GPU | None, model: str, config_sha256: str | None,
                           vllm_version: str | None, *, transfer: bool = False) -> dict[str, Any]:
    """What a plan says about the calibration it applies: where it was fitted (device, model and its config
    digest, vLLM), what the file does not record (``unknown``), and whether it is ``transferred``.

    A calibration measures a device: its effective bandwidth, FLOP rate, per-step overhead and reserve. So one
    fitted on another model applies to this one on the same device without a flag — sweeping a small model to
    plan a large one is what calibrations are for — and the plan names the model it was fitted on
    (``fitted_on_model``). Only another device is a transfer: refused (``CalibrationMismatch``) unless
    ``transfer``, then labelled ``transferred`` (and ``transferred_because``), its rates scaled to this device
    by the two spec sheets (:func:`transferred_calibration`). A calibration that does not record its device or
    model (written before kvprof recorded them, or a `kvprof log` reserve) is applied, and ``unknown`` says
    what could not be checked. Another vLLM version is a warning, not a refusal: the analytic accounting
    already follows ``--vllm-version``, and only the fitted overhead may move between versions."""
    from analysis.results.schema import TESTED_VLLM_VERSIONS

    device = calibration.measured_on.name if calibration.measured_on else calibration.device
    out: dict[str, Any] = {"device": device, "model": calibration.model,
                           "model_config_sha256": calibration.model_config_sha256,
                           "vllm_version": calibration.vllm_version, "transferred": False,
                           "transferred_because": [], "fitted_on_model": None, "unknown": [], "warnings": []}
    mismatch: list[str] = out["transferred_because"]
    if not device:
        out["unknown"].append("the calibration does not say which device it was fitted on")
    elif gpu is not None and not _same_device(device, gpu):
        mismatch.append(f"fitted on {device}, this plan is for {gpu.display or gpu.name}")
    theirs, ours = calibration.model_config_sha256, config_sha256
    other_model = None
    if theirs and ours:
        if theirs != ours:
            other_model = (f"fitted on model {calibration.model or '?'} (config {theirs[:12]}), applied to {model} "
                           f"(config {ours[:12]})")
    elif calibration.model:
        if calibration.model.lower() != model.lower():
            other_model = f"fitted on model {calibration.model}, applied to {model}"
        else:
            out["unknown"].append(f"the calibration names its model ({calibration.model}) but not its config "
                                  f"digest: that it is the same config is assumed")
    else:
        out["unknown"].append("the calibration does not say which model it was fitted on")
    if other_model:
        out["fitted_on_model"] = (f"{other_model}: its bandwidth, FLOP rate and per-step overhead are the device's, "
                                  f"measured with that model's kernels")
    if not calibration.vllm_version:
        out["unknown"].append("the calibration does not say which vLLM it was fitted with")
    elif calibration.vllm_version != (plan_vllm := vllm_version or TESTED_VLLM_VERSIONS[0]):
        out["warnings"].append(f"the calibration was fitted with vLLM {calibration.vllm_version}, this plan is for "
                               f"vLLM {plan_vllm}: its per-step overhead may differ")
    if mismatch and not transfer:
        raise CalibrationMismatch(f"{'; '.join(mismatch)} — its figures were measured there; pass "
                                  f"--transfer-calibration to apply them anyway (its rates are then scaled by the "
                                  f"two spec sheets and the plan is labelled as transferred)")
    out["transferred"] = bool(mismatch)
    return out


def transferred_calibration(calibration: Calibration, provenance: dict[str, Any],
                            gpu: GPU | None = None) -> Calibration:
    """The calibration as the plan applies it. Fitted on another model: its source names that model. Fitted on
    another device (a transfer): its fitted bandwidth and FLOP rate scaled by the ratio of this device's ceilings
    to those it was fitted against (``measured_on``: the same fraction of peak), the step overhead and reserve
    carried as measured, and its source labelled TRANSFERRED with how."""
    source = calibration.source or "calibration"
    if provenance.get("fitted_on_model") and not provenance["transferred"]:
        return calibration.model_copy(update={"source": f"{source} ({provenance['fitted_on_model'].split(':')[0]})"})
    if not provenance["transferred"]:
        return calibration
    update: dict[str, Any] = {}
    how = "rates applied as measured (no device to scale them to)"
    ceilings = _fitted_against(calibration)
    if gpu is not None and ceilings is None and (calibration.effective_bandwidth_Bps or calibration.effective_flops):
        raise PlanError(f"calibration {source}: measured on {calibration.device!r}, which is not a catalog GPU, and "
                        f"it records no ceilings it was fitted against; its rates cannot be carried to "
                        f"{gpu.display or gpu.name} (use it with that device alone)")
    if gpu is not None and ceilings is not None:
        bw_ratio, fl_ratio = gpu.bandwidth_Bps / ceilings[0], gpu.peak_flops() / ceilings[1]
        update = {"effective_bandwidth_Bps": calibration.effective_bandwidth_Bps and
                  calibration.effective_bandwidth_Bps * bw_ratio,
                  "effective_flops": calibration.effective_flops and calibration.effective_flops * fl_ratio}
        how = (f"rates scaled by the spec sheets: bandwidth ×{bw_ratio:.3g}, FLOP/s ×{fl_ratio:.3g}; overhead and "
               f"reserve as measured")
    if calibration.power is not None:
        how += "; its measured power not carried (another device's boards)"
    label = f"TRANSFERRED: {'; '.join(provenance['transferred_because'])}; {how}"
    return calibration.model_copy(update={**update, "power": None, "source": f"{source} [{label}]"})


def _fitted_against(calibration: Calibration) -> tuple[float, float] | None:
    """(bandwidth, FLOP/s) ceilings of the device a calibration was fitted on: ``measured_on``'s, else the catalog
    spec sheet of the device it names; None when neither is known."""
    if calibration.measured_on is not None:
        return calibration.measured_on.bandwidth_Bps, calibration.measured_on.peak_flops
    if calibration.device:
        try:
            g = resolve_gpu(str(calibration.device))[0]
        except UnknownName:
            return None
        return g.bandwidth_Bps, g.peak_flops()
    return None


def calibration_warnings(calibration: Calibration, gpu: GPU | None, a: Architecture) -> list[str]:
    """What makes a calibration a poor fit for this plan beyond its provenance (which
    ``calibration_provenance`` checks): the weights run in another dtype."""
    out = []
    if calibration.model_dtype and calibration.model_dtype != a.torch_dtype:
        out.append(f"the calibration ran its weights in {calibration.model_dtype}, this plan in {a.torch_dtype} "
                   f"(--dtype): kernels and effective bandwidth may differ")
    return out


def calibration_interval(calibration: Calibration) -> tuple[float, float, str] | None:
    """Measured ÷ predicted over the calibrating sweep's own points, each predicted by the fit without it
    (its leave-one-out errors): the 10th–90th percentiles, or None where the file carries no such errors."""
    import numpy as np

    errors = [e for e in (calibration.fit.loo_rel_errors if calibration.fit else []) if e > -1]
    if len(errors) < 3:
        return None
    ratios = 1 / (1 + np.array(errors, dtype=float))  # errors are (predicted − measured) / measured
    lo, hi = float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))
    return lo, hi, (f"the calibrating sweep's {len(errors)} decode points, each predicted by the fit without it: "
                    f"median |error| {100 * float(np.median(np.abs(errors))):.0f}%, measured/predicted "
                    f"{lo:.2f}–{hi:.2f} (10th–90th pct)")
