"""Request traces in the published formats (Azure LLM inference, Mooncake), read as the replay's requests, and a
trace's shared prefixes hitting the replay's prefix cache (issue #49)."""

import numpy as np
import pytest
from helpers import ROOT

from analysis.serving.arrivals import Requests
from analysis.serving.replay import ReplayEngine, full_attention_blocks, replay
from analysis.serving.trace import TraceError, read_trace
from analysis.serving.workload import ServedWorkload, trace_workload

TRACES = ROOT / "tests/fixtures/traces"


def test_an_azure_trace_is_read_as_its_rows_say():
    r = read_trace(TRACES / "azure_code_head.csv")
    assert len(r.prompt_len) == 20
    # rows 1-3: 18:17:03.9799600 4808/10, 18:17:04.0319600 3180/8, 18:17:04.0781490 110/27
    assert r.arrival_s[:3] == pytest.approx([0.0, 0.052, 0.098189])
    assert r.prompt_len[:3].tolist() == [4808, 3180, 110] and r.output_len[:3].tolist() == [10, 8, 27]
    assert r.arrival_s[-1] == pytest.approx(34.4626860 - 3.9799600 + 0.0, abs=1e-6)  # 18:17:34.4626860
    assert r.block_hashes is None


def test_a_mooncake_trace_keeps_its_block_hashes():
    r = read_trace(TRACES / "mooncake_conversation_head.jsonl", limit=8)
    assert len(r.prompt_len) == 8
    assert r.arrival_s.tolist() == [0, 0, 0, 0, 0, 0, 3.0, 3.0]  # milliseconds in the file
    assert r.prompt_len[0] == 6758 and r.output_len[0] == 500
    assert r.block_hashes[3] == [0, 42, 43, 44, 45] and r.hash_block_tokens == 512
    # 6,758 prompt tokens in 512-token blocks: 14 hashes
    assert len(r.block_hashes[0]) == -(-6758 // 512)


@pytest.mark.parametrize("text, words", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,0,10\n", "line 2: ContextTokens '0'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,10\n", "line 2: TIMESTAMP 'yesterday'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:05,10,10\n2023-11-16 18:17:04,10,10\n",
     "line 3: TIMESTAMP 2023-11-16 18:17:04 is before"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": -5, '
     '"output_length": 1}\n', "line 2: input_length"),
    ('{"timestamp": 0, "input_length": 5\n', "line 1: not JSON"),
    ("prompt,answer\n1,2\n", "neither an Azure LLM inference trace"),
])
def test_a_bad_trace_is_refused_by_line_and_field(tmp_path, text, words):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match=words):
        read_trace(path)


def test_a_trace_shares_its_prefix_through_the_prefix_cache():
    # Two 1,024-token prompts in 512-token hash blocks, one after the other: [1, 2] then [1, 3]. The second finds
    # block 1 cached and prefills 512 tokens. A step costs 1 ms a prompt token + 10 ms: 1,034 ms, then 522 ms.
    def step(d, ctx, p, prefix, ps):
        return 0.001 * p + 0.01

    e = ReplayEngine(num_blocks=10_000, block_size=16, max_num_seqs=8, max_num_batched_tokens=8192,
                     max_model_len=4096, chunked_prefill=True, prefix_caching=True,
                     blocks_at=full_attention_blocks(4096, 16), step_s=step)
    reqs = Requests(arrival_s=np.zeros(2), prompt_len=np.array([1024, 1024]), output_len=np.array([2, 2]),
                    prefix_len=0, block_hashes=[[1, 2], [1, 3]], hash_block_tokens=512)
    w = ServedWorkload(num_requests=2, prompt_len=1024, output_len=2, max_concurrency=1, first_prompt_cached=False)
    o = replay(e, w, reqs, per_request=True)
    assert o.requests.ttft_s == pytest.approx([1.034, 0.522])


def test_a_trace_workload_replays_at_its_timestamps_and_speed():
    w = trace_workload(str(TRACES / "azure_code_head.csv"), num_requests=10, speed=2.0)
    assert (w.num_requests, w.trace_speed) == (10, 2.0)
    from analysis.serving.workload import requests

    r = requests(w)
    assert r.arrival_s[1] == pytest.approx(0.052 / 2)
    with pytest.raises(ValueError, match="drop the request rate"):
        ServedWorkload(num_requests=2, prompt_len=10, output_len=2, trace="t.csv", request_rate=3.0)


def test_plan_replays_a_trace():
    import json

    from typer.testing import CliRunner

    from profiler.cli import app

    res = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "32768",
                                   "--trace", str(TRACES / "mooncake_conversation_head.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    o = json.loads(res.stdout)["served"]["outcome"]
    assert o["completed"] == 10 and o["workload"]["trace"].endswith("mooncake_conversation_head.jsonl")
    # the last request arrives at 9 s: the run lasts at least that
    assert o["duration_s"] > 9.0
    bad = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--trace",
                                   str(TRACES / "SOURCE.md")])
    assert bad.exit_code == 2 and "--trace" in bad.stderr and "neither an Azure" in bad.stderr
    device = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--trace", "/dev/zero"])
    assert device.exit_code == 2 and "--trace /dev/zero is not a regular file" in device.stderr


def test_plan_never_saves_over_the_trace_it_replays(tmp_path):
    from typer.testing import CliRunner

    from profiler.cli import app

    trace = tmp_path / "t.jsonl"
    text = (TRACES / "mooncake_conversation_head.jsonl").read_text()
    trace.write_text(text)
    res = CliRunner().invoke(app, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "32768",
                                   "--trace", str(trace), "--save", str(trace)])
    assert res.exit_code == 2 and "--save" in res.stderr
    assert trace.read_text() == text
