"""The serving replay (issue #49) against vLLM 0.32's scheduler rules, each case worked out by hand with a step
model whose times are written out here (analysis/serving/replay.py follows v1/core/sched/scheduler.py)."""

import numpy as np
import pytest

from analysis import catalog
from analysis.planning.plan import PlanInputs, make_plan
from analysis.serving.arrivals import Requests
from analysis.serving.replay import ReplayEngine, ReplayError, full_attention_blocks, replay, uniform_step
from analysis.serving.workload import ServedWorkload, requests

DT = 0.01  # every step takes 10 ms unless a case says otherwise


def engine(*, blocks: int = 10_000, block_size: int = 16, max_num_seqs: int = 256, budget: int = 8192,
           max_model_len: int = 4096, chunked: bool = True, prefix_caching: bool = False, step=None) -> ReplayEngine:
    return ReplayEngine(num_blocks=blocks, block_size=block_size, max_num_seqs=max_num_seqs,
                        max_num_batched_tokens=budget, max_model_len=max_model_len, chunked_prefill=chunked,
                        prefix_caching=prefix_caching, blocks_at=full_attention_blocks(max_model_len, block_size),
                        step_s=step or uniform_step(DT))


def given(arrival, prompt, output, prefix: int = 0) -> Requests:
    return Requests(arrival_s=np.array(arrival, float), prompt_len=np.array(prompt), output_len=np.array(output),
                    prefix_len=prefix)


def workload(n: int, **kw) -> ServedWorkload:
    return ServedWorkload(num_requests=n, prompt_len=kw.pop("prompt_len", 10), output_len=kw.pop("output_len", 2),
                          **kw)


def test_one_request_prefills_in_one_step_then_decodes_one_token_a_step():
    # prompt 100 within the budget: step 1 prefills it and samples token 1 (t = 0.01); tokens 2–5 one a step.
    o = replay(engine(), workload(1, prompt_len=100, output_len=5), given([0], [100], [5]))
    assert o.steps == 5
    assert o.ttft.mean_s == pytest.approx(0.01)
    assert o.e2el.mean_s == pytest.approx(0.05)
    assert o.tpot.mean_s == pytest.approx((0.05 - 0.01) / 4)
    assert o.itl.mean_s == pytest.approx(0.01) and o.itl.p99_s == pytest.approx(0.01)
    assert o.output_tokens_per_s == pytest.approx(5 / 0.05)


def test_a_prompt_longer_than_the_budget_is_chunked():
    # budget 100, prompt 250: chunks of 100, 100, 50; the third samples token 1 at 0.03, token 2 at 0.04.
    o = replay(engine(budget=100), workload(1, prompt_len=250), given([0], [250], [2]))
    assert o.ttft.mean_s == pytest.approx(0.03) and o.e2el.mean_s == pytest.approx(0.04) and o.steps == 4


def test_without_chunked_prefill_a_prompt_past_the_budget_never_runs():
    with pytest.raises(ReplayError, match="no request could be scheduled"):
        replay(engine(budget=100, chunked=False), workload(1, prompt_len=250), given([0], [250], [2]))


def test_max_num_seqs_queues_the_rest_of_a_closed_loop():
    # 4 requests in flight at once (closed loop), max_num_seqs 2, prompt 10, output 3: r0 and r1 prefill in step 1
    # (first tokens at 0.01) and decode in steps 2–3 (ending at 0.03); r2 and r3 then run steps 4–6.
    o = replay(engine(max_num_seqs=2), workload(4, output_len=3, max_concurrency=4), given([0] * 4, [10] * 4, [3] * 4))
    assert o.ttft.mean_s == pytest.approx((0.01 + 0.01 + 0.04 + 0.04) / 4)
    assert o.e2el.mean_s == pytest.approx((0.03 + 0.03 + 0.06 + 0.06) / 4)
    assert o.duration_s == pytest.approx(0.06) and o.output_tokens_per_s == pytest.approx(12 / 0.06)
    assert (o.max_running, o.max_waiting, o.preemptions) == (2, 2, 0)


def test_the_client_keeps_at_most_max_concurrency_in_flight():
    # max_concurrency 1: each request is sent as the one before ends (3 steps each), so every TTFT is one step.
    o = replay(engine(), workload(3, output_len=3, max_concurrency=1), given([0] * 3, [10] * 3, [3] * 3))
    assert o.ttft.p99_s == pytest.approx(0.01) and o.duration_s == pytest.approx(0.09) and o.max_running == 1


def test_a_request_held_at_the_clients_semaphore_is_timed_from_its_send():
    # Arrivals at 0, 5 and 10 ms, one in flight at most, 3 steps a request: r1 and r2 wait at the client until the
    # one before ends (30 and 60 ms), and vLLM's client times them from there: every TTFT is one step.
    o = replay(engine(), workload(3, output_len=3, request_rate=100.0, max_concurrency=1),
               given([0, 0.005, 0.01], [10] * 3, [3] * 3), per_request=True)
    assert o.requests.sent_s == pytest.approx([0, 0.03, 0.06])
    assert o.requests.ttft_s == pytest.approx([0.01] * 3)


def test_running_requests_take_the_budget_before_a_new_prompt():
    # budget 100. r0 (prompt 10, 10 tokens) arrives at 0 and decodes from step 2; r1 (prompt 200) arrives at 0.015,
    # is seen at the end of step 2 (0.02), and gets what r0's one token leaves: 99, 99, then its last 2 tokens in
    # step 5, which samples its first token at 0.05: TTFT 0.05 − 0.015.
    o = replay(engine(budget=100), workload(2, request_rate=1.0), given([0, 0.015], [10, 200], [10, 2]),
               per_request=True)
    assert o.requests.ttft_s == pytest.approx([0.01, 0.05 - 0.015])


def test_when_blocks_run_out_the_newest_request_is_preempted_and_recomputed():
    # 4 usable blocks of 16 tokens (5 with the null block); two 16-token prompts, 40 tokens each. Both are
    # admitted (a prompt's one block fits); at 32 tokens each needs a third block and the pool is empty, so the
    # newest (r1) is preempted, freed and recomputed later. r0 runs every step: prefill + 39 decodes = 0.40 s.
    o = replay(engine(blocks=5), workload(2, max_concurrency=2), given([0, 0], [16, 16], [40, 40]), per_request=True)
    assert o.preemptions >= 1 and o.completed == 2
    r0, r1 = o.requests.e2el_s
    assert r0 == pytest.approx(0.40) and r1 > 0.40


def test_a_replay_past_its_bounds_is_refused_before_it_runs():
    # 20,000 requests of 2,000 tokens: 40 M output tokens, past the 20 M a replay holds in memory
    with pytest.raises(ReplayError, match="40,000,000 output tokens to replay; at most 20,000,000"):
        replay(engine(), workload(20_000, output_len=2000, max_concurrency=8))
    # one sequence a step: 10,000 requests of 1,000 tokens take at least 10 M steps
    with pytest.raises(ReplayError, match="at least 10,000,000 engine steps"):
        replay(engine(max_num_seqs=1), workload(10_000, output_len=1000, max_concurrency=1))


def test_a_prompt_larger_than_the_pool_is_refused_by_name():
    with pytest.raises(ReplayError, match="needs more KV blocks than the pool"):
        replay(engine(blocks=3), workload(1, prompt_len=100), given([0], [100], [2]))


def test_a_shared_prefix_is_prefilled_once():
    # A step costs 1 ms a prompt token + 10 ms. Prompt 64 with a 32-token shared prefix (two full 16-token blocks):
    # r0 prefills all 64 (74 ms); r1, sent as r0 ends, finds the prefix cached and prefills 32 (42 ms).
    def step(d, ctx, p, prefix, ps):
        return 0.001 * p + 0.01

    load = workload(2, prompt_len=64, prefix_len=32, max_concurrency=1, first_prompt_cached=False)
    o = replay(engine(prefix_caching=True, step=step), load, given([0, 0], [64, 64], [2, 2], prefix=32),
               per_request=True)
    assert o.requests.ttft_s == pytest.approx([0.074, 0.042])
    off = replay(engine(prefix_caching=False, step=step), load, given([0, 0], [64, 64], [2, 2], prefix=32),
                 per_request=True)
    assert off.requests.ttft_s == pytest.approx([0.074, 0.074])


def test_request_0s_prompt_is_cached_by_the_clients_warm_up():
    # vllm bench serve sends input_requests[0] before the run (benchmarks/serve.py: the ready check and warm-ups use
    # it). With prefix caching its full blocks are cached but the last token's: a 100-token prompt in 16-token blocks
    # keeps (100 − 1) // 16 = 6 blocks, 96 tokens, and prefills 4 (14 ms); request 1, another prompt, prefills 100.
    def step(d, ctx, p, prefix, ps):
        return 0.001 * p + 0.01

    o = replay(engine(prefix_caching=True, step=step), workload(2, prompt_len=100, max_concurrency=1),
               given([0, 0], [100, 100], [2, 2]), per_request=True)
    assert o.requests.ttft_s == pytest.approx([0.014, 0.110])
    cold = replay(engine(prefix_caching=False, step=step), workload(2, prompt_len=100, max_concurrency=1),
                  given([0, 0], [100, 100], [2, 2]), per_request=True)
    assert cold.requests.ttft_s == pytest.approx([0.110, 0.110])


def test_lengths_are_drawn_as_vllms_random_dataset_draws_them():
    from vllm.benchmarks.datasets.utils import get_sampling_params

    class Tokenizer:  # what get_sampling_params asks of a tokenizer
        vocab_size = 32_000

        @staticmethod
        def num_special_tokens_to_add() -> int:
            return 0

    r = requests(ServedWorkload(num_requests=500, prompt_len=300, output_len=120, range_ratio=0.4, seed=7))
    inp, out, _ = get_sampling_params(np.random.default_rng(7), 500, 0.4, 300, 120, Tokenizer())
    assert (r.prompt_len == inp).all() and (r.output_len == out).all()


def test_arrivals_are_poisson_or_gamma_at_the_rate():
    for burstiness in (1.0, 0.25):
        r = requests(ServedWorkload(num_requests=20_000, prompt_len=10, output_len=2, request_rate=5.0,
                                    burstiness=burstiness))
        gaps = np.diff(r.arrival_s)
        assert gaps.mean() == pytest.approx(1 / 5.0, rel=0.03)
        # gamma with shape b: coefficient of variation 1 / sqrt(b) (1 for Poisson)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / burstiness ** 0.5, rel=0.05)


def test_bad_workloads_are_refused_by_field():
    with pytest.raises(ValueError, match="prefix_len 64 must be shorter"):
        ServedWorkload(num_requests=1, prompt_len=64, output_len=1, prefix_len=64)
    with pytest.raises(ValueError, match="give a rate or a cap"):
        ServedWorkload(num_requests=200_000, prompt_len=64, output_len=1)
    with pytest.raises(ReplayError, match="passes max_model_len"):
        replay(engine(max_model_len=256), workload(1, prompt_len=250, output_len=10), given([0], [250], [10]))


def test_a_planned_engine_queues_past_what_its_pool_holds():
    """Llama-3.1-8B on an H100 at 8,192 tokens: a closed loop of 2,000 in flight with 4,000-token prompts and
    answers cannot all run; the replay runs what fits (max_num_seqs 1,024 at most, KV first), queues the rest, and
    its TPOT is a decode step of what runs, not of 2,000."""
    from analysis.planning.served import replay_engine

    a, gpu, inputs = catalog.resolve_model("llama-3.1-8b")[0], catalog.gpu("h100-sxm"), PlanInputs(max_model_len=8192)
    e = replay_engine(a, inputs, gpu, make_plan(a, inputs, gpu))
    o = replay(e, ServedWorkload(num_requests=2000, prompt_len=4000, output_len=64, max_concurrency=2000))
    fit = (e.usable_blocks) // 250  # 4,000 prompt tokens = 250 blocks of 16: what the pool admits at once
    assert o.max_running <= min(e.max_num_seqs, fit + 1)
    assert o.max_waiting >= 2000 - fit - 1
    assert o.ttft.p99_s > o.tpot.mean_s * 64  # the last ones queued for at least one whole lifetime


@pytest.mark.parametrize("inputs, words", [
    (PlanInputs(max_model_len=8192, pipeline_parallel_size=2), "--pp above 1"),
])
def test_what_the_replay_does_not_model_is_refused_by_name(inputs, words):
    from analysis.planning.served import replay_engine

    a, gpu = catalog.resolve_model("llama-3.1-8b")[0], catalog.gpu("h100-sxm")
    with pytest.raises(ReplayError, match=words):
        replay_engine(a, inputs, gpu, make_plan(a, inputs, gpu))


def test_a_replayed_figure_is_its_steps_weighted():
    """The closed loop of test_max_num_seqs_queues_the_rest_of_a_closed_loop as weighted steps: every request is
    sent at 0; r0 and r1's first tokens come with step 1 (the two prompts, 20 tokens), r2 and r3's with step 4
    (after the two decode steps of r0 and r1). Mean TTFT: step 1 for all four (1), the decode steps and step 4 for
    two of four (0.5 each): 2.5 steps = 25 ms, the replay's mean. Mean TPOT: each request's 2 tokens after the
    first over its 2 decode steps: one step."""
    from analysis.serving.replay import StepTrace
    from analysis.serving.schedules import figure_weights

    trace = StepTrace([], [])
    out = np.array([3] * 4)
    o = replay(engine(max_num_seqs=2), workload(4, output_len=3, max_concurrency=4), given([0] * 4, [10] * 4, out),
               per_request=True, trace=trace)
    ttft = figure_weights(trace, o, out, "ttft", "mean")
    assert ttft[(0, 0.0, 20, 0.0, 2)] == pytest.approx(1.0 + 0.5)  # steps 1 and 4 carry the same two prompts
    assert sum(ttft.values()) * DT == pytest.approx(o.ttft.mean_s)
    tpot = figure_weights(trace, o, out, "tpot", "mean")
    assert sum(tpot.values()) == pytest.approx(1.0) and all(k[0] == 2 for k in tpot)
    median = figure_weights(trace, o, out, "ttft", "median")  # the 2nd of the sorted TTFTs: r1's, one step
    assert sum(median.values()) == pytest.approx(1.0)
