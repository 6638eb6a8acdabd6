"""Weight bytes of quantized checkpoints (analysis/model/quantization.py), issue #14.

Every expected number is written out from the layout vLLM allocates (the file named
in each scheme's docstring), never taken from the code under test; the corpus test
holds the whole-model sum against what vLLM logged on real GPUs.
"""

from __future__ import annotations

import json

import pytest

from analysis.catalog import model_dir, resolve_gpu, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import (
    decode_weight_bytes,
    model_loading_bytes,
    rotary_cache_bytes,
    weight_breakdown,
    weight_bytes,
)
from analysis.model.quantization import (
    Awq,
    BitsAndBytes,
    CompressedTensors,
    Fp8,
    Gptq,
    Mxfp4,
    QuantizationError,
    WeightArgs,
    module_matches,
    mxfp4_kernel,
)
from analysis.model.quantization_config import scheme_from_config
from analysis.planning.plan import PlanError, PlanInputs, make_plan
from analysis.vllm.lora import DEFAULT_MAX_LORA_RANK, lora_bytes
from tests.gpu_corpus import load_corpus

GiB = 2**30
N = 4096 * 4096  # one 4096 x 4096 linear layer


# -- one linear layer, by hand -------------------------------------------------------------
@pytest.mark.parametrize("scheme, expected", [
    # AWQ g128: int4 values, fp16 scale and 4-bit zero per (group, column)
    (Awq(group_size=128), N // 2 + (4096 // 128) * 4096 * 2 + (4096 // 128) * 4096 // 2),
    (Awq(group_size=128, zero_point=False), N // 2 + 32 * 4096 * 2),
    # GPTQ on Marlin: symmetric drops qzeros; act-order keeps g_idx + its sort permutation
    (Gptq(group_size=128), N // 2 + 32 * 4096 * 2),
    (Gptq(group_size=128, desc_act=True), N // 2 + 32 * 4096 * 2 + 2 * 4 * 4096),
    (Gptq(group_size=128, sym=False), N // 2 + 32 * 4096 * 2 + 32 * 4096 // 2),
    (Gptq(bits=8, group_size=-1), N + 1 * 4096 * 2),
    # FP8: one byte per weight, float32 scales per tensor / row / 128x128 tile
    (Fp8(), N + 4),
    (Fp8(static_activations=True), N + 4 + 4),
    (Fp8(strategy="channel"), N + 4 * 4096),
    (Fp8(strategy="block", weight_block_size=(128, 128)), N + 4 * 32 * 32),
    # bitsandbytes: nf4 packs two per byte, float32 absmax per 64; double quant: uint8
    # absmax per 64, a float32 per 256 blocks, 256-entry float32 code book; int8: row scales
    (BitsAndBytes(), N // 2 + 4 * (N // 64)),
    (BitsAndBytes(double_quant=True), N // 2 + N // 64 + 4 * (N // 64 // 256) + 4 * 256),
    (BitsAndBytes(bits=8), N + 4 * 4096),
])
def test_one_4096_linear_layer(scheme, expected):
    assert scheme.matrix_bytes(4096, 4096, 2) == expected


@pytest.mark.parametrize("weights, expected", [
    ({"num_bits": 8, "type": "float", "strategy": "channel"}, N + 4 * 4096),          # FP8-dynamic
    ({"num_bits": 8, "type": "float", "strategy": "tensor"}, N + 4),                  # FP8 static
    ({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}, N + 4 * 32 * 32),
    ({"num_bits": 8, "type": "int", "strategy": "channel"}, N + 4 * 4096),            # W8A8 int8
    ({"num_bits": 4, "strategy": "group", "group_size": 128}, N // 2 + 32 * 4096 * 2),  # W4A16
    ({"num_bits": 4, "strategy": "group", "group_size": 128, "symmetric": False},
     N // 2 + 32 * 4096 * 2 + 32 * 4096 // 2),
    ({"num_bits": 4, "strategy": "group", "group_size": 128, "actorder": "group"},
     N // 2 + 32 * 4096 * 2 + 4 * 4096),
    ({"num_bits": 4, "strategy": "channel"}, N // 2 + 4096 * 2),
    # NVFP4: fp8 scale per 16 values, one float32 global scale
    ({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}, N // 2 + N // 16 + 4),
])
def test_compressed_tensors_one_layer(weights, expected):
    scheme = CompressedTensors(groups=((("Linear",), WeightArgs(**weights)),))
    assert scheme.module_bytes("model.layers.0.mlp.up_proj", "linear", 4096, 4096, 2) == expected


def test_mxfp4_one_expert_matrix_and_padding():
    # 4-bit values plus a one-byte e8m0 scale per 32: 0.5 + 1/32 byte per weight
    assert Mxfp4().matrix_bytes(2880, 2880, 2) == 2880 * 2880 // 2 + 2880 * 2880 // 32
    # One gpt-oss MoE layer (32 experts, hidden = intermediate = 2880) on Marlin: hidden
    # padded to 3072 (multiple of 256), intermediate to 2944 (128); bf16 biases.
    h, i = 3072, 2944
    per_expert = (2 * i * h + h * i) * (1 / 2 + 1 / 32) + (2 * i + h) * 2
    got = Mxfp4(kernel="marlin").experts_bytes("model.layers.0.mlp.experts", 32, 2880, 2880, True, True, 2)
    assert got == pytest.approx(32 * per_expert)
    # Triton on Hopper, written out from triton_kernels' layouts: w13 is 5760 x 2880 (out x in):
    # values 2880/2 = 1440 bytes -> 1472 (64) times 5760 -> 5888 (256); scales 5888 x (90 -> 92
    # groups). w2 is 2880 x 2880: values 1472 x 3072, scales 3072 x 92. float32 biases.
    w13 = 1472 * 5888 + 5888 * 92
    w2 = 1472 * 3072 + 3072 * 92
    got = Mxfp4(kernel="triton").experts_bytes("model.layers.0.mlp.experts", 32, 2880, 2880, True, True, 2)
    assert got == 32 * (w13 + w2 + (5760 + 2880) * 4)
    # at TP=2 one rank holds intermediate 1440 -> 1472 (64): w13 2944 x 2880, w2 2880 x 1472
    w13 = 1472 * 3072 + 3072 * 92
    w2 = 768 * 3072 + 3072 * 48
    got = Mxfp4(kernel="triton").experts_bytes("model.layers.0.mlp.experts", 32, 2880, 2880, True, True, 2, tp=2)
    assert got == 2 * 32 * (w13 + w2 + (2944 + 2880) * 4)


@pytest.mark.parametrize("gpu, version, kernel", [
    ("h100-sxm", "0.10.1", "marlin"),   # issue 23278's log: Marlin on H100
    ("h100-sxm", "0.14.1", "triton"),   # issue 33155's log: "Using Triton backend"
    ("h200", None, "triton"),
    ("a100-80gb-sxm", "0.19.0", "marlin"),
    ("b200", None, "marlin"),           # TRT-LLM pads as Marlin does
    ("l40s", None, "marlin"),
])
def test_mxfp4_kernel_per_device(gpu, version, kernel):
    assert mxfp4_kernel(resolve_gpu(gpu)[0].generation, version) == kernel


def test_mxfp4_kernel_follows_the_architecture_not_the_name():
    # vLLM picks the kernel by compute capability: an H800 or a GH200 (SM 9.0, not in the catalog, named in no
    # "h100"/"h200" prefix) runs the Hopper kernel, an RTX 4090 (Ada) Marlin.
    assert mxfp4_kernel("hopper", "0.11.0") == "triton"
    assert mxfp4_kernel("ada", "0.11.0") == "marlin"
    from analysis.catalog import GPU
    gh200 = GPU(name="gh200", display="NVIDIA GH200 96GB", memory_mib=97871, bandwidth_tbs=4.0, bf16_tflops=989,
                generation="hopper")
    a = resolve_model("gpt-oss-20b")[0].with_quantization(None, generation=gh200.generation, vllm_version="0.11.0")
    assert a.quantization.kernel == "triton"


# -- which modules stay unquantized ---------------------------------------------------------
def _llama8b_with(quantization_config: dict) -> Architecture:
    cfg = json.loads((model_dir("llama-3.1-8b") / "config.json").read_text())
    cfg["quantization_config"] = quantization_config
    return Architecture.from_config(cfg)


LLAMA8B_EMBED = 128256 * 4096  # embed_tokens and (untied) lm_head each
LLAMA8B_NORMS = (2 * 32 + 1) * 4096
# q, k, v, o, gate, up, down of one layer, as (out, in)
LLAMA8B_LINEARS = [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096),
                   (14336, 4096), (14336, 4096), (4096, 14336)]


def test_awq_leaves_embeddings_lm_head_and_norms_at_model_dtype():
    a = _llama8b_with({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                       "version": "gemm"})
    w = weight_breakdown(a)
    assert w.embedding == LLAMA8B_EMBED * 2 and w.lm_head == LLAMA8B_EMBED * 2
    layer = sum(o * i // 2 + (i // 128) * o * 2 + (i // 128) * o // 2 for o, i in LLAMA8B_LINEARS)
    assert weight_bytes(a) == 2 * LLAMA8B_EMBED * 2 + 32 * layer + LLAMA8B_NORMS * 2


def test_ignore_list_keeps_named_modules_at_model_dtype():
    fp8 = {"num_bits": 8, "type": "float", "strategy": "channel"}
    base = {"quant_method": "compressed-tensors", "format": "float-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": fp8}}}
    plain = _llama8b_with({**base, "ignore": ["lm_head"]})
    skipped = _llama8b_with({**base, "ignore": ["lm_head", "re:model[.]layers[.]0[.]mlp[.].*"]})
    # layer 0's gate/up/down go back to bf16: 2 bytes each instead of 1 + a float32 per row
    mlp0 = sum(o * i * 2 - (o * i + 4 * o) for o, i in LLAMA8B_LINEARS[4:])
    assert weight_bytes(skipped) - weight_bytes(plain) == mlp0


def test_lm_head_only_when_the_scheme_says_so():
    off = _llama8b_with({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False})
    on = _llama8b_with({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False,
                        "lm_head": True})
    assert weight_breakdown(off).lm_head == LLAMA8B_EMBED * 2
    assert weight_breakdown(on).lm_head == LLAMA8B_EMBED // 2 + (4096 // 128) * 128256 * 2
    assert weight_breakdown(on).embedding == LLAMA8B_EMBED * 2  # embeddings never


def test_mxfp4_leaves_attention_router_embeddings_in_bf16():
    a, _ = resolve_model("gpt-oss-20b")
    b = a.model_copy(update={"quantization": Mxfp4(kernel="marlin")})
    w = weight_breakdown(b)
    assert w.embedding == 201088 * 2880 * 2 and w.lm_head == 201088 * 2880 * 2
    # attention (q 4096, k/v 512, o; biases; sinks) + router (32 x 2880 + bias) + 2 norms, per layer, bf16
    attn = 2880 * 4096 + 2 * 2880 * 512 + 4096 * 2880 + (4096 + 2 * 512) + 2880 + 64
    router = 32 * 2880 + 32
    assert w.other == (24 * (attn + router + 2 * 2880) + 2880) * 2


def test_bitsandbytes_skip_modules_match_a_component():
    # llm_int8_skip_modules match a dotted component (vLLM 0.10 is_layer_skipped_bnb)
    assert module_matches("model.layers.3.mlp.down_proj", ("down_proj",))
    assert not module_matches("model.layers.3.mlp.down_proj", ("up_proj",))
    assert module_matches("model.layers.7.mlp.router", ("model.layers.*.mlp.router",))
    assert module_matches("lm_head", ("lm_head",))


# -- configs and overrides -----------------------------------------------------------------
def test_published_config_shapes_parse():
    s = scheme_from_config({"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                            "weight_block_size": [128, 128]})
    assert isinstance(s, Fp8) and s.strategy == "block" and s.weight_block_size == (128, 128)
    s = scheme_from_config({"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                            "bnb_4bit_use_double_quant": True, "llm_int8_skip_modules": ["lm_head"]})
    assert isinstance(s, BitsAndBytes) and s.bits == 4 and s.double_quant and s.ignore == ("lm_head",)
    s = scheme_from_config({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                            "modules_to_not_convert": ["model.layers.0.mlp"]})
    assert isinstance(s, Fp8) and s.strategy == "channel" and s.ignore == ("model.layers.0.mlp",)
    assert scheme_from_config(None) is None


@pytest.mark.parametrize("cfg, message", [
    ({"quant_method": "hqq"}, "quant_method 'hqq' is not modelled"),
    ({"bits": 4}, "quant_method is missing"),
    ({"quant_method": "compressed-tensors"}, "config_groups"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": "four"}}}},
     "config_groups.g.weights.num_bits"),
    ({"quant_method": "awq", "group_size": "128"}, "group_size must be an integer"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "weight_block_size must be two integers"),
])
def test_bad_quantization_config_names_the_field(cfg, message):
    with pytest.raises(QuantizationError, match=message):
        scheme_from_config(cfg)
    with pytest.raises(UnsupportedArchitecture, match=message):
        _llama8b_with(cfg)


def test_online_fp8_override_of_a_bf16_checkpoint():
    a, _ = resolve_model("llama-3.1-8b")
    q = a.with_quantization("fp8")
    # every linear of the 32 layers in fp8 (+ one float32 scale each); embed, lm_head, norms bf16
    linears = sum(o * i for o, i in LLAMA8B_LINEARS)
    expected = 32 * (linears + 7 * 4) + 2 * LLAMA8B_EMBED * 2 + LLAMA8B_NORMS * 2
    assert weight_bytes(q) == expected == 9_081_201_536
    assert weight_bytes(a) == 16_060_522_496  # unchanged without the override
    # decode reads everything but the (untied) input embedding
    assert decode_weight_bytes(q) == expected - LLAMA8B_EMBED * 2
    plan = make_plan(a, PlanInputs(quantization="fp8", max_model_len=8192))
    # what vLLM's "Model loading took" counts: the weights and the RoPE cache (131,072 positions × 128 × bf16)
    assert plan.weight_bytes == expected + 131_072 * 128 * 2
    # vLLM 0.32's spellings: per-tensor is the same; per-channel adds a float32 per output
    # row, per-block one per 128 x 128 tile
    assert weight_bytes(a.with_quantization("fp8_per_tensor")) == expected
    rows = sum(o for o, _ in LLAMA8B_LINEARS)
    assert weight_bytes(a.with_quantization("fp8_per_channel")) == expected - 32 * 7 * 4 + 32 * 4 * rows
    tiles = sum(-(-o // 128) * -(-i // 128) for o, i in LLAMA8B_LINEARS)
    assert weight_bytes(a.with_quantization("fp8_per_block")) == expected - 32 * 7 * 4 + 32 * 4 * tiles


def test_override_errors():
    a, _ = resolve_model("llama-3.1-8b")
    with pytest.raises(UnsupportedArchitecture, match="needs the checkpoint's quantization_config"):
        a.with_quantization("awq")
    with pytest.raises(UnsupportedArchitecture, match="known: fp8"):
        a.with_quantization("int3")
    g, _ = resolve_model("gpt-oss-20b")
    with pytest.raises(UnsupportedArchitecture, match="does not match"):
        g.with_quantization("gptq")
    with pytest.raises(PlanError, match="needs the checkpoint's quantization_config"):
        make_plan(a, PlanInputs(quantization="gptq", max_model_len=8192))
    assert g.with_quantization("none").quantization is None


def test_in_flight_bitsandbytes_override():
    a, _ = resolve_model("llama-3.1-8b")
    q = a.with_quantization("bitsandbytes")
    # vLLM's loader: quantize_4bit(compress_statistics=True, quant_type="nf4"), blocksize 64:
    # uint8 absmax per 64 values, float32 per 256 blocks, a 256-entry float32 code book
    layer = sum(o * i // 2 + o * i // 64 + 4 * -(-(o * i // 64) // 256) + 4 * 256 for o, i in LLAMA8B_LINEARS)
    assert weight_bytes(q) == 32 * layer + 2 * LLAMA8B_EMBED * 2 + LLAMA8B_NORMS * 2


def test_rotary_cache():
    a, _ = resolve_model("llama-3.1-8b")
    assert rotary_cache_bytes(a) == 131072 * 128 * 2  # 32 MiB
    assert model_loading_bytes(a) == weight_bytes(a) + 32 * 2**20


# -- the corpus: what vLLM logged on real GPUs ---------------------------------------------
CORPUS = {k: r for k, r in load_corpus().items() if r.settings.quantization and r.logged.weights_gib}


def _predicted(record) -> Architecture:
    s = record.settings
    a, _ = resolve_model(s.catalog_model)
    override = s.plan_quantization or (None if a.quantization is not None else s.quantization)
    return a.with_quantization(override, generation=resolve_gpu(s.gpu)[0].generation, vllm_version=s.vllm_version)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_weights_within_2_percent_of_vllm_log(name):
    record = CORPUS[name]
    s = record.settings
    if not model_dir_exists(s.catalog_model):
        pytest.skip(f"catalog model {s.catalog_model} is not in this checkout's catalog")
    a = _predicted(record)
    tp = s.tensor_parallel_size
    # LoRA slots' buffers are allocated while the model loads: "Model loading took" counts them too
    lora = lora_bytes(a, max_loras=s.max_loras, max_lora_rank=s.max_lora_rank or DEFAULT_MAX_LORA_RANK,
                      tp=tp) if s.max_loras else 0
    logged = record.logged.weights_gib * GiB - lora
    assert weight_bytes(a, tp) == pytest.approx(logged, rel=0.02), (
        f"{name}: predicted {weight_bytes(a, tp) / GiB:.3f} GiB, logged {record.logged.weights_gib} GiB")
    # weights plus the RoPE cache vLLM builds alongside them
    assert model_loading_bytes(a, tp) == pytest.approx(logged, rel=0.02)


def test_corpus_holds_quantized_records_that_are_checked():
    checked = [k for k, r in CORPUS.items() if model_dir_exists(r.settings.catalog_model)]
    assert {"llmdbench_gpt_oss_20b_h100", "llmdbench_gpt_oss_120b_h100"} <= set(checked), sorted(CORPUS)


def model_dir_exists(name: str) -> bool:
    try:
        model_dir(name)
    except ValueError:
        return False
    return True


def test_architecture_round_trips_its_scheme():
    """A saved plan stores the architecture as JSON (kvprof plan --save) and reloads it."""
    for name, override in [("gpt-oss-20b", None), ("llama-3.1-8b", "fp8"), ("llama-3.1-8b", "bitsandbytes")]:
        a = resolve_model(name)[0].with_quantization(override, generation="ampere")
        back = Architecture.model_validate(json.loads(json.dumps(a.model_dump(mode="json"))))
        assert back == a and weight_bytes(back) == weight_bytes(a)
    ct = _llama8b_with({"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {
        "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "group", "group_size": 128}}}})
    back = Architecture.model_validate(json.loads(json.dumps(ct.model_dump(mode="json"))))
    assert back == ct and weight_bytes(back) == weight_bytes(ct)
