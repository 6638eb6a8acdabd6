"""A results directory → tidy pandas tables, through the contract in :mod:`analysis.results_schema`.

Every file is validated against its model; a file that does not follow the
contract stops the load with the file and the field named (``LoadError``), so a
report never shows a silent "—" for a field that was written wrong. Nothing
here imports vLLM, torch or the profiler: the report is rebuilt on any laptop
from the directory alone. Failed points are kept, labelled by status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.results_schema import (
    SCHEMA_VERSION,
    EngineRecord,
    EngineSettings,
    Manifest,
    ResultsError,
    check_telemetry_columns,
    load_point,
)

LoadError = ResultsError  # what callers catch: the message names the file and the field
__all__ = ["SCHEMA_VERSION", "LoadError", "Results", "load"]


@dataclass
class Results:
    """A loaded results directory: the validated records as tables (and the records themselves)."""

    root: Path
    manifest: dict[str, Any]
    spec_text: str | None
    engines: pd.DataFrame  # one row per engine
    points: pd.DataFrame  # one row per point, ok or failed
    block_rounding: pd.DataFrame  # measured KV usage for known sequence lengths
    saturation_timeline: pd.DataFrame  # per-step running/waiting/usage/preemptions
    probe: dict[str, Any] | None
    telemetry_files: dict[str, Path] = field(default_factory=dict)
    engine_records: dict[str, EngineRecord] = field(default_factory=dict)

    @property
    def synthetic(self) -> bool:
        return bool(self.manifest.get("synthetic"))

    def telemetry(self, columns: list[str] | None = None) -> pd.DataFrame:
        """All engines' samples in one table (read lazily: it can be large)."""
        import pyarrow.parquet as pq

        frames = []
        for eid, path in sorted(self.telemetry_files.items()):
            have = set(pq.read_schema(path).names)
            wanted = None if columns is None else [c for c in columns if c in have]
            df = pd.read_parquet(path, columns=wanted)
            for c in columns or []:  # a signal this file never had is missing, not an error
                if c not in df:
                    df[c] = float("nan")
            df.insert(0, "engine_id", eid)
            frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _model_name(model_dir: str | None) -> str | None:
    return None if not model_dir else Path(model_dir).name


SETTINGS_COLUMNS = {  # engine settings that keep their own column name in the engine table
    "kv_cache_dtype", "kv_cache_memory_bytes", "gpu_memory_utilization", "tensor_parallel_size"}


def _mode_text(m: Any) -> str:
    """How vLLM ran an engine, in one line (the report's environment table)."""
    parts = [f"async scheduling {'on' if m.async_scheduling else 'off'}",
             f"engine core {'in its own process' if m.multiprocessing else 'in-process'}"]
    named = (("model runner", m.model_runner), ("CUDA graphs", m.cudagraph_mode),
             ("compilation", m.compilation_mode), ("platform", m.platform))
    parts += [f"{label} {value}" for label, value in named if value is not None]
    if m.enforce_eager:
        parts.append("eager")
    return ", ".join(parts)


def _engine_row(rec: EngineRecord) -> dict[str, Any]:
    """One engine: every requested setting (``requested_<name>``, and the ones in SETTINGS_COLUMNS
    under their own name), each swept or fixed engine argument (``engine_arg_<name>``), vLLM's
    capacity facts, its start-up log numbers and the telemetry devices."""
    eng = rec.engine
    row: dict[str, Any] = {
        "engine_id": rec.id,
        "status": rec.status,
        "model": _model_name(eng.model_dir),
        "model_dir": eng.model_dir,
        "device": rec.device,
        "device_memory_bytes": rec.device_memory_bytes,
        "vllm_version": rec.vllm_version,
        "torch_version": rec.torch_version,
        "startup_s": rec.startup_s,
        "message": rec.message,
        "tested_vllm_version": rec.engine_mode.tested_vllm_version if rec.engine_mode else None,
        "engine_mode": _mode_text(rec.engine_mode) if rec.engine_mode else None,
    }
    for name in EngineSettings.model_fields:
        if name == "engine_args":
            continue
        value = getattr(eng, name)
        row[f"requested_{name}"] = value
        if name in SETTINGS_COLUMNS:
            row[name] = value
    for key, value in eng.engine_args.items():
        row[f"engine_arg_{key}"] = value if value is None or isinstance(value, bool | int | float | str) \
            else json.dumps(value, sort_keys=True)
    cap = rec.capacity.model_dump() if rec.capacity else {}
    for key in ("num_gpu_blocks", "block_size", "kv_cache_size_tokens", "kv_cache_max_concurrency", "max_model_len",
                "max_num_batched_tokens", "max_num_seqs", "async_scheduling", "cache_dtype", "model_dtype"):
        row[key] = cap.get(key)
    log = rec.startup_log.model_dump(exclude={"raw_lines"}) if rec.startup_log else {}
    for key in ("available_kv_bytes", "model_loading_bytes", "cuda_graph_bytes", "cuda_graph_estimate_bytes",
                "peak_activation_bytes", "non_torch_bytes", "weights_bytes_logged", "log_kv_cache_tokens",
                "log_max_concurrency"):
        row[key] = log.get(key)
    tel = rec.telemetry
    row["telemetry_unavailable"] = json.dumps(tel.unavailable, sort_keys=True) if tel else None
    launches = tel.launches if tel else []
    devices = [d for launch in launches[-1:] for s in launch.get("sources", []) for d in s.get("devices", [])]
    row["gpu_name"] = devices[0].get("name") if devices else None
    row["spec_bandwidth_Bps"] = devices[0].get("spec_bandwidth_Bps") if devices else None
    row["driver"] = next((s.get("driver") for launch in launches[-1:] for s in launch.get("sources", [])
                          if s.get("driver")), None)
    return row


def _flatten(prefix: str, obj: dict[str, Any], out: dict[str, Any]) -> None:
    for k, v in obj.items():
        if isinstance(v, dict):
            _flatten(f"{prefix}{k}_", v, out)
        elif not isinstance(v, list):
            out[f"{prefix}{k}"] = v


def _point_row(rec: Any) -> dict[str, Any]:
    p = rec.point
    m = rec.measurements.model_dump() if rec.status == "ok" else {}
    row: dict[str, Any] = {
        "point_id": rec.id, "engine_id": rec.engine_id, "status": rec.status,
        "error_class": getattr(rec, "error_class", None), "message": getattr(rec, "message", None),
        "phase": p.phase, "prompt_len": p.prompt_len, "output_len": p.output_len,
        "repeats": p.repeats, "factor": p.factor,
        "concurrency": m.get("concurrency", p.concurrency),
        "started_at": rec.started_at, "finished_at": rec.finished_at,
    }
    scalars = {k: v for k, v in m.items() if not isinstance(v, list | dict)}
    scalars.pop("concurrency", None)
    row.update(scalars)
    if isinstance(m.get("predicted"), dict):
        _flatten("predicted_", m["predicted"], row)
    if rec.telemetry:
        _flatten("tel_", {k: v.model_dump() for k, v in rec.telemetry.items()}, row)
    return row


def load(root: str | Path) -> Results:
    """Read and validate a whole results directory (LoadError names the first file off-contract)."""
    root = Path(root)
    if not root.is_dir():
        raise LoadError(f"{root}: not a directory")
    if not (root / "manifest.json").exists():
        raise LoadError(f"{root}: no manifest.json — not a kvprof results directory")
    manifest = Manifest.load_file(root / "manifest.json")
    engine_recs: dict[str, EngineRecord] = {}
    for path in sorted((root / "engines").glob("*.json")):
        if path.name.endswith(".job.json"):  # schema v1 kept the child's job files here
            continue
        rec = EngineRecord.load_file(path)
        if rec.id != path.stem:
            raise LoadError(f"{path}: id: {rec.id!r} does not match the file name")
        engine_recs[rec.id] = rec
    engines = pd.DataFrame([_engine_row(r) for r in engine_recs.values()])
    rows, timeline = [], []
    for path in sorted((root / "points").glob("*.json")):
        try:
            rec = load_point(path)
        except LoadError as exc:
            raise LoadError(f"{exc} — rerun the sweep (it redoes points whose records are off-contract) "
                            "or remove the file") from None
        if rec.id != path.stem:
            raise LoadError(f"{path}: id: {rec.id!r} does not match the file name")
        rows.append(_point_row(rec))
        if rec.status == "ok" and rec.point.phase == "saturation" and rec.measurements.timeline:
            m = rec.measurements
            tl = pd.DataFrame(m.timeline, columns=m.timeline_columns)
            tl.insert(0, "point_id", rec.id)
            tl.insert(1, "concurrency", m.concurrency)
            timeline.append(tl)
    points = pd.DataFrame(rows)
    if not points.empty and not engines.empty:
        cfg_cols = ["engine_id", "model", "block_size", "max_model_len", "kv_cache_dtype", "num_gpu_blocks",
                    "max_num_seqs", "tensor_parallel_size"]
        points = points.merge(engines[cfg_cols], on="engine_id", how="left")
    rounding = [r.model_dump() | {"engine_id": eid, "block_size": rec.capacity.block_size if rec.capacity else None}
                for eid, rec in engine_recs.items() for r in rec.block_rounding]
    telemetry_files = {p.stem: p for p in sorted((root / "telemetry").glob("*.parquet"))
                       if not p.name.endswith(".partial.parquet")}
    if telemetry_files:
        import pyarrow.parquet as pq

        for path in telemetry_files.values():
            check_telemetry_columns(path, pq.read_schema(path).names)
    spec_path = root / "spec.yaml"
    return Results(
        root=root, manifest=manifest.model_dump(), spec_text=spec_path.read_text() if spec_path.exists() else None,
        engines=engines, points=points, block_rounding=pd.DataFrame(rounding),
        saturation_timeline=pd.concat(timeline, ignore_index=True) if timeline else pd.DataFrame(),
        probe=_read(root / "probe.json"), telemetry_files=telemetry_files, engine_records=engine_recs,
    )
