"""The spec expanded into a plan: the grid's size counted from the axes before anything is expanded and held to its
limits (check_grid), engine configurations and their points, and the combinations dropped with the reason (expand,
dropped_summary).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from analysis.catalog import WEIGHT_SUFFIXES
from analysis.results.schema import CLIENT_FLAGS, Dropped
from profiler.spec.jobs import EngineConfig, Point
from profiler.spec.lines import yaml_line
from profiler.spec.sweep_spec import MAX_SPEC_VALUES, EngineAxes, SaturationAxes, ServeAxes, SpecError, SweepSpec


class Plan(BaseModel):
    """A spec expanded: one EngineConfig per engine launch, its points, and what was dropped and why."""

    spec: SweepSpec
    engines: list[EngineConfig]
    points: dict[str, list[Point]]  # engine id → points
    dropped: list[Dropped]

    @property
    def num_points(self) -> int:
        return sum(len(p) for p in self.points.values())


DROPPED_LISTED = 10  # dropped combinations listed one by one without -v; more are counted by reason


def _reason_kind(reason: str) -> str:
    """A dropped combination's reason without its numbers: what groups them in a summary."""
    return re.sub(r"\d[\d,._]*", "N", reason)


def dropped_summary(dropped: list[Dropped], complete: bool = False) -> dict[str, Any]:
    """What validate and the dry run say about dropped combinations: their count, the count per kind of
    reason, and every one of them (``complete``, or when there are few) or else the first of each kind."""
    by_kind: dict[str, list[Dropped]] = {}
    for d in dropped:
        by_kind.setdefault(_reason_kind(d.reason), []).append(d)
    complete = complete or len(dropped) <= DROPPED_LISTED
    return {"dropped_count": len(dropped),
            "dropped_by_reason": {k: len(v) for k, v in by_kind.items()},
            "dropped": dropped if complete else [v[0] for v in by_kind.values()],
            "dropped_complete": complete}


def model_fingerprint(model_dir: Path, weights: str) -> str:
    """sha256 of the model's config.json *contents* (canonical JSON), plus, with real weights,
    the weight files' names and sizes: what identifies the model, wherever it is installed."""
    config = json.loads((model_dir / "config.json").read_text())
    content: dict[str, Any] = {"config": config}
    if weights == "real":
        content["weight_files"] = sorted(
            (p.name, p.stat().st_size) for p in model_dir.iterdir()
            if p.suffix in WEIGHT_SUFFIXES or p.name.endswith(".index.json"))
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


# How large a grid may be. A spec of a few lines can ask for 10⁹ points (an extra zero, a range pasted
# as a list); the sizes are counted from the axes and a grid over the caps is refused before `expand`
# allocates anything. The defaults are what a GPU could run in about a week:
# - engines: every launch costs 23 s (enforce_eager) to ~86 s (torch.compile and CUDA graphs) of start-up
#   before its first point (analysis/planning/sweep_cost.py, from published vLLM logs): 10,000 launches are 2.7 to
#   10 days of start-ups alone.
# - points: a decode point at the defaults (3 repeats + 1 warm-up of 64 tokens) is ~260 engine steps,
#   ~1 to 6 s at the 4 to 20 ms of a decode step of a small to 8B model: 100,000 points are one to seven
#   days. Points are combinations before the ones that do not fit are dropped (each is allocated as a
#   point or a dropped record, and the manifest keeps every dropped one).
# - engine_args: every engine carries its own copy and its id hashes all of it, so the values of engine_args
#   (and of the largest swept combination) count once per engine: 100 per engine at the engine cap (vLLM's
#   LLM takes ~150 arguments; a compilation_config with its capture sizes is a few hundred values).
# At the caps, `kvprof validate` and `sweep --dry-run` take seconds and a few hundred MB
# (benchmarks/hostile_inputs.py); `--max-engines` / `--max-points` raise them for a run that needs more.
MAX_ENGINES = 10_000


MAX_POINTS = 100_000


ENGINE_ARG_VALUES_PER_ENGINE = 100


class GridLimits(BaseModel):
    """How large a grid `expand` accepts (``--max-engines`` / ``--max-points`` of validate and sweep)."""

    model_config = ConfigDict(frozen=True)

    max_engines: int = Field(MAX_ENGINES, ge=1)
    max_points: int = Field(MAX_POINTS, ge=1)

    @property
    def max_engine_arg_values(self) -> int:
        return self.max_engines * ENGINE_ARG_VALUES_PER_ENGINE


_GRID_LIMITS: ContextVar[GridLimits | None] = ContextVar("kvprof_grid_limits", default=None)


@contextmanager
def grid_limits(limits: GridLimits) -> Iterator[GridLimits]:
    """Within the block, `load_spec` and `expand` accept grids up to ``limits`` (the CLI's override)."""
    token = _GRID_LIMITS.set(limits)
    try:
        yield limits
    finally:
        _GRID_LIMITS.reset(token)


class GridSize(BaseModel):
    """A spec's grid counted from its axes, before anything is expanded (the values of each axis)."""

    engine_axes: dict[str, int]  # "engine.<axis>" → values
    engine_arg_combinations: int  # engine_args_sweep's combinations (1 when nothing is swept)
    decode_axes: dict[str, int]  # "workload.<axis>" → values; empty without the decode phase
    saturation_levels: int  # saturation.concurrency or .factors; 0 without the saturation phase
    serve_axes: dict[str, int] = {}  # "serve.<axis>" → values; empty without the serve phase
    served_engines: int = 0  # engines the serve phase runs on (serve.engines filters them)
    engine_arg_values: int  # values of engine_args plus the largest swept combination

    @property
    def engines(self) -> int:
        """Engine launches (an upper bound: a combination listed twice is one engine)."""
        return math.prod(self.engine_axes.values()) * self.engine_arg_combinations

    @property
    def serve_points_per_engine(self) -> int:
        return math.prod(self.serve_axes.values()) if self.serve_axes else 0

    @property
    def points_per_engine(self) -> int:
        """Decode and saturation points of every engine, and serve points of a served one."""
        return ((math.prod(self.decode_axes.values()) if self.decode_axes else 0) + self.saturation_levels
                + self.serve_points_per_engine)

    @property
    def points(self) -> int:
        """Points before the combinations that do not fit an engine are dropped."""
        offline = self.points_per_engine - self.serve_points_per_engine
        return self.engines * offline + self.served_engines * self.serve_points_per_engine


def _count_values(obj: Any, limit: int) -> int:
    """Scalars, keys and containers in a parsed YAML value, aliases counted each time they are used
    (as a copy and a digest see them); past ``limit`` it stops and answers more than ``limit``."""
    total = 0
    on_path: set[int] = set()  # a self-referencing YAML node (&a [*a]) counts once

    def walk(x: Any) -> None:
        nonlocal total
        total += 1
        if total > limit:
            raise OverflowError
        if isinstance(x, dict | list) and id(x) not in on_path:
            on_path.add(id(x))
            total += len(x) if isinstance(x, dict) else 0  # the keys
            for v in x.values() if isinstance(x, dict) else x:
                walk(v)
            on_path.discard(id(x))

    try:
        walk(obj)
    except (OverflowError, RecursionError):
        return max(total, limit + 1)
    return total


def grid_size(spec: SweepSpec) -> GridSize:
    """Count the grid from the lengths of its axes: nothing is expanded."""
    sweep = spec.engine_args_sweep
    if sweep is None:
        combos, largest = 1, {}
    elif isinstance(sweep, dict):
        combos = math.prod(len(v) for v in sweep.values())
        largest = {k: max(vals, key=lambda x: _count_values(x, MAX_SPEC_VALUES)) for k, vals in sweep.items()}
    else:
        combos, largest = len(sweep), max(sweep, key=lambda c: _count_values(c, MAX_SPEC_VALUES))
    w, sat = spec.workload, spec.saturation
    return GridSize(
        engine_axes={f"engine.{n}": len(getattr(spec.engine, n)) for n in EngineAxes.model_fields},
        engine_arg_combinations=combos,
        decode_axes={f"workload.{n}": len(getattr(w, n)) for n in ("concurrency", "prompt_len", "output_len")}
        if "decode" in spec.phases else {},
        saturation_levels=(len(sat.concurrency if sat.concurrency is not None else sat.factors)
                           if "saturation" in spec.phases else 0),
        serve_axes={"serve.levels": spec.serve.levels, **{
            f"serve.{n}": len(getattr(spec.serve, n)) for n in ("prompt_len", "output_len", "prefix_fraction")}}
        if "serve" in spec.phases else {},
        served_engines=combos * math.prod(
            len([v for v in getattr(spec.engine, n) if n not in spec.serve.engines or v in spec.serve.engines[n]])
            for n in EngineAxes.model_fields) if "serve" in spec.phases else 0,
        engine_arg_values=_count_values(spec.engine_args, MAX_SPEC_VALUES) - 1
        + (_count_values(largest, MAX_SPEC_VALUES) - 1 if largest else 0))


def _product(sizes: dict[str, int]) -> str:
    """'engine.max_model_len 100 × engine.block_size 2' (axes of one value left out)."""
    many = [f"{k} {v:,}" for k, v in sizes.items() if v != 1]
    return " × ".join(many) if many else "1"


def check_grid(spec: SweepSpec, limits: GridLimits | None = None, source: str = "spec",
               lines: dict[tuple[Any, ...], int] | None = None) -> GridSize:
    """The grid's size, or SpecError (every cap it exceeds, with its axes and sizes, the total and the
    option that raises the cap) for a grid over ``limits`` (default: `grid_limits`, else `GridLimits()`)."""
    limits = limits or _GRID_LIMITS.get() or GridLimits()
    g = grid_size(spec)
    swept = {"engine_args_sweep": g.engine_arg_combinations}
    engine_axes = g.engine_axes | swept
    problems = []

    def add(axes: dict[str, int], message: str) -> None:
        biggest = max(axes, key=lambda k: axes[k]) if axes else "phases"
        loc = tuple(biggest.split("."))
        line = yaml_line(lines or {}, loc)
        problems.append(f"{source}{f':{line}' if line else ''}: {biggest}: {message}")

    if g.engines > limits.max_engines:
        add(engine_axes, f"{g.engines:,} engines ({_product(engine_axes)}), more than the {limits.max_engines:,} "
                         f"allowed; narrow an axis, or allow them with --max-engines {g.engines}")
    if g.points > limits.max_points:
        parts = ([f"{_product(g.decode_axes)} decode"] if g.decode_axes else []) + (
            [f"{g.saturation_levels:,} saturation"] if g.saturation_levels else [])
        offline = g.points_per_engine - g.serve_points_per_engine
        each = (f"{g.engines:,} engines × {offline:,} each: {' + '.join(parts)}" if parts else "")
        if g.serve_axes:
            each += ("; " if each else "") + (f"{g.served_engines:,} served engines × {g.serve_points_per_engine:,} "
                                              f"serve each: {_product(g.serve_axes)}")
        add(g.decode_axes | g.serve_axes | engine_axes | {"saturation": g.saturation_levels},
            f"{g.points:,} points ({each}; "
            f"counted before combinations that do not fit are dropped), more than the {limits.max_points:,} "
            f"allowed; narrow an axis, or allow them with --max-points {g.points}")
    if g.engines * g.engine_arg_values > limits.max_engine_arg_values:
        need = -(-g.engines * g.engine_arg_values // ENGINE_ARG_VALUES_PER_ENGINE)
        add({"engine_args": 1}, f"{g.engine_arg_values:,} values per engine × {g.engines:,} engines = "
                                f"{g.engines * g.engine_arg_values:,}, more than the {limits.max_engine_arg_values:,} "
                                f"allowed ({ENGINE_ARG_VALUES_PER_ENGINE} per engine of --max-engines "
                                f"{limits.max_engines}); fewer engines or engine_args, or --max-engines {need}")
    if problems:
        raise SpecError("\n".join(problems))
    return g


def expand(spec: SweepSpec, limits: GridLimits | None = None) -> Plan:
    """Cartesian product of the engine axes (every field of EngineAxes, and every swept
    engine argument) → engines (one launch each) and their workload points.

    Refuses (SpecError) a grid over ``limits`` (default: the ones `grid_limits` set, else `GridLimits()`)
    from its arithmetic size, before anything is allocated."""
    from analysis.catalog import resolve_model

    check_grid(spec, limits)
    # A relative model path is the spec's (analysis.catalog.model_path: precedence of paths and catalog
    # names); model_dir records the absolute directory vLLM is given, and ids hash its config, not the path.
    _, model_dir = resolve_model(spec.model, spec._base_dir)
    model_dir = Path(model_dir)
    common = {"model_dir": str(model_dir), "model_sha256": model_fingerprint(model_dir, spec.weights),
              "weights": spec.weights, "dtype": spec.dtype, "seed": spec.seed}
    engines: list[EngineConfig] = []
    seen: dict[str, list[EngineConfig]] = {}  # engine id → configs with it (equal ones are one engine)
    points: dict[str, list[Point]] = {}
    dropped: list[Dropped] = []
    w = spec.workload
    names = list(EngineAxes.model_fields)
    grid = itertools.product(itertools.product(*(getattr(spec.engine, n) for n in names)),
                             spec.engine_arg_combinations())
    for values, args in grid:
        cfg = EngineConfig(**common, **dict(zip(names, values, strict=True)), engine_args=args)
        mml, seqs = cfg.max_model_len, cfg.max_num_seqs
        eid = cfg.id  # a digest: computed once per engine, not once per point
        same = seen.setdefault(eid, [])
        if cfg in same:
            continue  # a combination listed twice: one engine
        same.append(cfg)
        engines.append(cfg)
        pts: list[Point] = []
        if "decode" in spec.phases:
            for c, p, o in itertools.product(w.concurrency, w.prompt_len, w.output_len):
                what = f"decode c={c} prompt={p} output={o}"
                if p + o > mml:
                    dropped.append(Dropped(engine_id=eid, what=what,
                                           reason=f"prompt_len + output_len = {p + o} > max_model_len {mml}"))
                    continue
                if seqs is not None and c > seqs:
                    dropped.append(Dropped(engine_id=eid, what=what,
                                           reason=f"concurrency {c} > max_num_seqs {seqs}"))
                    continue
                pts.append(Point(engine_id=eid, phase="decode", concurrency=c, prompt_len=p,
                                 output_len=o, repeats=w.repeats, warmup=w.warmup))
        if "saturation" in spec.phases:
            pts.extend(_saturation_points(spec.saturation, cfg, dropped))
        if "serve" in spec.phases and spec.serve.serves(cfg):
            pts.extend(_serve_points(spec.serve, cfg, dropped))
        points[eid] = pts
    return Plan(spec=spec, engines=engines, points=points, dropped=dropped)


def _saturation_points(sat: SaturationAxes, cfg: EngineConfig, dropped: list[Dropped]) -> list[Point]:
    p = sat.prompt_len or cfg.max_model_len // 2
    o = sat.output_len
    if p + o > cfg.max_model_len:
        dropped.append(Dropped(engine_id=cfg.id, what=f"saturation prompt={p} output={o}",
                               reason=f"prompt_len + output_len = {p + o} > max_model_len {cfg.max_model_len}"))
        return []
    common = {"engine_id": cfg.id, "phase": "saturation", "prompt_len": p, "output_len": o, "repeats": 1,
              "warmup": 0}
    if sat.concurrency is not None:
        return [Point(concurrency=c, **common) for c in sat.concurrency]
    return [Point(concurrency=None, factor=f, **common) for f in sat.factors]


def _serve_points(serve: ServeAxes, cfg: EngineConfig, dropped: list[Dropped]) -> list[Point]:
    """One point per concurrency level and per request rate, for each prompt_len × output_len × prefix_fraction.
    A combination whose longest request (lengths × (1 + range_ratio)) passes max_model_len is dropped: vLLM
    would refuse those requests."""
    pts = []
    r = serve.range_ratio
    levels = [(c, None) for c in serve.concurrency] + [(serve.max_concurrency, rate) for rate in serve.request_rate]
    for p, o, frac in itertools.product(serve.prompt_len, serve.output_len, serve.prefix_fraction):
        longest_p, longest_o = math.floor(p * (1 + r)), math.floor(o * (1 + r))
        what = f"serve prompt={p} output={o}" + (f" prefix_fraction={frac:g}" if frac else "")
        if longest_p + longest_o > cfg.max_model_len:
            dropped.append(Dropped(engine_id=cfg.id, what=what, reason=(
                f"prompt_len + output_len = {longest_p + longest_o}" + (f" at range_ratio {r:g}" if r else "")
                + f" > max_model_len {cfg.max_model_len}")))
            continue
        if r and o * (1 - r) < 2:
            dropped.append(Dropped(engine_id=cfg.id, what=what, reason=(
                f"output_len {o} at range_ratio {r:g} can be under 2 tokens: no TPOT")))
            continue
        prefix = round(frac * p) or None
        for (c, rate), extra in itertools.product(levels, passed_through(serve)):
            pts.append(Point(engine_id=cfg.id, phase="serve", concurrency=c, request_rate=rate,
                             burstiness=serve.burstiness if rate is not None and serve.burstiness != 1 else None,
                             num_requests=serve.requests_at(rate), prefix_len=prefix, range_ratio=r or None,
                             prompt_len=p, output_len=o, repeats=1, warmup=serve.warmup_requests, **extra))
    return pts


# The serve-only point fields _serve_points shapes itself (levels, bursts, request counts, length ranges); prefix_len
# comes from ServeAxes.prefix_fraction.
SHAPED_BY_THE_GRID = ("request_rate", "burstiness", "num_requests", "range_ratio", "prefix_len")


def passed_through(serve: ServeAxes, client_flags: Mapping[str, str] = CLIENT_FLAGS) -> list[dict[str, Any]]:
    """Every other ServeAxes field named like a serve-only point field (``client_flags``: the point fields vLLM's
    benchmark client takes), as the fields of each serve point: a list swept (one point per value, a product over
    several), a single value set on every point. A new serve axis is that pair of fields and nothing here."""
    names = [n for n in client_flags if n in type(serve).model_fields and n not in SHAPED_BY_THE_GRID]
    values = [v if isinstance(v := getattr(serve, n), list) else [v] for n in names]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]
