"""The latency half of a plan: each decode, prefill and request-latency term the step model gives
(:mod:`analysis.latency.step`), with its interval and what it was checked against, and a calibration's measured
figures in place of the shipped constants where the plan has one."""

from __future__ import annotations

from typing import Any

from analysis.catalog import GPU
from analysis.latency import step as latency
from analysis.latency.power import energy_interval, step_power
from analysis.latency.speculative import Speculation
from analysis.latency.speculative_evidence import widened
from analysis.model.architecture import Architecture
from analysis.model.kv import (
    state_bytes_per_sequence,
)
from analysis.model.roofline import crossover_context, decode_step, prefill, ridge_point
from analysis.planning.calibration import Calibration, calibration_interval
from analysis.planning.plan_inputs import PlanInputs, async_scheduling


def request_latency(engine: latency.Engine, inputs: PlanInputs, out: dict[str, Any]) -> dict[str, Any]:
    """A whole request of ``prompt_len`` in and ``output_len`` out, at ``batch`` (else 1) of them in flight.

    Under ``--entry serve``: the steady state's time per output token (``served_tpot_s``: while a request decodes the
    other slots take new prompts, mixed into its steps; ``analysis.latency.step.served_step_schedule``), the
    request's latency, its TTFT (``ttft_s``) plus ``output_len − 1`` such tokens, and the mean TTFT when the
    ``batch`` prompts arrive together (``burst_ttft_s``: a burst, or a closed loop of fixed-length requests).
    Under ``--entry offline``: ``vllm bench latency --batch-size B --input-len P --output-len O``'s average latency,
    the batch's prompts prefilled together and ``output_len − 1`` decode steps (``bench_latency_s``). Each with its
    regime's interval."""
    batch, p, o = inputs.batch or 1, inputs.prompt_len or 1, inputs.output_len or 1
    reg = latency.regime(engine.a, engine.tp)
    res: dict[str, Any] = {"output_len": o, "request_concurrency": batch}

    def figure(name: str, s: latency.Schedule, r: str) -> None:
        """A figure with its named terms, its regime's interval and what it was checked against."""
        t = s.time()
        d = describe(engine, t, r)
        res.update({f"{name}_s": t, f"{name}_terms": latency.named_terms(s), f"{name}_interval_s": d["interval_s"],
                    f"{name}_checked_against": d["checked_against"]})

    if inputs.entry == "offline":
        figure("bench_latency", latency.latency_schedule(engine, batch, p, o), reg)
        return res
    figure("served_tpot", latency.served_step_schedule(engine, batch, p, o), reg)
    # A closed loop of fixed-length requests (`vllm bench serve --max-concurrency B`, request rate inf) starts with
    # its B prompts together, and since they finish together the next B arrive together: its TTFT is such a burst's,
    # the mean over requests whose first tokens wait for the prefill chunks before their own (the corpus fit
    # predicts closed loops so).
    figure("burst_ttft", latency.burst_ttft_schedule(engine, batch, p, "mean"), "ttft")
    res["burst_ttft_median_s"] = latency.burst_ttft_schedule(engine, batch, p, "median").time()
    if out.get("ttft_s") is not None:
        tpot, ti, di = res["served_tpot_s"], out.get("ttft_interval_s"), res["served_tpot_interval_s"]
        res["request_latency_s"] = out["ttft_s"] + (o - 1) * tpot
        res["request_latency_interval_s"] = ([ti[0] + (o - 1) * di[0], ti[1] + (o - 1) * di[1]]
                                             if ti and di else None)
    return res


def latency_terms(a: Architecture, inputs: PlanInputs, gpu: GPU, context: int, calibration: Calibration | None,
             max_num_batched_tokens: int | None = None, speculation: Speculation | None = None) -> dict[str, Any]:
    """Latency figures: the bare roofline (``roofline_*``) and, on a GPU, the evidence-fitted latency model
    (``analysis.latency.step``: named terms, an interval from the corpus and what it was checked against), which
    ``decode_step_s``, ``tokens_per_s``, ``prefill_s`` and ``ttft_s`` are. A CPU has no fitted constants:
    there the figures are the roofline's, and a calibration from a sweep is what makes them real."""
    tp = inputs.tensor_parallel_size
    bw, peak = gpu.bandwidth_Bps, gpu.peak_flops()
    out: dict[str, Any] = {
        "bandwidth_Bps": bw,
        "peak_flops": peak,
        "ridge_point": ridge_point(peak, bw),
    }
    batch = inputs.batch or 1
    out["crossover_context"] = crossover_context(a, batch=batch, kv_cache_dtype=inputs.kv_cache_dtype, tp=tp)
    model = not gpu.cpu
    engine = latency.Engine(a, gpu, tp=tp, kv_cache_dtype=inputs.kv_cache_dtype, enforce_eager=inputs.enforce_eager,
                            vllm_version=inputs.vllm_version, max_num_batched_tokens=max_num_batched_tokens,
                            async_scheduling=async_scheduling(inputs, not gpu.cpu), speculation=speculation)
    out["latency_model"] = ("evidence-fitted step model (analysis/catalog/latency.yaml)" if model else
                            "roofline: no evidence-fitted constants for CPUs (calibrate with a sweep)")
    if inputs.prompt_len:
        pf = prefill(a, prompt_len=inputs.prompt_len, bandwidth_Bps=bw, peak_flops=peak,
                     kv_cache_dtype=inputs.kv_cache_dtype, tp=tp)
        out["prompt_len"] = inputs.prompt_len
        out["roofline_prefill_s"] = pf.time_s
        out["prefill_bound"] = pf.bound
        if model:
            ps = latency.prefill_schedule(engine, 1, inputs.prompt_len)
            out["prefill_s"] = ps.time()
            out["prefill_terms"] = latency.named_terms(ps)
            # TTFT of a request arriving while the batch's other sequences decode (served: the API server too).
            running = batch - 1 if inputs.batch else 0
            ts = latency.ttft_schedule(engine, inputs.prompt_len, decoding=running, context=context,
                                       served=inputs.entry == "serve")
            out["ttft_s"] = ts.time()
            out["ttft_terms"] = latency.named_terms(ts)
            d = describe(engine, out["ttft_s"], "ttft")
            out["ttft_interval_s"], out["ttft_checked_against"] = d["interval_s"], d["checked_against"]
            out["ttft_running_sequences"] = running
            if inputs.output_len:
                out.update(request_latency(engine, inputs, out))
        else:
            out["prefill_s"] = pf.time_s
    if inputs.batch is None:
        return out
    step = decode_step(a, batch=batch, context=context, bandwidth_Bps=bw, peak_flops=peak,
                       kv_cache_dtype=inputs.kv_cache_dtype, tp=tp)
    out.update({
        "decode_weight_bytes": step.weight_bytes,
        "decode_kv_bytes": step.kv_bytes,
        "decode_flops": step.flops,
        "roofline_decode_step_s": step.time_s,
        "roofline_decode_bound": step.bound,
        "roofline_tokens_per_s": batch / step.time_s,
        "arithmetic_intensity": step.arithmetic_intensity,
    })
    if model:
        ds = latency.decode_schedule(engine, batch, context)
        terms = latency.named_terms(ds)
        t = ds.time()
        reg = latency.regime(a, tp)
        d = describe(engine, t, reg)
        work = ds.steps[0][1]
        n = engine.tokens_per_step  # tokens a sequence gains a step: the acceptance length under speculation
        out.update({
            "decode_step_s": t,
            "decode_bound": latency.dominant_term(terms),
            "decode_terms": terms,
            "decode_rates": {k: latency.step_terms(work)[k] for k in (
                "effective_weight_bandwidth_Bps", "effective_kv_bandwidth_Bps", "effective_flops")},
            "decode_experts_touched": work.experts_touched,
            # the KV term's bytes a GPU a step, and of them a hybrid's recurrent state, read and written back
            "decode_kv_bytes": work.kv_bytes,
            "decode_recurrent_state_bytes": 2 * batch * state_bytes_per_sequence(a, tp),
            # of them, a sparse model's indexer keys (every cached token's, on each layer with an indexer)
            "decode_sparse_indexer_bytes": batch * sum(
                n * context * layer.indexer_bytes for layer, n in a.attention_kinds),
            "decode_regime": reg,
            "decode_step_interval_s": d["interval_s"],
            "decode_checked_against": d["checked_against"],
            "tokens_per_s": batch * n / t,
            "tokens_per_s_interval": [batch * n / x for x in reversed(d["interval_s"])] if d["interval_s"] else None,
        })
        if engine.speculation is not None:
            out.update({"decode_tokens_per_step": n, "tpot_s": t / n,
                        "tpot_interval_s": [x / n for x in d["interval_s"]] if d["interval_s"] else None})
        # Board power while it decodes (analysis.latency.power) and the energy of an output token: every GPU of the
        # replica draws it while a step makes one token per sequence.
        pw = step_power(gpu, work)
        out.update({"decode_power_w": pw["power_w"], "decode_power_interval_w": pw.get("power_interval_w"),
                    "decode_power_checked_against": pw["power_checked_against"], "tdp_w": pw["tdp_w"],
                    "idle_w": pw["idle_w"]})
        if pw["power_w"] is not None:
            j = out["decode_j_per_output_token"] = pw["power_w"] * tp * t / (batch * n)
            out["decode_j_per_output_token_interval"], out["decode_energy_checked_against"] = energy_interval(j)
    else:
        out.update({"decode_step_s": step.time_s, "decode_bound": step.bound, "tokens_per_s": batch / step.time_s})
    if calibration is not None and speculation is not None:
        out["calibration_speculative_note"] = ("the calibration's decode fit is of steps without speculative "
                                               "decoding: its figures are left out, the step model's stand")
    elif calibration is not None and (calibration.effective_bandwidth_Bps or calibration.effective_flops
                                      or calibration.step_overhead_s):
        # The fitted model (analysis.measured.decode_fit): overhead + bytes / BW_eff, plus FLOPs / F_eff where the
        # fit has a FLOP term; without one, the roofline's max(bytes / BW_eff, FLOPs / peak) keeps a batch past
        # the ridge point compute-bound. The device's bandwidth stands in where the fit could not identify one.
        memory_s = step.bytes / (calibration.effective_bandwidth_Bps or bw)
        if calibration.effective_flops:
            compute_s = step.flops / calibration.effective_flops
            t = calibration.step_overhead_s + memory_s + compute_s
        else:
            compute_s = step.flops / peak
            t = calibration.step_overhead_s + max(memory_s, compute_s)
        out.update({
            "calibrated_decode_step_s": t,
            "calibrated_tokens_per_s": batch / t,
            "calibrated_decode_bound": "memory" if memory_s >= compute_s else "compute",
            "calibration_source": calibration.source,
        })
    if calibration is not None and calibration.power is not None:
        # The device's own measured draw at this batch, and the energy of a token at the calibrated (else predicted)
        # step: what the sweep measured, not the power model.
        cp = calibration.power
        w = cp.at(batch)
        step_s = out.get("calibrated_decode_step_s", out["decode_step_s"])
        out.update({"calibrated_decode_power_w": w, "calibrated_j_per_output_token":
                    w * tp * step_s / (batch * out.get("decode_tokens_per_step", 1.0)),
                    "calibrated_power_source": f"measured at batch {', '.join(str(b) for b, _ in cp.power_w_by_batch)}"
                                               f" ({cp.points} decode points; {cp.counted}; {cp.method})"})
        if iv := calibration_interval(calibration):
            out["calibrated_decode_step_interval_s"] = [t * iv[0], t * iv[1]]
            out["calibrated_checked_against"] = iv[2]
    return out


def describe(engine: latency.Engine, time_s: float, r: str) -> dict[str, Any]:
    """A prediction's interval and what it was checked against (``latency.describe``); under speculative decoding
    widened to hold the published speculative runs (analysis.latency.speculative.widened)."""
    d = latency.describe(time_s, r)
    if engine.speculation is not None:
        d["interval_s"], words = widened(d["interval_s"], time_s)
        d["checked_against"] = f"{d['checked_against']}; speculative decoding: {words}"
    return d
