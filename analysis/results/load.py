"""A results directory → tidy pandas tables, through the contract in :mod:`analysis.results.schema`.

Every record (manifest, engine, point) is validated against its model; a record that
does not follow the contract, or cannot be read, stops the load with the file and the
field named (``LoadError``), so a report never shows a silent "—" for a field that was
written wrong. What can be left out while the rest still means what it says is left
out with a warning (``Results.warnings``, each also issued as a ``ResultsWarning``):
a point whose engine record is missing, a telemetry file that cannot be read, a
probe.json or spec.yaml that is not UTF-8 or not the probe's shape, an engine whose
model config is neither stored nor on this machine. Nothing here imports vLLM, torch
or the profiler: the report is rebuilt on any laptop from the directory alone (engine
records keep the model's config.json). Failed points are kept, labelled by status.

Serve mode: ``servers/*.json`` (ServerRecord, refused like an engine record when off the contract) make the
``servers`` table; each serve point that ran is a row of ``serve`` (its settings, every statistic of its
measurements flattened: ``ttft_p50_s``, ``tpot_p99_s``, ``request_goodput``, ``counter_preemptions``,
``tel_server_*``), while ``points`` keeps one row per point record of every phase (a serve point there with its
settings only). A serve point whose engine has a server record but no engine record (a serve-only sweep) is kept.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from analysis.results.schema import (
    SCHEMA_VERSION,
    SERVE_ONLY_FIELDS,
    EngineRecord,
    EngineSettings,
    Manifest,
    ProbeResult,
    ResultsError,
    ServePoint,
    ServerRecord,
    check_telemetry_columns,
    describe_errors,
    load_point,
)

LoadError = ResultsError  # what callers catch: the message names the file and the field
__all__ = ["SCHEMA_VERSION", "LoadError", "Results", "ResultsWarning", "load"]


class ResultsWarning(UserWarning):
    """Something of a results directory left out of its analysis, and why (the rest still holds)."""


@contextmanager
def results_warnings(show: Callable[[str], None]) -> Iterator[None]:
    """Run a command's loads and hand each ResultsWarning they issue to ``show`` (once, in order) when it ends;
    other warnings go on as usual. A body that fails shows none: its error is the one line that matters."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        yield
    for w in caught:
        if issubclass(w.category, ResultsWarning):
            show(str(w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


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
    warnings: list[str] = field(default_factory=list)  # what was left out and why, one line each
    servers: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per OpenAI server (servers/*.json)
    serve: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per serve point that ran (SERVE_COLUMNS)
    server_records: dict[str, ServerRecord] = field(default_factory=dict)
    serve_records: dict[str, ServePoint] = field(default_factory=dict)  # by point id: the per-request lists

    def warn(self, message: str) -> None:
        """Record something left out (and issue it as a ResultsWarning for whoever shows them)."""
        self.warnings.append(message)
        warnings.warn(message, ResultsWarning, stacklevel=2)

    @property
    def synthetic(self) -> bool:
        return bool(self.manifest.get("synthetic"))

    def telemetry(self, columns: list[str] | None = None) -> pd.DataFrame:
        """All engines' samples in one table (read lazily: it can be large)."""
        import pyarrow.parquet as pq

        frames = []
        for eid, path in sorted(self.telemetry_files.items()):
            try:
                have = set(pq.read_schema(path).names)
                wanted = None if columns is None else [c for c in columns if c in have]
                df = pd.read_parquet(path, columns=wanted)
            except (OSError, ValueError) as exc:  # damaged past its footer (pyarrow's errors are both)
                self.warn(_unreadable_telemetry(path, exc))
                del self.telemetry_files[eid]
                continue
            for c in columns or []:  # a signal this file never had is missing, not an error
                if c not in df:
                    df[c] = float("nan")
            df.insert(0, "engine_id", eid)
            frames.append(df)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _unreadable_telemetry(path: Path, exc: Exception) -> str:
    why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{path}: telemetry file cannot be read ({why}); that engine's samples are left out"


def _text(path: Path, what: str, warn: Any) -> str | None:
    """An optional file's UTF-8 text, or None with a warning naming the file and what is left out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        warn(f"{path}: cannot read ({exc.strerror or exc}); {what} left out")
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        warn(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); {what} left out")
        return None


def _probe(path: Path, warn: Any) -> dict[str, Any] | None:
    """probe.json through ProbeResult, or None with a warning (the probe's ceilings are then left out)."""
    what = "the probe's measured ceilings are"
    text = _text(path, what, warn)
    if text is None:
        return None
    try:
        ProbeResult.model_validate_json(text)
    except ValidationError as exc:
        warn(f"{path}: does not follow the ProbeResult contract: {describe_errors(exc, limit=2)}; {what} left out")
        return None
    return json.loads(text)


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
                "max_num_batched_tokens", "max_num_seqs", "async_scheduling", "cache_dtype", "model_dtype",
                "enable_prefix_caching", "mamba_ssm_cache_dtype"):
        row[key] = cap.get(key)
    if row["enable_prefix_caching"] is None:  # records before kvprof read it back: what the sweep asked for
        row["enable_prefix_caching"] = eng.enable_prefix_caching
    log = rec.startup_log.model_dump(exclude={"raw_lines"}) if rec.startup_log else {}
    for key in ("available_kv_bytes", "model_loading_bytes", "cuda_graph_bytes", "cuda_graph_estimate_bytes",
                "peak_activation_bytes", "non_torch_bytes", "weights_bytes_logged", "log_kv_cache_tokens",
                "log_max_concurrency"):
        row[key] = log.get(key)
    row["model_config_json"] = json.dumps(rec.config_json, sort_keys=True) if rec.config_json is not None else None
    tel = rec.telemetry
    row["telemetry_unavailable"] = json.dumps(tel.unavailable, sort_keys=True) if tel else None
    sources = [s for launch in (tel.launches if tel else [])[-1:] for s in _dicts(launch.get("sources"))]
    devices = [d for s in sources for d in _dicts(s.get("devices"))]
    row["gpu_name"] = _str(devices[0].get("name")) if devices else None
    bw = devices[0].get("spec_bandwidth_Bps") if devices else None
    row["spec_bandwidth_Bps"] = float(bw) if isinstance(bw, int | float) and not isinstance(bw, bool) else None
    row["driver"] = next((_str(s.get("driver")) for s in sources if _str(s.get("driver"))), None)
    return row


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The dicts of a free-form list of the telemetry description (anything else in it is ignored)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _flatten(prefix: str, obj: dict[str, Any], out: dict[str, Any]) -> None:
    for k, v in obj.items():
        if isinstance(v, dict):
            _flatten(f"{prefix}{k}_", v, out)
        elif not isinstance(v, list):
            out[f"{prefix}{k}"] = v


def _point_row(rec: Any) -> dict[str, Any]:
    p = rec.point
    serve = p.phase == "serve"
    m = rec.measurements.model_dump() if rec.status == "ok" and not serve else {}
    row: dict[str, Any] = {
        "point_id": rec.id, "engine_id": rec.engine_id, "status": rec.status,
        "error_class": getattr(rec, "error_class", None), "message": getattr(rec, "message", None),
        "phase": p.phase, "prompt_len": p.prompt_len, "output_len": p.output_len,
        "repeats": p.repeats, "warmup": p.warmup, "factor": p.factor,
        "concurrency": m.get("concurrency", p.concurrency),
        "started_at": rec.started_at, "finished_at": rec.finished_at,
    }
    if serve:  # the serve-only settings; the statistics are the serve table's (_serve_row)
        row.update({k: getattr(p, k) for k in SERVE_ONLY_FIELDS})
    scalars = {k: v for k, v in m.items() if not isinstance(v, list | dict)}
    scalars.pop("concurrency", None)
    row.update(scalars)
    if isinstance(m.get("predicted"), dict):
        _flatten("predicted_", m["predicted"], row)
    if rec.telemetry:
        _flatten("tel_", {k: v.model_dump() for k, v in rec.telemetry.items()}, row)
    return row


# Columns every serve table row has (the statistics of ServeMeasurements flattened: ``ttft_p50_s``, ``tpot_p99_s``,
# ``slo_tpot_s``, ``counter_preemptions`` …; the server's /metrics aggregates as ``tel_server_*`` where sampled).
SERVE_SETTINGS = ("concurrency", "request_rate", "burstiness", "num_requests", "prefix_len", "range_ratio",
                  "prompt_len", "output_len", "warmup")
LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATISTICS = ("mean_s", "median_s", "std_s", "p50_s", "p90_s", "p99_s")


def _serve_row(rec: ServePoint) -> dict[str, Any]:
    """One serve point that ran: its settings (``prefix_len`` 0, ``range_ratio`` 0, ``burstiness`` 1 where the
    point left them unset: what the load generator ran), the engine settings it was served with, every statistic
    of its measurements flattened, the counters' rises (``counter_<name>``) and its telemetry (``tel_<device>_*``)."""
    p, m, e = rec.point, rec.measurements, rec.engine
    row: dict[str, Any] = {"point_id": rec.id, "engine_id": rec.engine_id, "status": rec.status,
                           "model": _model_name(e.model_dir), "block_size": e.block_size,
                           "max_model_len": e.max_model_len, "kv_cache_dtype": e.kv_cache_dtype,
                           "tensor_parallel_size": e.tensor_parallel_size,
                           "enable_prefix_caching": e.enable_prefix_caching}
    row.update({k: getattr(p, k) for k in SERVE_SETTINGS})
    row["prefix_len"] = p.prefix_len or 0
    row["range_ratio"] = p.range_ratio or 0.0
    row["burstiness"] = p.burstiness or 1.0
    row["loop"] = "closed" if p.request_rate is None else "open"
    row.update(started_at=rec.started_at, finished_at=rec.finished_at)
    dump = m.model_dump(exclude={"requests", "server_counters", "slo", "errors"})
    _flatten("", dump, row)  # ttft: {p50_s: …} → ttft_p50_s; the scalars under their own name
    for name in ("ttft_s", "tpot_s", "e2el_s"):
        row[f"slo_{name}"] = m.slo.get(name)
    for k, v in m.server_counters.items():
        row[f"counter_{k}"] = v
    row["errors_kept"] = len(m.errors)
    row["requests_kept"] = len(m.requests.ttft_s)
    if rec.telemetry:
        _flatten("tel_", {k: v.model_dump() for k, v in rec.telemetry.items()}, row)
    return row


def _server_row(rec: ServerRecord) -> dict[str, Any]:
    """One OpenAI server: how it came up, its engine settings, the tokenizer it served and its start-up log."""
    e, log, tok = rec.engine, rec.startup_log, rec.tokenizer
    return {"engine_id": rec.id, "status": rec.status, "model": _model_name(e.model_dir),
            "block_size": e.block_size, "max_model_len": e.max_model_len, "kv_cache_dtype": e.kv_cache_dtype,
            "startup_s": rec.startup_s, "ready_at": rec.ready_at, "vllm_version": rec.vllm_version,
            "message": rec.message, "command": " ".join(rec.command) or None,
            "tokenizer_synthetic": tok.synthetic if tok else None, "tokenizer_note": tok.note if tok else None,
            "tokenizer_vocab_size": tok.vocab_size if tok else None,
            "server_max_num_seqs": rec.server_kwargs.get("max_num_seqs"),
            "server_max_num_batched_tokens": rec.server_kwargs.get("max_num_batched_tokens"),
            "server_async_scheduling": rec.server_kwargs.get("async_scheduling"),
            "log_kv_cache_tokens": log.log_kv_cache_tokens if log else None,
            "log_num_gpu_blocks": log.log_num_gpu_blocks if log else None,
            "log_max_num_seqs": log.max_num_seqs if log else None,
            "log_max_num_batched_tokens": log.max_num_batched_tokens if log else None}


def _servers(root: Path) -> dict[str, ServerRecord]:
    """servers/*.json through ServerRecord (LoadError for a record off the contract, as for engine records)."""
    out = {}
    for path in sorted((root / "servers").glob("*.json")):
        rec = ServerRecord.load_file(path)
        if rec.id != path.stem:
            raise LoadError(f"{path}: id: {rec.id!r} does not match the file name")
        out[rec.id] = rec
    return out


def load(root: str | Path) -> Results:
    """Read and validate a whole results directory (LoadError names the first record off-contract; what can be
    left out is, with a warning in ``Results.warnings``)."""
    root = Path(root)
    if not root.is_dir():
        raise LoadError(f"{root}: not a directory{'' if root.exists() else ' (nothing is there)'} — give a "
                        "results directory (the --out of `kvprof sweep`)")
    if not (root / "manifest.json").exists():
        raise LoadError(f"{root}: no manifest.json — not a kvprof results directory")
    manifest = Manifest.load_file(root / "manifest.json")
    res = Results(root=root, manifest=manifest.model_dump(), spec_text=None, engines=pd.DataFrame(),
                  points=pd.DataFrame(), block_rounding=pd.DataFrame(), saturation_timeline=pd.DataFrame(),
                  probe=None)
    engine_recs: dict[str, EngineRecord] = {}
    for path in sorted((root / "engines").glob("*.json")):
        if path.name.endswith(".job.json"):  # schema v1 kept the child's job files here
            continue
        rec = EngineRecord.load_file(path)
        if rec.id != path.stem:
            raise LoadError(f"{path}: id: {rec.id!r} does not match the file name")
        engine_recs[rec.id] = rec
    server_recs = _servers(root)
    if not engine_recs and not server_recs:
        raise LoadError(f"{root}: no engine records (engines/*.json) — no engine of this sweep started yet; "
                        "run or resume it with `kvprof sweep`")
    _check_models(engine_recs.values(), res.warn)
    engines = pd.DataFrame([_engine_row(r) for r in engine_recs.values()])
    rows, timeline, serve_rows = [], [], []
    orphans: dict[str, int] = {}
    paths = sorted((root / "points").glob("*.json"))
    current = {path.stem for path in paths}
    for path in paths:
        try:
            rec = load_point(path)
        except LoadError as exc:
            raise LoadError(f"{exc} — rerun the sweep (it redoes points whose records are off-contract) "
                            "or remove the file") from None
        if rec.id != path.stem:
            raise LoadError(f"{path}: id: {rec.id!r} does not match the file name")
        if rec.id != rec.point.id and rec.point.id in current:
            continue  # an older kvprof's record of a point since rerun under its full id (the rerun's is kept)
        served = rec.point.phase == "serve" and rec.engine_id in server_recs  # a serve-only sweep has no engine
        if rec.engine_id not in engine_recs and not served:
            orphans[rec.engine_id] = orphans.get(rec.engine_id, 0) + 1
            continue
        rows.append(_point_row(rec))
        if isinstance(rec, ServePoint):
            serve_rows.append(_serve_row(rec))
            res.serve_records[rec.id] = rec
        if rec.status == "ok" and rec.point.phase == "saturation" and rec.measurements.timeline:
            m = rec.measurements
            try:
                tl = pd.DataFrame(m.timeline, columns=m.timeline_columns)
            except ValueError as exc:  # rows and column names of different lengths
                raise LoadError(f"{path}: measurements.timeline: rows do not match timeline_columns ({exc}) — "
                                "rerun the sweep or remove the file") from None
            tl.insert(0, "point_id", rec.id)
            tl.insert(1, "concurrency", m.concurrency)
            timeline.append(tl)
    for eid, n in sorted(orphans.items()):
        res.warn(f"{root / 'points'}: {n} point record(s) of engine {eid} left out: its engine record "
                 f"engines/{eid}.json is missing (rerun the sweep to measure that engine again)")
    points = pd.DataFrame(rows)
    if not points.empty and not engines.empty:
        cfg_cols = ["engine_id", "model", "block_size", "max_model_len", "kv_cache_dtype", "num_gpu_blocks",
                    "max_num_seqs", "tensor_parallel_size"]
        points = points.merge(engines[cfg_cols], on="engine_id", how="left")
    rounding = [r.model_dump() | {"engine_id": eid, "block_size": rec.capacity.block_size if rec.capacity else None}
                for eid, rec in engine_recs.items() for r in rec.block_rounding]
    for eid, rec in engine_recs.items():
        if rec.status == "ok" and rec.capacity is not None and rec.capacity.num_gpu_blocks < 2:
            res.warn(f"{root / 'engines' / (eid + '.json')}: vLLM reported {rec.capacity.num_gpu_blocks} KV "
                     "block(s), its null block included: no sequence fits in that engine's pool")
    res.telemetry_files = _telemetry_files(root, res.warn)
    res.spec_text = _text(root / "spec.yaml", "the spec's text is", res.warn)
    res.probe = _probe(root / "probe.json", res.warn)
    res.engines, res.points, res.block_rounding = engines, points, pd.DataFrame(rounding)
    res.saturation_timeline = pd.concat(timeline, ignore_index=True) if timeline else pd.DataFrame()
    res.engine_records = engine_recs
    res.server_records = server_recs
    res.servers = pd.DataFrame([_server_row(r) for r in server_recs.values()])
    res.serve = _with_engine_facts(pd.DataFrame(serve_rows), engines)
    launches = _launches(engine_recs, server_recs)
    for table in (res.points, res.serve):
        if not table.empty:
            table["beside"] = [_beside(launches, r) for r in table.to_dict("records")]
    return res


def _launches(engine_recs: dict[str, EngineRecord],
              server_recs: dict[str, ServerRecord]) -> dict[str, tuple[float, float, list[str]]]:
    """Every launch's span as the sweep's parent saw it (spawn to exit) and its devices: 'engine <id>' and
    'server <id>'."""
    out = {}
    for kind, recs in (("engine", engine_recs), ("server", server_recs)):
        for eid, rec in recs.items():
            if rec.process is not None:
                out[f"{kind} {eid}"] = (rec.process.launched_at, rec.process.exited_at, rec.devices)
    return out


def _beside(launches: dict[str, tuple[float, ...]], row: dict[str, Any]) -> str:
    """The other launches that ran on the same machine while a point was measured (engines side by side,
    `--devices` or `--ray`): '' when none, else their names joined by ', '. A point's own launch is its
    engine's, or its server's."""
    from analysis.results.schema import same_host

    start, end = row.get("started_at"), row.get("finished_at")
    if start is None or end is None or pd.isna(start) or pd.isna(end):
        return ""
    own = f"{'server' if row.get('loop') in ('closed', 'open') or row.get('phase') == 'serve' else 'engine'} " \
          f"{row['engine_id']}"
    mine = launches[own][2] if own in launches and len(launches[own]) > 2 else []
    return ", ".join(sorted(name for name, (a, b, *dev) in launches.items() if name != own and a < end and start < b
                            and same_host(mine, dev[0] if dev else [])))


def _with_engine_facts(serve: pd.DataFrame, engines: pd.DataFrame) -> pd.DataFrame:
    """The serve table with the offline engine's block count and max_num_seqs, where an engine record exists."""
    if serve.empty:
        return serve
    facts = ["num_gpu_blocks", "max_num_seqs"]
    if engines.empty:
        return serve.assign(**{c: None for c in facts})
    return serve.merge(engines[["engine_id", *facts]], on="engine_id", how="left")


def _telemetry_files(root: Path, warn: Any) -> dict[str, Path]:
    """Readable telemetry files by engine id (an unreadable one is left out with a warning; one whose
    columns are off the contract is a LoadError, like any record written wrong)."""
    import pyarrow.parquet as pq

    out = {}
    for path in sorted((root / "telemetry").glob("*.parquet")):
        if path.name.endswith(".partial.parquet"):
            continue
        try:
            names = pq.read_schema(path).names
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            warn(_unreadable_telemetry(path, exc))
            continue
        check_telemetry_columns(path, names)
        out[path.stem] = path
    return out


def _check_models(recs: Any, warn: Any) -> None:
    """Warn, once per model directory, where ok engines' architecture can come from nowhere: no stored
    config.json (records written before kvprof kept it), no config at their model_dir on this machine, and
    not a catalog name."""
    from analysis.catalog import UnknownName, model_dir

    missing: dict[str, list[str]] = {}
    for rec in recs:
        if rec.status != "ok" or rec.config_json is not None:
            continue
        where = Path(rec.engine.model_dir)
        if (where / "config.json").is_file() or (where.suffix == ".json" and where.is_file()):
            continue
        try:
            model_dir(where.name)
            continue
        except (UnknownName, OSError, ValueError):
            missing.setdefault(rec.engine.model_dir, []).append(rec.id)
    for where_ran, ids in missing.items():
        warn(f"{len(ids)} engine record(s) ({ids[0]}{', …' if len(ids) > 1 else ''}) keep no copy of the model's "
             f"config.json (written before kvprof stored it) and {where_ran} is not on this machine: their "
             "predictions are left out (copy the model directory there)")
