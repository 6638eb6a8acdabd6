"""Energy per token of a run's points (issue #29): what each point's GPUs drew over its window, per token.

The profiler measures each point's energy per GPU over the point's window (``profiler.telemetry.energy``:
NVML's total-energy counter, or its power samples integrated; RAPL for the host's CPU packages) and stores
it in the point's telemetry (``tel_<device>_energy_j``). Here it is divided by the tokens the engine
processed in that window:

* a decode point's window holds its ``warmup`` and ``repeats`` batches, each ``concurrency`` requests of
  ``prompt_len`` prompt and ``output_len`` output tokens;
* a saturation point's, one batch of ``concurrency`` requests (``output_tokens`` as measured);
* a serve point's, the benchmark client's warm-up and measured requests: the server's own token counters'
  rise over the point where it was sampled, else the measured requests' tokens and the warm-up requests'
  nominal lengths.

Joules per output token count the whole window, prefill included (the energy a served token costs);
joules per prompt token are the same energy over the prompt tokens, for prefill-heavy points. What is
counted (``counted``) is the GPUs' boards, not the host, whose CPU packages (RAPL) are reported beside
them; on a CPU engine, the host's CPU packages are the engine's energy.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd

from analysis.results.load import Results

GPU_SAMPLES = re.compile(r"^tel_(gpu\d+)_samples$")
COLUMNS = ("engine_id", "point_id", "phase", "concurrency", "request_rate", "prompt_len", "output_len",
           "counted", "window_s", "gpus", "energy_j", "energy_above_idle_j", "idle_power_w", "mean_power_w",
           "peak_power_w", "output_tokens", "prompt_tokens", "tokens_from", "j_per_output_token",
           "j_per_prompt_token", "output_tokens_per_j", "above_idle_j_per_output_token", "host_energy_j",
           "method")


def _num(row: pd.Series, col: str) -> float | None:
    v = row.get(col)
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def _tokens(row: pd.Series) -> tuple[float | None, float | None, str]:
    """(output tokens, prompt tokens, where they come from) of one point's window."""
    phase = row.get("phase")
    c, p, o = _num(row, "concurrency"), _num(row, "prompt_len"), _num(row, "output_len")
    if phase == "decode" and None not in (c, p, o):
        batches = (_num(row, "warmup") or 0) + (_num(row, "repeats") or 1)
        return batches * c * o, batches * c * p, f"{batches:g} batches × {c:g} requests"
    if phase == "saturation":
        out = _num(row, "output_tokens")
        return out, None if c is None or p is None else c * p, "one batch (measured output tokens)"
    if phase == "serve":
        gen, prompt = _num(row, "tel_server_generation_tokens"), _num(row, "tel_server_prompt_tokens")
        if gen:
            return gen, prompt, "the server's token counters"
        warm = _num(row, "warmup") or 0
        out, inp = _num(row, "total_output_tokens"), _num(row, "total_input_tokens")
        return (None if out is None else out + warm * (o or 0), None if inp is None else inp + warm * (p or 0),
                "measured requests + warm-up requests' nominal lengths")
    return None, None, "—"


def _point_row(row: pd.Series, gpus: list[str]) -> dict[str, Any]:
    """One point's energy: its GPUs' (every GPU of the engine, or none: a sum over some of them is not the
    engine's energy), or on a CPU engine its host's CPU packages (RAPL)."""
    devices = gpus or ["host"]
    out: dict[str, Any] = {k: row.get(k) for k in ("engine_id", "point_id", "phase", "concurrency", "request_rate",
                                                   "prompt_len", "output_len")}
    out["counted"] = f"{len(gpus)} GPU board(s), NVML" if gpus else "the host's CPU packages, RAPL"
    window = next((w for d in devices if (w := _num(row, f"tel_{d}_window_s"))), None)
    if window is None and _num(row, "finished_at") and _num(row, "started_at"):
        window = float(row["finished_at"]) - float(row["started_at"])
    out["window_s"] = window
    energies = [_num(row, f"tel_{d}_energy_j") for d in devices]
    total = sum(energies) if None not in energies else None  # type: ignore[arg-type]
    out["gpus"] = len(gpus)
    out["energy_j"] = total
    idles = [_num(row, f"tel_{d}_idle_power_w") for d in devices]
    out["idle_power_w"] = sum(idles) if total is not None and None not in idles else None  # type: ignore[arg-type]
    above = [_num(row, f"tel_{d}_energy_above_idle_j") for d in devices]
    out["energy_above_idle_j"] = sum(above) if total is not None and None not in above else None  # type: ignore
    out["mean_power_w"] = total / window if total is not None and window else None
    peaks = [p for g in gpus if (p := _num(row, f"tel_{g}_peak_power_w")) is not None]
    out["peak_power_w"] = max(peaks) if peaks else None  # the highest one GPU drew
    out_tok, prompt_tok, source = _tokens(row)
    out.update(output_tokens=out_tok, prompt_tokens=prompt_tok, tokens_from=source)
    out["j_per_output_token"] = total / out_tok if total is not None and out_tok else None
    out["j_per_prompt_token"] = total / prompt_tok if total is not None and prompt_tok else None
    out["output_tokens_per_j"] = out_tok / total if total and out_tok else None
    ab = out["energy_above_idle_j"]
    out["above_idle_j_per_output_token"] = ab / out_tok if ab is not None and out_tok else None
    out["host_energy_j"] = _num(row, "tel_host_energy_j") if gpus else None
    methods = {str(m) for d in devices if isinstance(m := row.get(f"tel_{d}_energy_method"), str)}
    out["method"] = "; ".join(sorted(methods)) or None
    return out


def energy_table(res: Results) -> pd.DataFrame:
    """One row per point that ran and was sampled: its GPUs' energy over its window, per token (module doc)."""
    frames = [df for df in (res.points, res.serve) if not df.empty]
    rows = []
    for df in frames:
        gpus = sorted({m.group(1) for c in df.columns if (m := GPU_SAMPLES.match(c))}, key=lambda g: int(g[3:]))
        for _, row in df.iterrows():
            if row.get("status") != "ok":
                continue
            engine_gpus = [g for g in gpus if pd.notna(row.get(f"tel_{g}_samples"))]
            if not engine_gpus and pd.isna(row.get("tel_host_energy_method")):
                continue  # not sampled, or sampled by a kvprof that measured no energy
            rows.append(_point_row(row, engine_gpus))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def unavailable_reason(res: Results, table: pd.DataFrame) -> str | None:
    """Why a run has no GPU energy (None where it has some): the reasons its points or engines recorded."""
    if not table.empty and table["energy_j"].notna().any():
        return None
    if not table.empty and table["method"].notna().any():
        return "; ".join(sorted(set(table["method"].dropna())))
    if not table.empty:
        return ("the points were sampled but their records hold no energy (measured by a kvprof before energy "
                "was recorded)")
    reasons = set()
    for df in (res.points, res.serve):
        for col in (c for c in df.columns if c.endswith("_energy_method")):
            reasons |= set(df[col].dropna().astype(str))
    if "telemetry_unavailable" in res.engines:
        for text in res.engines["telemetry_unavailable"].dropna():
            why = json.loads(text)  # the loader's JSON of the engine record's telemetry.unavailable
            reasons |= {f"{k}: {why[k]}" for k in ("nvml", "energy_j", "rapl_energy_j") if k in why}
    return "; ".join(sorted(reasons)) or "no point of this run was sampled"


def measured_power(table: pd.DataFrame) -> dict[str, Any] | None:
    """What a calibration carries of the run's energy (``kvprof plan --calibration``): the draw per GPU (or, on a
    CPU engine, of the CPU packages) at each decode batch measured, its idle draw and how it was measured; None
    where no decode point measured energy."""
    d = table[(table["phase"] == "decode") & table["mean_power_w"].notna() & table["concurrency"].notna()]
    if d.empty:
        return None
    per_device = d["mean_power_w"] / d["gpus"].where(d["gpus"] > 0, 1)
    by_batch = per_device.groupby(d["concurrency"].astype(int)).median().sort_index()
    idle = d["idle_power_w"] / d["gpus"].where(d["gpus"] > 0, 1)
    return {"power_w_by_batch": [[int(b), float(w)] for b, w in by_batch.items()],
            "idle_power_w": None if idle.dropna().empty else float(idle.median()),
            "counted": "; ".join(sorted(set(d["counted"].dropna()))),
            "method": "; ".join(sorted(set(d["method"].dropna()))), "points": len(d)}
