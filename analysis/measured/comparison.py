"""Multi-run comparison (`kvprof compare`): several sweeps' results side by side, aligned on the engine
axes they share, with what differs between them and a verdict on which run is better and by how much.

Runs are aligned on the engine axes they share. An axis whose values are disjoint
between runs (block size 32 in one, 64 in the other) is a *differing axis*: it is
named, and the runs are aligned on the remaining axes. Every other engine setting
of the results contract, and every engine argument, whose values differ is named
as well. Run-level facts (GPU, driver, vLLM, model) that differ are named too.
Quantities on different GPUs are normalised where that means something (per GPU,
fraction of memory, MBU).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.measured.pipeline import Analysis, analyse
from analysis.model.layers import cdiv
from analysis.results.load import LoadError, Results, load
from analysis.results.schema import EngineSettings
from analysis.vllm.allocator import sequences_that_fit

ALIGN_AXES = ["model", "max_model_len", "block_size", "kv_cache_dtype"]
# Engine settings that are not comparison axes: model_dir (a path on the machine that ran) and model_sha256 (its
# config's digest) — the model is compared as an alignment axis and a run fact; seed, dtype and weights say how the
# model was loaded and sampled, not how the KV cache was set up.
NOT_AXES = {"model_dir", "model_sha256", "seed", "dtype", "weights"}
# Every other engine setting of the results contract is compared, so a new engine axis needs no edit here;
# engine_args is compared argument by argument (the engine table's engine_arg_<name> columns).
SETTING_AXES = [name for name in EngineSettings.model_fields
                if name not in NOT_AXES and name not in ALIGN_AXES and name != "engine_args"]
ENGINE_ARG_PREFIX = "engine_arg_"
RUN_FACTS = ["device", "driver", "vllm_version", "torch_version", "model"]
REFERENCE_CONTEXT = 32768


class CompareError(ValueError):
    """Inputs that cannot be compared (the message says why)."""


@dataclass
class Run:
    """One results directory under its label, analysed."""

    label: str
    analysis: Analysis

    @property
    def res(self) -> Results:
        return self.analysis.res


@dataclass
class Comparison:
    """Several runs aligned on the engine axes they share: capacity ratios, decode throughput per GPU,
    each run's fit, what differs, and the verdict in plain sentences."""

    runs: list[Run]
    align_on: list[str]
    differing_axes: dict[str, list[Any]]  # axis → each run's values
    differing_facts: dict[str, list[Any]]
    capacity: pd.DataFrame
    decode: pd.DataFrame
    throughput: pd.DataFrame
    fits: pd.DataFrame
    verdict: list[str] = field(default_factory=list)
    only_in: dict[str, list[str]] = field(default_factory=dict)
    serve: pd.DataFrame = field(default_factory=pd.DataFrame)  # serve points aligned across runs (_serve)
    failed: dict[str, str] = field(default_factory=dict)  # label → why the run has no engine with capacity facts


def _values(df: pd.DataFrame, col: str) -> list[Any]:
    return sorted({v for v in df[col].dropna().tolist()}, key=str) if col in df else []


def _setting_column(e: pd.DataFrame, axis: str) -> str:
    """The engine table's column for a setting axis: its own name where the table has one (the value vLLM
    settled on, e.g. max_num_seqs from the capacity facts), else ``requested_<name>``; an engine argument's
    column is its axis name."""
    if axis.startswith(ENGINE_ARG_PREFIX) or axis in e:
        return axis
    return f"requested_{axis}"


def _setting_axes(engines: list[pd.DataFrame]) -> list[str]:
    """SETTING_AXES, then every engine argument any run passed (engine_arg_<name>), sorted."""
    args = sorted({c for e in engines for c in e.columns if c.startswith(ENGINE_ARG_PREFIX)})
    return [*SETTING_AXES, *args]


def _run_facts(run: Run) -> dict[str, Any]:
    e = run.res.engines
    out = {}
    for fact in RUN_FACTS:
        col = "gpu_name" if fact == "device" and "gpu_name" in e and e["gpu_name"].notna().any() else fact
        vals = _values(e, col)
        out[fact] = ", ".join(map(str, vals)) if vals else None
    return out


def compare_runs(dirs: list[str | Path], labels: list[str] | None = None) -> Comparison:
    """Load, analyse and align several results directories (CompareError when they cannot be compared)."""
    if len(dirs) < 2:
        raise CompareError("give at least two results directories")
    labels = labels or [Path(d).name for d in dirs]
    if len(labels) != len(dirs):
        raise CompareError(f"--labels has {len(labels)} names for {len(dirs)} runs")
    if len(set(labels)) != len(labels):
        raise CompareError(f"labels must differ, got {labels}")
    runs = []
    for d, lab in zip(dirs, labels, strict=True):
        try:
            runs.append(Run(lab, analyse(load(d))))
        except LoadError as exc:
            raise CompareError(str(exc)) from None
        if runs[-1].res.engines.empty:
            raise CompareError(f"{d}: no engine records — nothing measured to compare")
    engines = [r.res.engines.assign(run=r.label) for r in runs]
    models = [set(_values(e, "model")) for e in engines]
    if not set.intersection(*models) and len(set.union(*models)) > 1:
        # Different models are comparable only as whole runs; refuse silently misaligned tables.
        raise CompareError("the runs share no model ("
                           + "; ".join(f"{r.label}: {', '.join(sorted(m))}" for r, m in zip(runs, models, strict=True))
                           + ") — there is no shared axis to align them on")
    align, differing = [], {}
    for axis in ALIGN_AXES:
        sets = [set(_values(e, axis)) for e in engines]
        if all(s == sets[0] for s in sets):
            align.append(axis)
        elif set.intersection(*sets):
            align.append(axis)  # partly shared: align; rows in one run only are listed
            differing[axis] = [sorted(s, key=str) for s in sets]
        else:
            differing[axis] = [sorted(s, key=str) for s in sets]
    for axis in _setting_axes(engines):
        sets = [set(_values(e, _setting_column(e, axis))) for e in engines]
        if not all(s == sets[0] for s in sets):
            differing[axis] = [sorted(s, key=str) for s in sets]
    facts = [_run_facts(r) for r in runs]
    differing_facts = {k: [f[k] for f in facts] for k in RUN_FACTS if len({f[k] for f in facts}) > 1}
    cap = _capacity(runs, align)
    dec, tput = _decode(runs, align)
    fits = _fits(runs)
    only_in = {}
    measured = [r for r in runs if f"num_blocks[{r.label}]" in cap]  # runs with an engine that started
    if len(measured) > 1:
        for r in measured:
            col = f"num_blocks[{r.label}]"
            others = [f"num_blocks[{o.label}]" for o in measured if o is not r]
            mask = cap[col].notna() & cap[others].isna().all(axis=1)
            if mask.any():
                only_in[r.label] = [", ".join(f"{a}={row[a]}" for a in align) for _, row in cap[mask].iterrows()]
    cmp = Comparison(runs=runs, align_on=align, differing_axes=differing, differing_facts=differing_facts,
                     capacity=cap, decode=dec, throughput=tput, fits=fits, only_in=only_in, serve=_serve(runs, align),
                     failed={r.label: _failures(r) for r in runs if f"num_blocks[{r.label}]" not in cap})
    cmp.verdict = verdict(cmp)
    return cmp


def _failures(run: Run) -> str:
    """Why a run has no engine with capacity facts: its engines' statuses and the first message, in a line."""
    e = run.res.engines
    counts = e["status"].value_counts()
    statuses = ", ".join(f"{n} {s}" for s, n in counts.items())
    messages = [" ".join(str(m).split()) for m in e.get("message", pd.Series(dtype=object)).dropna() if str(m).strip()]
    return f"{len(e)} engine(s), none started ({statuses})" + (f": {messages[0][:200]}" if messages else "")


def _seqs_at(num_blocks: float, block_size: float, length: int) -> float | None:
    if pd.isna(num_blocks) or pd.isna(block_size):
        return None
    # Full-attention blocks per sequence; the pool's null block is left out (sequences_that_fit).
    return float(sequences_that_fit(int(num_blocks), cdiv(length, int(block_size))))


def _positive(s: pd.Series) -> pd.Series:
    """The column as floats, with zero, negative and missing values as NaN: a denominator."""
    s = pd.to_numeric(s, errors="coerce").astype(float)
    return s.where(s > 0)


def _capacity(runs: list[Run], align: list[str]) -> pd.DataFrame:
    frames = []
    for r in runs:
        e = r.res.engines[r.res.engines["status"] == "ok"].copy()
        if e.empty:
            continue
        e["seqs_at_ref"] = [_seqs_at(b, bs, REFERENCE_CONTEXT) for b, bs in zip(e["num_gpu_blocks"], e["block_size"],
                                                                                strict=True)]
        total = e["device_memory_bytes"] if "device_memory_bytes" in e else pd.Series(np.nan, index=e.index)
        budget = e["kv_cache_memory_bytes"].fillna(e["available_kv_bytes"])
        e["kv_fraction_of_memory"] = budget / _positive(total)
        keep = {"num_gpu_blocks": "num_blocks", "kv_cache_size_tokens": "kv_tokens",
                "kv_cache_max_concurrency": "max_concurrency", "seqs_at_ref": f"seqs_at_{REFERENCE_CONTEXT // 1024}K",
                "kv_fraction_of_memory": "kv_fraction_of_memory"}
        g = e[align + list(keep)].groupby(align, dropna=False).first().rename(columns=keep)
        frames.append(g.add_suffix(f"[{r.label}]"))
    if not frames:
        return pd.DataFrame()
    cap = pd.concat(frames, axis=1).reset_index()
    base = runs[0].label
    for r in runs[1:]:
        for q in ("kv_tokens", "max_concurrency", "num_blocks"):
            a, b = cap.get(f"{q}[{base}]"), cap.get(f"{q}[{r.label}]")
            if a is not None and b is not None:
                cap[f"{q} {r.label}/{base}"] = b / _positive(a)  # no ratio to an empty pool
    return cap


def _decode(runs: list[Run], align: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    frames, tputs = [], []
    for r in runs:
        d = r.analysis.decode
        if d.empty:
            continue
        tp = r.res.engines.set_index("engine_id")["tensor_parallel_size"].fillna(1)
        d = d.assign(run=r.label, tp=d["engine_id"].map(tp).fillna(1))
        d["tokens_per_s_per_gpu"] = d["output_tokens_per_s"] / d["tp"]
        frames.append(d)
        tputs.append(d.groupby(["run", "concurrency"], as_index=False)["tokens_per_s_per_gpu"].median())
    dec = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return dec, (pd.concat(tputs, ignore_index=True) if tputs else pd.DataFrame())


# A serve point's workload: its level, lengths, shared prefix and arrival shape (num_requests is left out: a
# duration-bound rate point may send a different number in another run and still be the same load).
SERVE_KEYS = ["loop", "concurrency", "request_rate", "burstiness", "prompt_len", "output_len", "prefix_len",
              "range_ratio"]
SERVE_VALUES = {"tpot_p50_s": "tpot_p50", "ttft_p50_s": "ttft_p50", "output_tokens_per_s": "tokens_per_s"}


def _serve(runs: list[Run], align: list[str]) -> pd.DataFrame:
    """Serve points side by side: one row per aligned engine configuration and serve workload, each run's TPOT
    p50, TTFT p50 and output tokens/s (``<name>[<label>]``) and every other run's ratio to the first
    (``<name> <label>/<base>``)."""
    frames = []
    for r in runs:
        s = r.analysis.serve.serve if r.analysis.serve is not None else pd.DataFrame()
        if s.empty:
            continue
        keys = [k for k in align if k in s] + SERVE_KEYS
        s = s.assign(**{k: s[k].astype(float) for k in ("concurrency", "request_rate") if k in s})
        g = s[keys + list(SERVE_VALUES)].groupby(keys, dropna=False).first().rename(columns=SERVE_VALUES)
        frames.append(g.add_suffix(f"[{r.label}]"))
    if len(frames) < 2:
        return pd.DataFrame()
    out = pd.concat(frames, axis=1).reset_index()
    base = runs[0].label
    for r in runs[1:]:
        for q in SERVE_VALUES.values():
            a, b = out.get(f"{q}[{base}]"), out.get(f"{q}[{r.label}]")
            if a is not None and b is not None:
                out[f"{q} {r.label}/{base}"] = b / _positive(a)
    return out


def _geomean(s: pd.Series | None) -> tuple[float | None, int]:
    v = pd.to_numeric(s, errors="coerce").dropna() if s is not None else pd.Series(dtype=float)
    v = v[v > 0]
    return (float(np.exp(np.log(v).mean())), len(v)) if not v.empty else (None, 0)


def _fits(runs: list[Run]) -> pd.DataFrame:
    rows = []
    for r in runs:
        f = r.analysis.fit
        dec = r.analysis.decode
        med_err = dec["roofline_spec_rel_error"].abs().median() if "roofline_spec_rel_error" in dec else None
        med_err_probe = dec["roofline_probe_rel_error"].abs().median() if "roofline_probe_rel_error" in dec else None
        verdicts = r.analysis.claims["verdict"].value_counts().to_dict() if not r.analysis.claims.empty else {}
        rows.append({"run": r.label, "bw_eff_Bps": f.effective_bandwidth_Bps if f else None,
                     "mbu_spec": f.mbu_spec if f else None, "mbu_probe": f.mbu_probe if f else None,
                     "overhead_s": f.step_overhead_s if f else None, "r2": f.r2 if f else None,
                     "roofline_spec_median_abs_error": med_err, "roofline_probe_median_abs_error": med_err_probe,
                     "claims_hold": verdicts.get("holds", 0), "claims_diverge": verdicts.get("diverges", 0)})
    return pd.DataFrame(rows)


def _shared_decode_ratio(cmp: Comparison, base: str, other: str) -> float | None:
    d = cmp.decode
    if d.empty:
        return None
    keys = [k for k in ("model", "max_model_len", "block_size", "kv_cache_dtype", "concurrency", "prompt_len")
            if k in cmp.align_on or k in ("concurrency", "prompt_len")]
    a = d[d["run"] == base].groupby(keys)["tokens_per_s_per_gpu"].median()
    b = d[d["run"] == other].groupby(keys)["tokens_per_s_per_gpu"].median()
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna()
    both = both[(both["a"] > 0) & (both["b"] > 0)]  # a ratio needs tokens on both sides
    return float(np.exp(np.log(both["b"] / both["a"]).mean())) if not both.empty else None


def verdict(cmp: Comparison) -> list[str]:
    """Plain sentences: what differs, and which run is better by how much."""
    base = cmp.runs[0].label
    out = []
    if cmp.differing_facts:
        out.append("Runs differ in " + "; ".join(
            f"{k}: " + " vs ".join(f"{r.label} {v}" for r, v in zip(cmp.runs, vals, strict=True))
            for k, vals in cmp.differing_facts.items()) + ".")
    if cmp.differing_axes:
        out.append("Engine settings that differ: " + "; ".join(
            f"{k} (" + " vs ".join(f"{r.label} {v}" for r, v in zip(cmp.runs, vals, strict=True)) + ")"
            for k, vals in cmp.differing_axes.items()) + ".")
    if not cmp.differing_facts and not cmp.differing_axes:
        out.append("No engine setting or run fact differs: the comparison shows run-to-run variation.")
    out.append(f"Aligned on: {', '.join(cmp.align_on) or 'nothing (whole runs compared)'}.")
    for label, why in cmp.failed.items():
        out.append(f"{label} has no engine with capacity facts to compare — {why}.")
    for r in cmp.runs[1:]:
        col = f"kv_tokens {r.label}/{base}"
        if col in cmp.capacity and cmp.capacity[col].notna().any():
            ratio = cmp.capacity[col].median()
            out.append(f"KV capacity: {r.label} holds {ratio:.3g}× the tokens of {base} (median over aligned "
                       f"engine configurations).")
        ref = f"seqs_at_{REFERENCE_CONTEXT // 1024}K"
        a, b = cmp.capacity.get(f"{ref}[{base}]"), cmp.capacity.get(f"{ref}[{r.label}]")
        if a is not None and b is not None and (a > 0).any():
            out.append(f"Sequences of {REFERENCE_CONTEXT:,} tokens that fit together (best engine configuration): "
                       f"{r.label} {b.max():,.0f} vs {base} {a.max():,.0f}.")
        tput = _shared_decode_ratio(cmp, base, r.label)
        if tput is not None:
            better, by = (r.label, tput - 1) if tput > 1 else (base, 1 / tput - 1)
            out.append(f"Decode throughput per GPU: {r.label} is {tput:.3g}× {base} (geometric mean over shared "
                       f"points) — {better} is faster by {100 * by:.1f}%.")
        if not cmp.serve.empty:
            tok, n = _geomean(cmp.serve.get(f"tokens_per_s {r.label}/{base}"))
            tpot, _ = _geomean(cmp.serve.get(f"tpot_p50 {r.label}/{base}"))
            if tok is not None:
                out.append(f"Serving: {r.label} delivers {tok:.3g}× the output tokens/s of {base}"
                           + (f" at {tpot:.3g}× its TPOT p50" if tpot is not None else "")
                           + f" (geometric mean over {n} shared serve point(s)).")
    return out
