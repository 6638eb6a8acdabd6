"""Plan checks (`kvprof check-plan`): a plan saved by `kvprof plan … --save` held against a measured sweep,
predicted vs measured per quantity, and the markdown table the CLI prints for it.

Only a plan for the run's model (by architecture facts) and GPU is checked; any
mismatch is a ``PlanCheckError`` whose message says why.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.catalog import UnknownName, gpu, resolve_model
from analysis.measured.pipeline import analyse
from analysis.measured.theory_vs_measured import architecture, rel
from analysis.model.architecture import Architecture
from analysis.planning.plan_schema import Plan
from analysis.planning.saved_plan import SavedPlan, SavedPlanError, load_saved_plan
from analysis.results.load import LoadError, Results, load
from analysis.table import fnum, format_columns, fpct
from analysis.vllm.allocator import batch_ceiling, paged_capacity

# How far (relative) a decode point's mean context may lie from the plan's --context and still be compared.
# A step reads the weights plus every sequence's KV, linear in context: 10 % off moves the KV part of the
# step by at most 10 % and the whole step by less, within what check-plan resolves; further off, the error
# would measure the context gap, not the model. A point's mean context is prompt + (output − 1) / 2, so a plan
# at --context = prompt_len still meets a point whose output is up to a fifth of its prompt.
CONTEXT_TOLERANCE = 0.10


class PlanCheckError(ValueError):
    """A plan that cannot be checked against a results directory (the message says why)."""


def check_plan(plan_path: str | Path, results_dir: str | Path) -> pd.DataFrame:
    """Per predicted quantity: predicted, measured, error — for the engine the plan describes."""
    try:
        saved = load_saved_plan(plan_path)  # the file through its model (analysis.planning.saved_plan)
    except SavedPlanError as exc:
        raise PlanCheckError(str(exc)) from None
    try:
        res = load(results_dir)
    except LoadError as exc:
        raise PlanCheckError(str(exc)) from None
    p, inputs = saved.prediction, saved.inputs
    plan_arch = _plan_architecture(saved, plan_path)
    _check_rules(saved, plan_arch, plan_path)
    e = _same_model(plan_arch, res, plan_path, results_dir)
    _same_gpu(p, e, plan_path, results_dir)
    a = analyse(res)
    def setting(name: str) -> pd.Series:
        """What vLLM settled on, or (an engine that never reported it: it failed) what the sweep asked for."""
        asked = e.get(f"requested_{name}", pd.Series(None, index=e.index, dtype=object))
        return e[name].where(e[name].notna(), asked) if name in e else asked

    match = e[(setting("block_size") == p.block_size) & (setting("max_model_len") == p.max_model_len)
              & (e["kv_cache_dtype"] == p.kv_cache_dtype)
              & (e["tensor_parallel_size"].fillna(1) == p.tensor_parallel_size)]
    if inputs.kv_cache_memory_bytes is not None:
        match = match[match["kv_cache_memory_bytes"] == inputs.kv_cache_memory_bytes]
    if match.empty:
        raise PlanCheckError(f"{results_dir}: no engine with block_size {p.block_size}, max_model_len "
                              f"{p.max_model_len}, kv dtype {p.kv_cache_dtype}, tp {p.tensor_parallel_size}"
                              + (f", kv_cache_memory_bytes {inputs.kv_cache_memory_bytes}"
                                 if inputs.kv_cache_memory_bytes is not None else "")
                              + " — the plan does not describe this sweep")
    ok = match[match["status"] == "ok"]
    if ok.empty:
        failed = match.iloc[0]
        message = " ".join(str(failed.get("message") or "no message recorded").split())
        raise PlanCheckError(f"{results_dir}: the engine the plan describes ({failed['engine_id']}) was launched and "
                              f"failed ({failed['status']}: {message[:300]}) — nothing was measured to check the plan "
                              "against")
    eng = ok.iloc[0]
    rows = []

    def add(q: str, pred: Any, meas: Any, note: str = "") -> None:
        rows.append({"quantity": q, "predicted": pred, "measured": meas,
                     "abs_error": None if pred is None or meas is None or pd.isna(meas) else float(meas) - float(pred),
                     "rel_error": rel(pred, meas), "note": note})

    budget = eng["kv_cache_memory_bytes"] if pd.notna(eng["kv_cache_memory_bytes"]) else eng["available_kv_bytes"]
    add("KV budget (bytes)", p.kv_budget_bytes, budget,
        "" if pd.notna(eng["kv_cache_memory_bytes"]) else "vLLM log, ±0.005 GiB")
    add("KV blocks", p.num_blocks, eng["num_gpu_blocks"])
    add("KV cache tokens", p.kv_cache_tokens, eng["kv_cache_size_tokens"])
    add("max concurrency at max_model_len", p.max_concurrency, eng["kv_cache_max_concurrency"])
    sat = a.saturation[a.saturation["engine_id"] == eng["engine_id"]] if not a.saturation.empty else a.saturation
    if p.num_blocks is not None and not sat.empty:
        # The plan's pool, asked the saturation phase's question: sequences of its length that fit together.
        cap = dataclasses.replace(
            paged_capacity(plan_arch, 0, block_size=p.block_size, max_model_len=p.max_model_len,
                           max_num_batched_tokens=p.max_num_batched_tokens, kv_cache_dtype=p.kv_cache_dtype,
                           tp=p.tensor_parallel_size, async_scheduling=p.async_scheduling),
            num_blocks=p.num_blocks)
        for (prompt, output), s in sat.groupby(["prompt_len", "output_len"]):
            c = batch_ceiling(cap, int(prompt), int(output), p.max_num_seqs, p.max_num_batched_tokens,
                              p.async_scheduling)
            ran = s[s["ran_together"].astype(bool)]
            add(f"sequences of {c.tokens:,} KV tokens that fit together", c.ceiling,
                ran["concurrency"].max() if not ran.empty else None,
                f"saturation: prompt {int(prompt):,} + output {int(output):,} − 1 tokens, largest batch that ran "
                f"without preemption; limited by {c.limited_by}")
    if p.decode_step_s is not None and not a.decode.empty:
        d = a.decode[(a.decode["engine_id"] == eng["engine_id"]) & (a.decode["concurrency"] == p.batch)]
        near = d.iloc[(d["mean_context"] - p.context).abs().argsort()[:1]].iloc[0] if not d.empty else None
        if near is not None and abs(near["mean_context"] - p.context) > CONTEXT_TOLERANCE * p.context:
            add("decode step time (s)", p.decode_step_s, None,
                f"no measured point near context {p.context:,} (within ±{CONTEXT_TOLERANCE:.0%}) at batch "
                f"{p.batch}: the nearest has mean context {near['mean_context']:,.0f}; not compared")
        elif near is not None:
            note = f"measured at batch {int(near['concurrency'])}, mean context {near['mean_context']:,.0f}"
            add("decode step time (s)", p.decode_step_s, near["decode_step_s"], note)
            if p.calibrated_decode_step_s is not None:
                add("decode step time, calibrated (s)", p.calibrated_decode_step_s, near["decode_step_s"], note)
            add("tokens/s at that batch", p.tokens_per_s, near["output_tokens_per_s"], note)
        else:
            add("decode step time (s)", p.decode_step_s, None, f"no decode point at batch {p.batch}")
    return pd.DataFrame(rows)


# Architecture facts named first when a plan's model and a run's model differ (all facts are compared).
_ARCH_LABELS = {"num_layers": "layers", "num_kv_heads": "kv heads", "head_dim": "head_dim",
                "hidden_size": "hidden size", "num_heads": "heads", "vocab_size": "vocab",
                "intermediate_size": "intermediate size", "torch_dtype": "dtype", "sliding_window": "sliding window"}


def _plan_architecture(saved: SavedPlan, plan_path: str | Path) -> Architecture:
    """The architecture the plan was made for: stored in the plan, else its --model resolved again."""
    try:
        if saved.architecture is not None:
            return Architecture.model_validate(saved.architecture)
        return resolve_model(saved.model)[0]
    except (ValueError, OSError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PlanCheckError(f"{plan_path}: cannot read the plan's model {saved.model!r} ({why}); "
                              "save the plan again with this kvprof") from None


def _check_rules(saved: SavedPlan, a: Architecture, plan_path: str | Path) -> None:
    """A plan whose settings vLLM refuses (analysis.vllm.engine_rules, as `kvprof plan` asks them) describes no run."""
    from pydantic import ValidationError

    from analysis.planning.plan import PlanInputs, input_problems, problems_line

    try:
        inputs = PlanInputs.model_validate(saved.inputs.model_dump())
    except ValidationError as exc:
        e = exc.errors()[0]
        raise PlanCheckError(f"{plan_path}: inputs.{'.'.join(map(str, e['loc']))}: {e['msg']} — save the plan again "
                             "with `kvprof plan … --save`") from None
    try:
        device = gpu(str(saved.prediction.gpu))
    except UnknownName:
        device = None  # a probed device or none: the rules without its memory
    if problems := input_problems(a, inputs, device, saved.prediction.weight_bytes):
        raise PlanCheckError(f"{plan_path}: vLLM refuses the plan's settings, so no run can match it: "
                             f"{problems_line(problems)}")


def _facts(a: Architecture) -> dict[str, Any]:
    return a.model_dump(exclude={"name"})


def _same_model(plan_arch: Architecture, res: Results, plan_path: str | Path,
                results_dir: str | Path) -> pd.DataFrame:
    """The run's engines whose model has the plan's architecture (by config facts, not by name or path)."""
    e = res.engines
    if e.empty:
        raise PlanCheckError(f"{results_dir}: no engine records — nothing measured to check the plan against")
    keys = e[["model_dir", "model", "model_config_json"]].dropna(how="all").drop_duplicates()
    same, others = [], []
    for model_dir, model, config in keys.itertuples(index=False):  # the config.json the engine records keep
        run_arch = architecture(model_dir, model, None, config if isinstance(config, str) else None)
        if run_arch is None:
            raise PlanCheckError(f"{results_dir}: the run's model {model_dir or model} cannot be read here (no "
                                  f"config.json at that path, not a catalog name), so the plan for {plan_arch.name} "
                                  "cannot be checked against it")
        (same if _facts(run_arch) == _facts(plan_arch) else others).append((model_dir, run_arch))
    if not same:
        model_dir, run_arch = others[0]
        pf, rf = _facts(plan_arch), _facts(run_arch)
        order = [*_ARCH_LABELS, *(k for k in pf if k not in _ARCH_LABELS)]  # the KV-deciding facts first
        diff = [f"{_ARCH_LABELS.get(k, k)} {pf[k]} vs {rf[k]}" for k in order if pf[k] != rf[k]]
        raise PlanCheckError(f"{plan_path} is a plan for {plan_arch.name} but {results_dir} measured {run_arch.name} "
                              f"({model_dir}): different architectures ({'; '.join(diff[:5])})")
    same_dirs = {d for d, _ in same}
    return e[[d in same_dirs for d in e["model_dir"]]]


def _same_gpu(p: Plan, e: pd.DataFrame, plan_path: str | Path, results_dir: str | Path) -> None:
    """A plan made from a GPU spec sheet must be checked on that GPU (when the run's device is known)."""
    if not p.gpu or str(p.gpu).startswith("probe:"):
        return
    names = e["gpu_name"].where(e["gpu_name"].notna(), e["device"]) if "gpu_name" in e else e["device"]
    for device in sorted({d for d in names.dropna().tolist() if d}):
        if str(device).startswith("CPU"):
            ran_on = None
        else:
            try:
                ran_on = gpu(str(device)).name
            except UnknownName:
                continue  # not in the catalog: nothing to hold the plan's GPU against
        if ran_on != p.gpu:
            raise PlanCheckError(f"{plan_path} is a plan for GPU {p.gpu} but {results_dir} ran on {device}"
                                  + (f" ({ran_on})" if ran_on else "")
                                  + " — plan it for that device (--gpu, or --probe with the run's probe.json)")


def plan_check_markdown(df: pd.DataFrame, plan_path: Path, results_dir: Path) -> str:
    """check_plan's table as the markdown `kvprof check-plan` prints."""
    table = format_columns(df, {"quantity": ("quantity", str), "predicted": ("predicted", fnum),
                                "measured": ("measured", fnum), "rel_error": ("error", fpct), "note": ("note", str)})
    return f"# Plan {plan_path} vs measured {results_dir}\n\n" + table.to_markdown(index=False) + "\n"
