"""The procurement table: which GPU × tensor-parallel size holds N sequences of T tokens, and at what cost.

Every row is one configuration (a catalog GPU and a tensor-parallel size ``tp``), one
vLLM replica of ``tp`` GPUs, planned by :func:`analysis.planning.plan.make_plan`:

* KV headroom: the KV budget per GPU and the fraction of its usable blocks (the null
  block excluded) that N sequences of T tokens would take on one replica;
* sequences that fit: sequences of T tokens one replica holds together (``kv_full_batch``),
  capped by vLLM's ``max_num_seqs`` — and, with a TPOT SLO, by the largest batch whose
  predicted decode step meets it;
* replicas = ceil(N / that cap), GPUs needed = replicas × tp, each replica decoding
  batch = ceil(N / replicas) sequences (equal to min(N, cap) when one replica holds them all);
* the decode step at that batch and tokens/s per GPU = batch / step / tp.

With pipeline sizes (``pps``) each row is a GPU × tp × pp: a replica of tp × pp GPUs whose KV pool is its
smallest stage's (``analysis.vllm.pipeline``), GPUs needed = replicas × tp × pp; such rows are planned for capacity
only (no decode step or TTFT yet, so no SLO can hold them).

Rows that fit come first, by GPUs needed (fewest first), then tokens/s per GPU (most first);
rows that do not fit follow in the order asked (GPU, then tp), each with its reason: tp does not divide
the attention heads (vLLM's ``num_attention_heads % tp == 0``) or the KV heads (split evenly,
or replicated evenly when tp exceeds them), the weights (with vLLM's reserve) exceed the
GPU's memory, not even one sequence of T tokens fits, or even batch 1 misses the TPOT SLO.

With a calibration the same figures are computed again with it (measured reserve, fitted
bandwidth, FLOP/s and step overhead) and set beside the spec-sheet ones; whether a row fits
and the ranking then follow the calibrated figures. A calibration measured on one GPU is carried
to another by the spec-sheet ratio of bandwidth (and of FLOP/s): ``analysis.planning.plan.transferred_calibration``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from analysis import catalog
from analysis.catalog import GPU
from analysis.latency.power import energy_interval
from analysis.model.architecture import Architecture
from analysis.planning.cost import Pricing, usd_per_million_tokens
from analysis.planning.plan import Calibration, Plan, PlanError, PlanInputs, make_plan
from analysis.units import fmt_bytes, fmt_seconds
from analysis.vllm.engine_rules import tensor_parallel_problems
from analysis.vllm.pipeline import layer_partition

Reason = Literal["heads", "weights", "one_sequence", "tpot_slo", "ttft_slo", "pipeline"]
RankBy = Literal["gpus", "tokens", "cost"]
RANK_BY: tuple[str, ...] = ("gpus", "tokens", "cost")
LimitedBy = Literal["concurrency", "kv_cache", "max_num_seqs", "tpot_slo", "ttft_slo"]

def parse_tp_list(text: str, option: str = "--tp") -> list[int]:
    """'1,2,4,8' → [1, 2, 4, 8] (duplicates dropped, order kept): a --tp or --pp list."""
    out: list[int] = []
    for part in text.split(","):
        p = part.strip()
        if not p.isdigit() or int(p) < 1:
            raise ValueError(f"{option} {text!r}: {p!r} is not a positive integer (give one size or a comma list: "
                             f"{'1,2,4,8' if option == '--tp' else '1,2'})")
        if int(p) not in out:
            out.append(int(p))
    return out


def datacenter_gpus() -> list[GPU]:
    """Every catalog GPU whose segment is datacenter, in catalog order (what ``--gpu all`` means)."""
    return [g for g in catalog.gpus().values() if g.segment == "datacenter"]


def parse_gpu_list(text: str) -> list[tuple[GPU, str | None]]:
    """'h100-sxm,h200' or 'all' → catalog GPUs with the note a short name earns (duplicates dropped)."""
    out: list[tuple[GPU, str | None]] = []
    for part in text.split(","):
        name = part.strip()
        if not name:
            raise ValueError(f"--gpu {text!r}: an empty name (give catalog names separated by commas, or all)")
        found = [(g, None) for g in datacenter_gpus()] if name.lower() == "all" else [catalog.resolve_gpu(name)]
        out.extend(f for f in found if f[0].name not in {g.name for g, _ in out})
    return out


class ProcurementRow(BaseModel):
    """One configuration of the procurement table (byte counts per GPU; `calibrated_*` with a calibration)."""

    model_config = ConfigDict(extra="forbid")

    rank: int | None = Field(description="1 = the best fitting configuration; None when it does not fit")
    gpu: str = Field(description="catalog name")
    gpu_display: str
    tensor_parallel_size: int
    pipeline_parallel_size: int = Field(1, description="pipeline stages of a replica (tp GPUs each)")
    context: int = Field(description="tokens of KV each sequence holds (T)")
    concurrency: int = Field(description="sequences to hold at once (N)")
    tpot_slo_s: float | None = Field(description="decode-step (time per output token) ceiling, seconds")
    fits: bool
    reason_kind: Reason | None = Field(description="why it does not fit: heads, weights, one_sequence, tpot_slo")
    reason: str | None
    weight_bytes: int | None
    kv_budget_bytes: int | None
    kv_bytes_per_sequence: int | None = Field(description="KV one sequence of T tokens takes on one GPU")
    kv_fraction_needed: float | None = Field(
        description="blocks N sequences of T need ÷ usable blocks (num_blocks − 1) of one replica; > 1: more replicas")
    sequences_fit: int | None = Field(description="sequences of T tokens one replica's KV pool holds together")
    max_num_seqs: int | None
    replicas: int | None
    gpus_needed: int | None = Field(description="replicas × tensor_parallel_size × pipeline_parallel_size")
    batch: int | None = Field(description="sequences each replica decodes together: ceil(N / replicas)")
    batch_limited_by: LimitedBy | None = Field(
        description="what capped a replica's sequences: concurrency (N fits on one), kv_cache, max_num_seqs, tpot_slo")
    decode_step_s: float | None = Field(
        description="the latency model's decode step at that batch (analysis.latency.step)")
    decode_step_interval_s: list[float] | None = Field(
        None, description="the step's range from the corpus (measured ÷ predicted, held out): the 10th–90th "
                          "percentiles widened to hold 80 % of an unseen campaign's figures")
    served_tpot: bool = Field(False, description="decode_step_s is the served TPOT of whole requests (--output-len: "
                                                 "arriving prompts mixed into the steps), not the bare decode step")
    speculative_tokens_per_step: float | None = Field(
        None, description="under speculative decoding, the acceptance length planned: decode_step_s is then the step "
                          "over it, the time per output token")
    roofline_decode_step_s: float | None = Field(None, description="the bare roofline's step, beside it")
    decode_bound: str | None = Field(description="the step's largest term: weights, kv, attention, communication, "
                                                 "floor (a CPU: the roofline's memory or compute)")
    tokens_per_s_per_gpu: float | None = Field(description="batch / decode step / tensor_parallel_size")
    tokens_per_s_per_gpu_interval: list[float] | None = None
    ttft_slo_s: float | None = Field(None, description="time-to-first-token ceiling, seconds")
    prompt_len: int | None = Field(None, description="the prompt whose TTFT is predicted (--prompt-len, else T)")
    ttft_s: float | None = Field(None, description="time to first token of a prompt arriving while batch − 1 "
                                                   "sequences decode (served: the API server included)")
    ttft_interval_s: list[float] | None = None
    power_w_per_gpu: float | None = Field(None, description="predicted board power of one GPU while the replica "
                                                            "decodes its batch (analysis.latency.power)")
    power_w_interval: list[float] | None = None
    kw: float | None = Field(None, description="the deployment's boards: GPUs needed × power per GPU ÷ 1000")
    j_per_output_token: float | None = Field(None, description="power per GPU ÷ tokens/s per GPU")
    j_per_output_token_interval: list[float] | None = None
    usd_per_gpu_hour: float | None = Field(None, description="the price used: --price, else the catalog's")
    price_source: str | None = None
    usd_per_million_tokens: float | None = Field(None, description="analysis.planning.cost: (price per GPU-hour "
                                                                   "+ electricity) ÷ output tokens per GPU-hour")
    usd_per_million_tokens_interval: list[float] | None = None
    calibration_note: str | None = None
    calibrated_kv_budget_bytes: int | None = None
    calibrated_kv_fraction_needed: float | None = None
    calibrated_sequences_fit: int | None = None
    calibrated_replicas: int | None = None
    calibrated_gpus_needed: int | None = None
    calibrated_batch: int | None = None
    calibrated_decode_step_s: float | None = None
    calibrated_tokens_per_s_per_gpu: float | None = None
    served_ttft_median_s: float | None = Field(None, description="with --served: a closed loop of batch requests in "
                                                                 "flight on one replica, replayed through vLLM's "
                                                                 "scheduler (analysis.serving): its median TTFT")
    served_ttft_p99_s: float | None = None
    served_tpot_median_s: float | None = None
    served_tpot_p99_s: float | None = None
    served_note: str | None = Field(None, description="with --served: why the row was not replayed")


class _Figures(BaseModel):
    """One evaluation of a configuration (spec sheet or calibrated)."""

    fits: bool = False
    reason_kind: Reason | None = None
    reason: str | None = None
    weight_bytes: int | None = None
    kv_budget_bytes: int | None = None
    kv_bytes_per_sequence: int | None = None
    kv_fraction_needed: float | None = None
    sequences_fit: int | None = None
    max_num_seqs: int | None = None
    replicas: int | None = None
    gpus_needed: int | None = None
    batch: int | None = None
    batch_limited_by: LimitedBy | None = None
    decode_step_s: float | None = None
    decode_step_interval_s: list[float] | None = None
    served_tpot: bool = False
    speculative_tokens_per_step: float | None = None
    roofline_decode_step_s: float | None = None
    decode_bound: str | None = None
    tokens_per_s_per_gpu: float | None = None
    tokens_per_s_per_gpu_interval: list[float] | None = None
    ttft_s: float | None = None
    ttft_interval_s: list[float] | None = None
    prompt_len: int | None = None
    power_w_per_gpu: float | None = None
    power_w_interval: list[float] | None = None


def heads_reason(a: Architecture, tp: int) -> str | None:
    """Why vLLM refuses this tensor-parallel size for the model, or None: the shared rule
    (`analysis.vllm.engine_rules.tensor_parallel_problems`), in one line."""
    problems = tensor_parallel_problems(a, tp)
    return "; ".join(f"tp={tp} {p.problem} (allowed: {p.allowed})" for p in problems) or None


def transfer_calibration(cal: Calibration, gpu: GPU) -> tuple[Calibration, str]:
    """The calibration for rows on ``gpu`` and the note that says how it was applied. The caller has checked it
    and, for another device, scaled it by the spec sheets (``analysis.planning.plan.transferred_calibration``, whose
    label the source carries); a calibration with rates but no device is applied as measured, and says so."""
    source = cal.source or "calibration"
    device = cal.device or (cal.measured_on.name if cal.measured_on else None)
    if (cal.effective_bandwidth_Bps or cal.effective_flops) and not device:
        return cal, f"{source} (names no device: applied as measured)"
    return cal, source


def _evaluate(a: Architecture, inputs: PlanInputs, gpu: GPU, concurrency: int, tpot_slo_s: float | None,
              cal: Calibration | None, ttft_slo_s: float | None = None) -> _Figures:
    tp, pp = inputs.tensor_parallel_size, inputs.pipeline_parallel_size
    try:
        plan = make_plan(a, inputs, gpu, cal)
    except PlanError as exc:  # inputs were checked without a GPU: only the budget can fail here
        # "M does not fit on G at tp=N(, pp=M): weights … exceed …" → the part after the configuration it names
        return _Figures(reason_kind="weights", reason=re.sub(r"^.* at tp=\d+(, pp=\d+)?: ", "", str(exc)))
    f = _Figures(weight_bytes=plan.weight_bytes, kv_budget_bytes=plan.kv_budget_bytes,
                 kv_bytes_per_sequence=plan.kv_bytes_per_sequence, max_num_seqs=plan.max_num_seqs)
    if inputs.kv_cache_memory_bytes is not None and plan.weight_bytes + plan.kv_budget_bytes > gpu.memory_bytes:
        f.reason_kind, f.reason = "weights", (
            f"weights {plan.weight_bytes / 2**30:.1f} GiB + the fixed KV budget "
            f"{plan.kv_budget_bytes / 2**30:.1f} GiB exceed {gpu.name}'s "
            f"{gpu.memory_bytes / 2**30:.1f} GiB at tp={tp}")
        return f
    usable = plan.num_blocks - 1
    per_seq = plan.blocks_per_sequence_at_context
    f.kv_fraction_needed = concurrency * per_seq / usable if usable > 0 else None
    f.sequences_fit = fit = plan.kv_full_batch
    if fit == 0:
        f.reason_kind, f.reason = "one_sequence", (
            f"one sequence of {plan.context:,} tokens needs {per_seq:,} blocks "
            f"({fmt_bytes(per_seq * plan.bytes_per_block)}); the {fmt_bytes(plan.kv_budget_bytes)} KV budget "
            f"holds {max(usable, 0):,} (null block excluded)")
        return f

    # The prompt whose TTFT is predicted: --prompt-len, else the whole context (one token short of
    # max_model_len, which vLLM keeps for an output token).
    prompt = inputs.prompt_len or min(plan.context, plan.max_model_len - 1)

    def at_batch(b: int) -> Plan:
        """The plan at batch b (decode step calibrated when the calibration has rates; TTFT of a prompt arriving
        while b − 1 others decode)."""
        return make_plan(a, inputs.model_copy(update={"batch": b, "prompt_len": prompt}), gpu, cal)

    def step(p: Plan) -> float:
        """The time per output token the SLO and the tokens/s are judged by (``Plan.time_per_output_token_s``)."""
        t = p.time_per_output_token_s
        assert t is not None, "a plan on a GPU with a batch has a decode step"
        return t

    def misses(p: Plan) -> Reason | None:
        if tpot_slo_s is not None and step(p) > tpot_slo_s:
            return "tpot_slo"
        if ttft_slo_s is not None and p.ttft_s is not None and p.ttft_s > ttft_slo_s:
            return "ttft_slo"
        return None

    cap, limited = (fit, "kv_cache") if fit <= plan.max_num_seqs else (plan.max_num_seqs, "max_num_seqs")
    if pp > 1:  # capacity only: the latency model has no pipeline stages yet
        if tpot_slo_s is not None or ttft_slo_s is not None:
            f.reason_kind, f.reason = "pipeline", ("latency with pipeline parallelism is not modelled yet: the SLOs "
                                                   "cannot be checked")
            return f
        f.replicas = math.ceil(concurrency / cap)
        f.gpus_needed = f.replicas * tp * pp
        f.batch = math.ceil(concurrency / f.replicas)
        f.batch_limited_by = "concurrency" if f.replicas == 1 else limited
        f.fits = True
        return f
    if tpot_slo_s is not None or ttft_slo_s is not None:
        one = at_batch(1)
        if (why := misses(one)) is not None:
            f.reason_kind = why
            f.reason = (f"even batch 1 steps in {fmt_seconds(step(one))}, over the TPOT SLO of "
                        f"{fmt_seconds(tpot_slo_s)}" if why == "tpot_slo" else
                        f"even alone a {prompt:,}-token prompt takes {fmt_seconds(one.ttft_s)} to its first "
                        f"token, over the TTFT SLO of {fmt_seconds(ttft_slo_s)}")
            return f
        lo, hi = 1, cap  # largest batch meeting the SLOs (the step and the TTFT grow with the batch)
        why_cap: Reason | None = None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            why = misses(at_batch(mid))
            lo, hi = (mid, hi) if why is None else (lo, mid - 1)
            why_cap = why_cap if why is None else why
        if lo < cap:
            cap, limited = lo, why_cap or "tpot_slo"
    f.replicas = math.ceil(concurrency / cap)
    f.gpus_needed = f.replicas * tp
    f.batch = math.ceil(concurrency / f.replicas)
    f.batch_limited_by = "concurrency" if f.replicas == 1 else limited
    p = at_batch(f.batch)
    calibrated = p.calibrated_decode_step_s is not None
    f.decode_step_s = step(p)
    f.decode_bound = p.calibrated_decode_bound if calibrated else p.decode_bound
    served = not calibrated and p.served_tpot_s is not None
    iv = (p.calibrated_decode_step_interval_s if calibrated else p.served_tpot_interval_s if served else
          p.tpot_interval_s if p.tpot_s is not None else p.decode_step_interval_s)
    f.decode_step_interval_s = iv
    f.served_tpot = served
    f.speculative_tokens_per_step = None if calibrated else p.decode_tokens_per_step
    f.roofline_decode_step_s = p.roofline_decode_step_s
    f.tokens_per_s_per_gpu = f.batch / f.decode_step_s / tp
    f.tokens_per_s_per_gpu_interval = [f.batch / x / tp for x in reversed(iv)] if iv else None
    f.ttft_s, f.ttft_interval_s, f.prompt_len = p.ttft_s, p.ttft_interval_s, prompt
    if p.calibrated_decode_power_w is not None:  # the device's own measured draw: no model interval
        f.power_w_per_gpu, f.power_w_interval = p.calibrated_decode_power_w, None
    else:
        f.power_w_per_gpu, f.power_w_interval = p.decode_power_w, p.decode_power_interval_w
    f.fits = True
    return f


def _with_cost(row: ProcurementRow, gpu: GPU, pricing: Pricing) -> ProcurementRow:
    """A fitting row's energy and cost (analysis.planning.cost) from its power and its tokens/s per GPU (the
    calibrated ones where it has them)."""
    cal = row.calibration_note is not None and row.calibrated_tokens_per_s_per_gpu is not None
    tok = row.calibrated_tokens_per_s_per_gpu if cal else row.tokens_per_s_per_gpu
    tok_iv = None if cal else row.tokens_per_s_per_gpu_interval
    gpus = row.calibrated_gpus_needed if cal else row.gpus_needed
    price, source = pricing.price(gpu)
    up: dict = {"usd_per_gpu_hour": price, "price_source": source}
    p, p_iv = row.power_w_per_gpu, row.power_w_interval
    if row.fits and tok:
        if p is not None:
            up["kw"] = (gpus or 0) * p / 1000
            up["j_per_output_token"] = p / tok
            up["j_per_output_token_interval"] = energy_interval(p / tok)[0]
        if price is not None:
            kwh = pricing.power_usd_per_kwh
            up["usd_per_million_tokens"] = usd_per_million_tokens(price, tok, p, kwh)
            if tok_iv:
                lo_p, hi_p = (p_iv or [p, p])
                up["usd_per_million_tokens_interval"] = [usd_per_million_tokens(price, tok_iv[1], lo_p, kwh),
                                                         usd_per_million_tokens(price, tok_iv[0], hi_p, kwh)]
    return row.model_copy(update=up)


def procurement(a: Architecture, base: PlanInputs, gpus: Sequence[GPU], tps: Sequence[int], *,
                concurrency: int, context: int, tpot_slo_s: float | None = None,
                calibration: Callable[[GPU], Calibration] | None = None,
                ttft_slo_s: float | None = None, pps: Sequence[int] = (1,), pricing: Pricing | None = None,
                rank_by: RankBy = "gpus", served: bool = False) -> list[ProcurementRow]:
    """Every GPU × tp × pp, ranked (see the module docstring). ``base`` holds the settings shared by all rows
    (dtype, block size, utilization, a fixed KV budget …); ``calibration`` gives a GPU's calibration. A pipeline
    (pp > 1) is planned for capacity only: its rows carry no latency and cannot be held to an SLO yet. ``served``:
    each fitting row's closed loop of its batch, replayed through vLLM's scheduler (median and p99 TTFT and TPOT;
    ``base`` then needs its prompt and output lengths)."""
    if served and (base.prompt_len is None or base.output_len is None):
        raise PlanError("--served replays requests of --prompt-len and --output-len tokens: give both")
    if concurrency < 1:
        raise PlanError(f"--concurrency {concurrency}: give at least one sequence")
    if tpot_slo_s is not None and not tpot_slo_s > 0:
        raise PlanError(f"--tpot-slo {tpot_slo_s}: must be positive")
    if ttft_slo_s is not None and not ttft_slo_s > 0:
        raise PlanError(f"--ttft-slo {ttft_slo_s}: must be positive")
    if base.prompt_len is not None and base.prompt_len > context:
        raise PlanError(f"--prompt-len {base.prompt_len:,} is longer than --context {context:,} (the tokens each "
                        f"sequence holds, its prompt included)")
    configs = [(tp, pp) for tp in tps for pp in pps]
    inputs = {(tp, pp): base.model_copy(update={"tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                                                "context": context, "batch": None}) for tp, pp in configs}
    heads = {tp: heads_reason(a, tp) for tp in tps}
    stages_reason: dict[int, str | None] = {}
    for pp in pps:
        try:
            layer_partition(a.num_layers, pp, base.pp_layer_partition or "")
            stages_reason[pp] = None
        except ValueError as exc:
            stages_reason[pp] = str(exc)
    for tp, pp in configs:
        if heads[tp] is None and pp == 1:
            make_plan(a, inputs[tp, pp])  # raises on inputs no GPU can fix (context past max_model_len, …)
    rows: list[ProcurementRow] = []
    for gpu in gpus:
        cal, note = transfer_calibration(calibration(gpu), gpu) if calibration is not None else (None, None)
        for tp, pp in configs:
            common = {"rank": None, "gpu": gpu.name, "gpu_display": gpu.display or gpu.name,
                      "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "context": context,
                      "concurrency": concurrency, "tpot_slo_s": tpot_slo_s, "ttft_slo_s": ttft_slo_s}
            if heads[tp] is not None:
                rows.append(ProcurementRow(**common, **_Figures(reason_kind="heads", reason=heads[tp]).model_dump()))
                continue
            if stages_reason[pp] is not None:
                rows.append(ProcurementRow(**common, **_Figures(reason_kind="pipeline",
                                                                reason=stages_reason[pp]).model_dump()))
                continue
            spec = _evaluate(a, inputs[tp, pp], gpu, concurrency, tpot_slo_s, None, ttft_slo_s)
            row = ProcurementRow(**common, **spec.model_dump())
            if cal is not None:
                c = _evaluate(a, inputs[tp, pp], gpu, concurrency, tpot_slo_s, cal, ttft_slo_s)
                row = row.model_copy(update={
                    "fits": c.fits, "reason_kind": c.reason_kind,
                    "reason": c.reason and (c.reason if not spec.fits else f"calibrated: {c.reason}"),
                    "calibration_note": note,
                    **{f"calibrated_{k}": getattr(c, k) for k in (
                        "kv_budget_bytes", "kv_fraction_needed", "sequences_fit", "replicas", "gpus_needed",
                        "batch", "decode_step_s", "tokens_per_s_per_gpu")},
                })
            if served and row.batch and pp == 1 and not gpu.cpu:
                from analysis.planning.served import served_row

                row = row.model_copy(update=served_row(a, inputs[tp, pp], gpu, make_plan(a, inputs[tp, pp], gpu),
                                                       row.batch))
            rows.append(_with_cost(row, gpu, pricing or Pricing()))
    return rank_rows(rows, rank_by)


def _ranking_figures(r: ProcurementRow) -> tuple[int, float]:
    cal = r.calibration_note is not None
    gpus = r.calibrated_gpus_needed if cal else r.gpus_needed
    tps = r.calibrated_tokens_per_s_per_gpu if cal else r.tokens_per_s_per_gpu
    return gpus or 0, tps or 0.0


def _rank_key(r: ProcurementRow, rank_by: RankBy) -> tuple:
    gpus, tps = _ranking_figures(r)
    if rank_by == "tokens":
        return (-tps, gpus)
    if rank_by == "cost":  # priced rows by dollars per million tokens, then the unpriced by GPUs
        cost = r.usd_per_million_tokens
        return (cost is None, cost or 0.0, gpus, -tps)
    return (gpus, -tps)


def rank_rows(rows: Sequence[ProcurementRow], rank_by: RankBy = "gpus") -> list[ProcurementRow]:
    """Fitting rows first, ranked by ``rank_by``: ``gpus`` (GPUs needed, fewest first, then tokens/s per GPU, most
    first), ``tokens`` (tokens/s per GPU, most first) or ``cost`` (dollars per million output tokens, cheapest
    first; rows without a price after them); then the rest in the order given. Figures are the calibrated ones
    when the row has a calibration. The SLOs are constraints: a row that misses one does not fit."""
    if rank_by not in RANK_BY:
        raise PlanError(f"--rank-by {rank_by!r}: give one of {', '.join(RANK_BY)}")
    fitting = sorted((r for r in rows if r.fits), key=lambda r: _rank_key(r, rank_by))
    return [r.model_copy(update={"rank": i + 1}) for i, r in enumerate(fitting)] + [r for r in rows if not r.fits]
