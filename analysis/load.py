"""A results directory (DESIGN.md §4, schema v1) → tidy pandas tables.

Nothing here imports vLLM, torch or the profiler: the report is rebuilt on any
laptop from the directory alone. Failed points are kept, labelled by status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

SCHEMA_VERSION = 1


class LoadError(ValueError):
    """Not a results directory kvprof can read (the message says why)."""


@dataclass
class Results:
    root: Path
    manifest: dict[str, Any]
    spec_text: str | None
    engines: pd.DataFrame  # one row per engine
    points: pd.DataFrame  # one row per point, ok or failed
    block_rounding: pd.DataFrame  # measured KV usage for known sequence lengths
    saturation_timeline: pd.DataFrame  # per-step running/waiting/usage/preemptions
    probe: dict[str, Any] | None
    telemetry_files: dict[str, Path] = field(default_factory=dict)
    engine_records: dict[str, dict[str, Any]] = field(default_factory=dict)

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


def _engine_row(rec: dict[str, Any]) -> dict[str, Any]:
    eng = rec.get("engine") or {}
    cap = rec.get("capacity") or {}
    log = rec.get("startup_log") or {}
    row = {
        "engine_id": rec.get("id") or rec.get("engine_id"),
        "status": rec.get("status"),
        "model": _model_name(eng.get("model_dir")),
        "model_dir": eng.get("model_dir"),
        "device": rec.get("device"),
        "vllm_version": rec.get("vllm_version"),
        "torch_version": rec.get("torch_version"),
        "startup_s": rec.get("startup_s"),
        "requested_block_size": eng.get("block_size"),
        "requested_max_model_len": eng.get("max_model_len"),
        "kv_cache_dtype": eng.get("kv_cache_dtype"),
        "kv_cache_memory_bytes": eng.get("kv_cache_memory_bytes"),
        "gpu_memory_utilization": eng.get("gpu_memory_utilization"),
        "tensor_parallel_size": eng.get("tensor_parallel_size"),
        "message": rec.get("message"),
    }
    for key in ("num_gpu_blocks", "block_size", "kv_cache_size_tokens", "kv_cache_max_concurrency", "max_model_len",
                "max_num_batched_tokens", "max_num_seqs", "async_scheduling", "cache_dtype", "model_dtype"):
        row[key] = cap.get(key)
    for key in ("available_kv_bytes", "model_loading_bytes", "cuda_graph_bytes", "cuda_graph_estimate_bytes",
                "peak_activation_bytes", "non_torch_bytes", "weights_bytes_logged", "log_kv_cache_tokens",
                "log_max_concurrency", "gpu_total_bytes"):
        row[key] = log.get(key, rec.get(key))
    tel = rec.get("telemetry") or {}
    row["telemetry_unavailable"] = json.dumps(tel.get("unavailable", {}), sort_keys=True) if tel else None
    launches = tel.get("launches") or []
    devices = [d for launch in launches[-1:] for s in launch.get("sources", []) for d in s.get("devices", [])]
    row["gpu_name"] = devices[0]["name"] if devices else None
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


def _point_row(rec: dict[str, Any]) -> dict[str, Any]:
    p = rec.get("point") or {}
    m = rec.get("measurements") or {}
    row: dict[str, Any] = {
        "point_id": rec.get("id"), "engine_id": rec.get("engine_id"), "status": rec.get("status"),
        "error_class": rec.get("error_class"), "message": rec.get("message"),
        "phase": p.get("phase"), "prompt_len": p.get("prompt_len"), "output_len": p.get("output_len"),
        "repeats": p.get("repeats"), "factor": p.get("factor"),
        "concurrency": m.get("concurrency", p.get("concurrency")),
        "started_at": rec.get("started_at"), "finished_at": rec.get("finished_at"),
    }
    scalars = {k: v for k, v in m.items() if not isinstance(v, list | dict)}
    scalars.pop("concurrency", None)
    row.update(scalars)
    if isinstance(m.get("predicted"), dict):
        _flatten("predicted_", m["predicted"], row)
    if isinstance(rec.get("telemetry"), dict):
        _flatten("tel_", rec["telemetry"], row)
    return row


def load(root: str | Path) -> Results:
    root = Path(root)
    if not root.is_dir():
        raise LoadError(f"{root}: not a directory")
    manifest = _read(root / "manifest.json")
    if manifest is None:
        raise LoadError(f"{root}: no readable manifest.json — not a kvprof results directory")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise LoadError(f"{root}: results schema version {version!r}; this kvprof reads version {SCHEMA_VERSION}")
    engine_recs: dict[str, dict[str, Any]] = {}
    for path in sorted((root / "engines").glob("*.json")):
        if path.name.endswith(".job.json"):
            continue
        rec = _read(path)
        if rec is not None:
            engine_recs[rec.get("id") or path.stem] = rec
    engines = pd.DataFrame([_engine_row(r) for r in engine_recs.values()])
    rows, timeline = [], []
    for path in sorted((root / "points").glob("*.json")):
        rec = _read(path)
        if rec is None:
            rows.append({"point_id": path.stem, "status": "corrupt", "message": "unreadable record"})
            continue
        rows.append(_point_row(rec))
        m = rec.get("measurements") or {}
        if m.get("timeline"):
            tl = pd.DataFrame(m["timeline"], columns=m["timeline_columns"])
            tl.insert(0, "point_id", rec["id"])
            tl.insert(1, "concurrency", m.get("concurrency"))
            timeline.append(tl)
    points = pd.DataFrame(rows)
    if not points.empty and not engines.empty:
        cfg_cols = ["engine_id", "model", "block_size", "max_model_len", "kv_cache_dtype", "num_gpu_blocks",
                    "max_num_seqs", "tensor_parallel_size"]
        points = points.merge(engines[cfg_cols], on="engine_id", how="left")
    rounding = [dict(r, engine_id=eid, block_size=(rec.get("capacity") or {}).get("block_size"))
                for eid, rec in engine_recs.items() for r in rec.get("block_rounding") or []]
    spec_path = root / "spec.yaml"
    return Results(
        root=root, manifest=manifest, spec_text=spec_path.read_text() if spec_path.exists() else None,
        engines=engines, points=points, block_rounding=pd.DataFrame(rounding),
        saturation_timeline=pd.concat(timeline, ignore_index=True) if timeline else pd.DataFrame(),
        probe=_read(root / "probe.json"),
        telemetry_files={p.stem: p for p in sorted((root / "telemetry").glob("*.parquet"))
                         if not p.name.endswith(".partial.parquet")},
        engine_records=engine_recs,
    )
