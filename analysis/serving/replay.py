"""A step-by-step replay of the pinned vLLM's V1 scheduler (``v1/core/sched/scheduler.py`` ``Scheduler.schedule``,
``v1/core/kv_cache_manager.py`` ``allocate_slots``), priced by the step model, over a served workload.

Each step, as vLLM 0.32 schedules it (FCFS, the default policy):

* **Running requests first**, in the order they were admitted: each asks for what it lacks (a decoding request one
  token, a request part-way through its prompt the rest of it), capped by what is left of the step's token budget
  (``max_num_batched_tokens``). Its new KV blocks come from the free pool; where the pool has too few, the newest
  running request is preempted (its blocks freed, its tokens to be recomputed; it goes back to the head of the
  waiting queue) until they fit, or until the request itself was the one preempted.
* **Then waiting requests**, unless a request was preempted this step: in arrival order while budget is left and
  fewer than ``max_num_seqs`` run, each admitted only if the KV blocks of its whole prompt are free
  (``scheduler_reserve_full_isl``, on by default) beyond what the prefix cache already holds of it (a shared prefix;
  request 0's prompt, which vllm bench serve runs before the measured run), its first chunk capped by the budget
  (without chunked prefill, a prompt longer than the budget waits).
* The step runs for the step model's time of its decoding requests (with their mean context) and prompt tokens
  (with their mean cached prefix). A request whose computed tokens reach its length samples a token at the step's
  end: its first is its time to first token; at its output length it finishes and frees its blocks.

The client is ``vllm bench serve``'s: requests arrive at their offsets (all at once at an infinite rate), no more
than ``max_concurrency`` in flight (one held at the client's semaphore is sent, and timed from, when a slot frees),
and the API server's per-request cost (the step model's ``api_s``) is added to each request's first token and end.

Not replayed (a plan that needs them refuses or says so): speculative decoding, pipeline stages, the packed caches
of DeepSeek-V4, LoRA slots, prompts longer than max_model_len (vLLM rejects them), KV transfer connectors.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from analysis.serving.arrivals import Requests
from analysis.serving.outcome import ServedOutcome, outcome
from analysis.serving.workload import ServedWorkload, requests

# Bounds on one replay (time and memory: a few seconds and about 100 MB at most on the CI machine).
MAX_STEPS = 5_000_000
MAX_OUTPUT_TOKENS = 20_000_000
# (decoding requests, their mean context, prompt tokens, their mean cached prefix, prompts) -> seconds
StepTimer = Callable[[int, float, int, float, int], float]


class ReplayError(ValueError):
    """A configuration or workload the replay does not reproduce (the message says what and why)."""


@dataclass(frozen=True)
class ReplayEngine:
    """What the replay needs of one vLLM engine: its block pool, its scheduler limits, and a step time."""

    num_blocks: int  # the pool, vLLM's null block included
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    chunked_prefill: bool
    prefix_caching: bool
    blocks_at: np.ndarray  # blocks a request holds at k blocks' worth of tokens: blocks_at[ceil(tokens / block_size)]
    step_s: StepTimer
    api_s: float = 0.0  # the API server's cost per request (its first token and its end)

    @property
    def usable_blocks(self) -> int:
        return self.num_blocks - 1  # vLLM keeps one block out of the pool (the null block)

    def blocks(self, tokens: np.ndarray | int) -> np.ndarray | int:
        return self.blocks_at[-(-np.asarray(tokens) // self.block_size)]


def full_attention_blocks(max_model_len: int, block_size: int, groups: int = 1) -> np.ndarray:
    """``blocks_at`` for a model whose every KV-cache group keeps every token: ``groups × ceil(t / block_size)``."""
    return groups * np.arange(-(-max_model_len // block_size) + 2, dtype=np.int64)


@dataclass
class _Timeline:
    t: list[float]
    running: list[int]
    waiting: list[int]


@dataclass
class StepTrace:
    """Every replayed step: what it carried (decoding requests, their mean context, prompt tokens, their mean cached
    prefix, prompts) and when it ended (for :mod:`analysis.serving.schedules`: a served figure as weighted steps)."""

    shapes: list[tuple[int, float, int, float, int]]
    t_end: list[float]


def replay(engine: ReplayEngine, workload: ServedWorkload, reqs: Requests | None = None,
           slo: dict[str, float] | None = None, per_request: bool = False, trace: StepTrace | None = None,
           max_steps: int = MAX_STEPS) -> ServedOutcome:
    """Replay ``workload`` (its requests, or ``reqs`` when given) through ``engine``'s scheduler; the served
    figures (:class:`ServedOutcome`; goodput at ``slo``: ttft_s, tpot_s, e2el_s; each request's with
    ``per_request``). A request that can never fit (its
    prompt's blocks exceed the whole pool) is refused by name, as vLLM would never schedule it."""
    r = reqs or requests(workload)
    n = len(r.prompt_len)
    e = engine
    if (longest := int((r.prompt_len + r.output_len).max())) > e.max_model_len:
        raise ReplayError(f"a request of {longest:,} tokens passes max_model_len {e.max_model_len:,}: vLLM refuses it")
    if int(e.blocks(int(r.prompt_len.max()))) > e.usable_blocks:
        raise ReplayError(f"a {int(r.prompt_len.max()):,}-token prompt needs more KV blocks than the pool's "
                          f"{e.usable_blocks:,}: vLLM never schedules it")
    if (tokens := int(r.output_len.sum())) > MAX_OUTPUT_TOKENS:
        raise ReplayError(f"{tokens:,} output tokens to replay; at most {MAX_OUTPUT_TOKENS:,} (fewer requests or "
                          "shorter outputs)")
    if (fewest := -(-tokens // e.max_num_seqs)) > max_steps:
        raise ReplayError(f"at least {fewest:,} engine steps to replay (max_num_seqs {e.max_num_seqs:,} a step); "
                          f"at most {max_steps:,}")
    prompt = r.prompt_len.astype(np.int64)
    out_len = r.output_len.astype(np.int64)
    ntok = prompt.copy()  # tokens the request has: its prompt and the outputs so far
    comp = np.zeros(n, np.int64)  # tokens whose KV is computed
    held = np.zeros(n, np.int64)  # blocks it holds
    gen = np.zeros(n, np.int64)
    first = np.full(n, np.nan)
    done = np.full(n, np.nan)
    last_token = np.zeros(n)
    sent = np.full(n, np.nan)  # when the client sent it (the closed loop sends as others finish)
    gaps: list[np.ndarray] = []
    prefix_blocks = (r.prefix_len // e.block_size) if e.prefix_caching else 0
    prefix_tokens = prefix_blocks * e.block_size
    prefix_cached = False
    # vllm bench serve runs request 0's prompt before the measured run (its ready check, its warm-ups): with prefix
    # caching its full blocks are cached, all but the last token's (vLLM computes at least that one for its logits).
    warm = np.zeros(n, np.int64)
    if e.prefix_caching and workload.first_prompt_cached:
        warm[0] = (int(prompt[0]) - 1) // e.block_size * e.block_size
    free = e.usable_blocks  # the warm prompt's cached blocks are free ones until request 0 takes them
    # A trace's block hashes: the prefix cache as an LRU of the hashes computed, as many as the pool holds.
    hashed = r.block_hashes is not None and e.prefix_caching
    cache: OrderedDict[int, None] = OrderedDict()
    cache_room = max(e.usable_blocks * e.block_size // r.hash_block_tokens, 1)

    def hash_hit(q: int) -> int:
        assert r.block_hashes is not None
        k = 0
        for h in r.block_hashes[q]:
            if h not in cache:
                break
            cache.move_to_end(h)
            k += 1
        return min(k * r.hash_block_tokens, int(prompt[q] - 1)) // e.block_size * e.block_size
    cap = workload.max_concurrency or n
    running: list[int] = []
    waiting: deque[int] = deque()
    next_send = 0  # the next request the client sends
    in_flight = 0
    preemptions = 0
    t = 0.0
    timeline = _Timeline([], [], [])
    steps = 0
    busy = 0.0

    slot_since = 0.0  # since when the client has had a free slot (fewer than max_concurrency in flight)

    def send_due(now: float) -> None:
        # vLLM's client holds a request at its semaphore until a slot frees, and times it from there
        # (benchmarks/serve.py limited_request_func): sent at its arrival, or when a slot freed after it.
        nonlocal next_send, in_flight
        while next_send < n and in_flight < cap and r.arrival_s[next_send] <= now + 1e-12:
            sent[next_send] = max(float(r.arrival_s[next_send]), slot_since)
            waiting.append(next_send)
            next_send += 1
            in_flight += 1

    finished = 0

    def end_step(ended: np.ndarray, batch: int) -> None:
        """After a step ending at ``t``: the requests that reached their output length end and free their blocks
        (the client's slots with them), the client sends what is due, and the timeline takes the step."""
        nonlocal free, finished, in_flight, slot_since
        if ended.size:
            done[ended] = t
            gone = set(ended.tolist())
            running[:] = [q for q in running if q not in gone]
            free += int(held[ended].sum())
            held[ended] = 0
            finished += ended.size
            if in_flight >= cap:
                slot_since = t
            in_flight -= ended.size
        send_due(t)
        if len(timeline.t) < 100_000:
            timeline.t.append(t)
            timeline.running.append(batch)
            timeline.waiting.append(len(waiting))

    send_due(0.0)
    while finished < n:
        if not running and not waiting:  # idle until the next request is sent
            t = max(t, float(r.arrival_s[next_send]))
            send_due(t)
            continue
        if not waiting and len(running) <= e.max_num_batched_tokens:
            # A run of pure decode steps (nothing waits, every running request decodes): stepped through at once up
            # to the first finish, the next send, or the step whose blocks the pool would lack.
            ids = np.fromiter(running, np.int64, len(running))
            if bool(((ntok[ids] - comp[ids]) == 1).all() and (gen[ids] > 0).all()):
                k = int((out_len[ids] - gen[ids]).min())
                while k > 1 and int(e.blocks(comp[ids] + k).sum() - held[ids].sum()) > free:
                    k //= 2
                if k > 1:
                    due = (float(r.arrival_s[next_send]) if next_send < n and in_flight < cap else math.inf)
                    d, ctx0 = ids.size, float(comp[ids].mean())
                    taken = 0
                    for j in range(k):
                        dt = e.step_s(d, ctx0 + j, 0, 0.0, 0)
                        t += dt
                        if trace is not None:
                            trace.shapes.append((d, ctx0 + j, 0, 0.0, 0))
                            trace.t_end.append(t)
                        busy += dt
                        taken += 1
                        gaps.append(np.full(d, dt, np.float32))
                        if t >= due:
                            break
                    steps += taken
                    comp[ids] += taken
                    gen[ids] += taken
                    ntok[ids] += taken
                    last_token[ids] = t
                    blocks = e.blocks(comp[ids])
                    free -= int(blocks.sum() - held[ids].sum())
                    held[ids] = blocks
                    end_step(ids[gen[ids] >= out_len[ids]], d)
                    continue
        steps += 1
        if steps > max_steps:
            raise ReplayError(f"the replay passed {max_steps:,} steps without finishing: the engine cannot make "
                              "progress on this workload")
        budget = e.max_num_batched_tokens
        preempted = False
        # -- running requests first --------------------------------------------------------------------------
        run_ids, run_new = _fits_whole(e, running, ntok, comp, held, budget, free)
        if run_ids is not None:  # every running request's blocks are free: no preemption, all at once
            need = int(e.blocks(comp[run_ids] + run_new).sum() - held[run_ids].sum())
            held[run_ids] = e.blocks(comp[run_ids] + run_new)
            free -= need
            budget -= int(run_new.sum())
            sched: list[tuple[int, int]] = []
        else:
            sched = []
            i = 0
            while i < len(running) and budget > 0:
                q = running[i]
                want = min(int(ntok[q] - comp[q]), budget)
                need = int(e.blocks(int(comp[q]) + want)) - int(held[q])
                victim = -1
                while need > free:
                    victim = running.pop()
                    free += int(held[victim])
                    held[victim] = 0
                    comp[victim] = 0
                    waiting.appendleft(victim)
                    preempted = True
                    preemptions += 1
                    if victim == q:
                        break
                if victim == q:
                    break
                free -= need
                held[q] += need
                sched.append((q, want))
                budget -= want
                i += 1
        # -- then waiting requests ---------------------------------------------------------------------------
        if not preempted:
            while budget > 0 and waiting and len(running) < e.max_num_seqs:
                q = waiting[0]
                fresh = comp[q] == 0 and gen[q] == 0
                shared = prefix_tokens if prefix_cached and fresh else 0  # the cache holds these blocks
                hit = max(shared, int(warm[q]), hash_hit(q) if hashed else 0) if fresh else 0  # from free blocks
                hit_blocks = shared // e.block_size
                want = int(ntok[q]) - hit - int(comp[q])
                if not e.chunked_prefill and want > budget:
                    break
                if int(e.blocks(int(ntok[q]))) - hit_blocks > free:  # its whole prompt must fit
                    break
                want = min(want, budget)
                need = int(e.blocks(hit + int(comp[q]) + want)) - hit_blocks - int(held[q])
                free -= need
                held[q] += need
                comp[q] += hit
                waiting.popleft()
                running.append(q)
                sched.append((q, want))
                budget -= want
        ids = np.fromiter((q for q, _ in sched), np.int64, len(sched))
        new = np.fromiter((k for _, k in sched), np.int64, len(sched))
        if run_ids is not None:
            ids, new = np.concatenate([run_ids, ids]), np.concatenate([run_new, new])
        if not ids.size:
            raise ReplayError("no request could be scheduled in an engine with nothing running: the pool cannot "
                              "hold the waiting request")
        # -- the step ----------------------------------------------------------------------------------------
        batch = ids.size
        decoding = (new == 1) & (comp[ids] + 1 == ntok[ids]) & (gen[ids] > 0)
        d = int(decoding.sum())
        pf = ~decoding
        p_tokens = int(new[pf].sum())
        p_seqs = int(pf.sum())
        shape = (d, float(comp[ids][decoding].mean()) if d else 0.0, p_tokens,
                 float(comp[ids][pf].mean()) if p_seqs else 0.0, p_seqs)
        dt = e.step_s(*shape)
        t += dt
        if trace is not None:
            trace.shapes.append(shape)
            trace.t_end.append(t)
        busy += dt
        comp[ids] += new
        sampled = ids[comp[ids] >= ntok[ids]]
        if prefix_blocks and not prefix_cached and (past := ids[comp[ids] >= prefix_tokens]).size:
            # The shared prefix's full blocks are cached from here on: the first request that computed them hands
            # them to the cache (they stay in the pool, referenced by every later request that hits them).
            prefix_cached = True
            held[past[0]] -= prefix_blocks
        if len(sampled):
            again = sampled[gen[sampled] > 0]
            if len(again):
                gaps.append((t - last_token[again]).astype(np.float32))
            newly = sampled[gen[sampled] == 0]
            first[newly] = t
            if hashed:
                assert r.block_hashes is not None
                for q in newly.tolist():
                    for h in r.block_hashes[q]:
                        cache[h] = None
                        cache.move_to_end(h)
                while len(cache) > cache_room:
                    cache.popitem(last=False)
            gen[sampled] += 1
            ntok[sampled] += 1
            last_token[sampled] = t
        end_step(sampled[gen[sampled] >= out_len[sampled]], batch)
    return outcome(workload, sent=sent, first=first, done=done, output_len=out_len,
                   prompt_len=prompt, gaps=np.concatenate(gaps) if gaps else np.zeros(0), api_s=e.api_s,
                   steps=steps, busy_s=busy, preemptions=preemptions, slo=slo, per_request=per_request,
                   timeline=(np.array(timeline.t), np.array(timeline.running), np.array(timeline.waiting)))


def _fits_whole(e: ReplayEngine, running: list[int], ntok: np.ndarray, comp: np.ndarray, held: np.ndarray,
                budget: int, free: int) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """The running requests' share of the step when the pool holds every block they ask for (the common case, done
    in one go): the requests scheduled and their tokens, in order, each capped by what the budget leaves; (None,
    None) where some request would need a preemption (the step is then scheduled one request at a time)."""
    if not running:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ids = np.fromiter(running, np.int64, len(running))
    want = ntok[ids] - comp[ids]
    cum = np.cumsum(want)
    if cum[-1] > budget:
        k = int(np.searchsorted(cum, budget, side="left"))
        ids, want = ids[:k + 1], want[:k + 1].copy()
        want[k] = budget - (int(cum[k - 1]) if k else 0)
    if int(e.blocks(comp[ids] + want).sum() - held[ids].sum()) > free:
        return None, None
    return ids, want


def uniform_step(seconds: float) -> StepTimer:
    """A step model that takes ``seconds`` for every step (for tests and what-ifs)."""
    return lambda *_: seconds


def bucketed(step: StepTimer, context_bucket: int = 16) -> StepTimer:
    """``step`` cached with the contexts rounded to the nearest ``context_bucket`` tokens (a decode step's time moves
    a few parts in a million a token of context; the replay asks the same few thousand shapes again and again)."""
    cache: dict[tuple[int, int, int, int, int], float] = {}

    def timed(d: int, ctx: float, p: int, prefix: float, ps: int) -> float:
        key = (d, round(ctx / context_bucket), p, round(prefix / context_bucket), ps)
        got = cache.get(key)
        if got is None:
            got = cache[key] = step(d, key[1] * context_bucket, p, key[3] * context_bucket, ps)
        return got

    return timed
