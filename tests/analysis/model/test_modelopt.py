"""NVIDIA ModelOpt checkpoints (FP8, NVFP4, mixed precision) planned as vLLM 0.32 loads them (issue #47).

Which layer runs which scheme is checked against vLLM's own ModelOpt configs built from the same published files;
bytes against arithmetic written out here; the exclusions against what NVIDIA's model cards say was kept in BF16.
"""

import json
import re
from pathlib import Path

import pytest

from analysis.catalog import resolve_gpu, resolve_model
from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.params import weight_breakdown, weight_matrices
from analysis.planning.plan import PlanInputs, make_plan

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "published_configs"
PLANNED = ["nvidia--DeepSeek-V3.1-NVFP4", "nvidia--Llama-3.1-70B-Instruct-FP8", "nvidia--Qwen3-235B-A22B-NVFP4",
           "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "nvidia--Qwen3.5-122B-A10B-NVFP4",
           "nvidia--Qwen3.5-397B-A17B-NVFP4", "nvidia--Qwen3.6-27B-NVFP4", "nvidia--Qwen3.6-35B-A3B-NVFP4",
           "nvidia--DeepSeek-V3.2-NVFP4", "nvidia--GLM-5-NVFP4", "nvidia--GLM-5.1-NVFP4", "nvidia--GLM-5.2-NVFP4",
           "nvidia--MiniMax-M2.5-NVFP4", "nvidia--MiniMax-M2.7-NVFP4", "nvidia--Kimi-K2.5-NVFP4",
           "nvidia--Kimi-K2.6-NVFP4", "nvidia--Kimi-K2.7-Code-NVFP4", "nvidia--Gemma-4-26B-A4B-NVFP4",
           "nvidia--Gemma-4-31B-IT-NVFP4"]


def _vllm_config(d: Path, names):
    """vLLM's own ModelOpt config for checkpoint ``d``, as ``_verify_quantization`` picks it, with the family's
    fused layers and vLLM's exclude-list rewrite (an identity name mapping: the layers are named as in the
    checkpoint, which is the space the lists are written in)."""
    from vllm.model_executor.layers.quantization.modelopt import (
        ModelOptFp8Config,
        ModelOptMixedPrecisionConfig,
        ModelOptNvFp4Config,
    )
    from vllm.model_executor.models.utils import WeightsMapper

    cfg = json.loads((d / "config.json").read_text())
    q = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config")
    sidecar = d / "hf_quant_config.json"
    side = json.loads(sidecar.read_text()) if sidecar.is_file() else None
    if q is None:
        algo = side["quantization"]["quant_algo"]
        q = {**side, "quant_method": "modelopt_fp4" if algo == "NVFP4" else "modelopt"}
    algo = str((q.get("quantization") or q).get("quant_algo")).upper()
    if algo == "MIXED_PRECISION" and not q.get("quantized_layers"):
        q = {**q, "quantized_layers": side["quantization"]["quantized_layers"]}
    cls = {"NVFP4": ModelOptNvFp4Config, "FP8": ModelOptFp8Config, "MIXED_PRECISION": ModelOptMixedPrecisionConfig}
    vcfg = cls[algo].from_config(q)
    vcfg.packed_modules_mapping = {fused: list(shards) for fused, shards in names.fused}
    vcfg.apply_vllm_mapper(WeightsMapper())
    return vcfg, algo


@pytest.mark.parametrize("checkpoint", PLANNED)
def test_each_layer_gets_the_scheme_vllm_gives_it(checkpoint):
    """For every weight matrix kvprof counts (and every MoE layer's experts), the scheme kvprof prices is the one
    vLLM's ModelOpt config resolves for that vLLM layer: excluded and unlisted layers unquantized, the rest by algo."""
    d = CONFIGS / checkpoint
    a = Architecture.from_config(d)
    q = a.quantization
    vcfg, algo = _vllm_config(d, q.names)
    modules = [(m.name, m.kind) for m in weight_matrices(a) if m.kind not in ("embedding", "router")]
    modules += [(f"model.layers.{i}.mlp.experts", "expert") for i in range(a.num_layers) if a.is_moe_layer(i)]
    seen = set()
    for name, kind in modules:
        layer, _ = q.names.layer(q.names.checkpoint(name))
        if vcfg.is_layer_excluded(layer):
            expected = None
        elif algo == "MIXED_PRECISION":
            expected = vcfg._resolve_quant_algo(layer)
        else:
            expected = algo
        assert q._algo(name, kind) == expected, (name, layer)
        seen.add(expected)
    assert None in seen and len(seen) >= 2  # each of these checkpoints keeps some layers unquantized


@pytest.mark.parametrize("checkpoint", PLANNED)
def test_every_listed_module_is_one_kvprof_names(checkpoint):
    """Each exclude_modules / quantized_layers entry names a module kvprof counts, or one it does not quantize
    (multi-token-prediction layers vLLM does not load, vision towers, embeddings, norms, convolutions): a list in
    names kvprof spells otherwise would leave layers silently quantized."""
    d = CONFIGS / checkpoint
    a = Architecture.from_config(d)
    q = a.quantization
    known = [q.names.checkpoint(m.name) for m in weight_matrices(a)]
    known += [q.names.checkpoint(f"model.layers.{i}.mlp.experts") for i in range(a.num_layers)]
    known += [s for k in known for s in q.names.layer(k)[1]]  # the checkpoint's shards of a fused layer
    # (and routers, which vLLM builds unquantized whatever a list says)
    # (a tied lm_head is the embedding, which vLLM never quantizes)
    not_quantized = re.compile(r"(^|\.)(mtp|visual|vision_tower|embed_vision|mm_projector|embed_tokens|norm|conv1d|"
                               rf"gate|router)(\.|\*|$)|layernorm|layers\.{a.num_layers}(\*|\.|$)"
                               + (r"|^lm_head$" if a.tie_word_embeddings else ""))
    entries = list(q.ignore) + [k for k, _ in q.layers]
    for e in entries:
        pattern = re.compile(re.escape(e).replace(r"\*", ".*") + r"(\..*)?$")
        assert any(pattern.match(k) for k in known) or not_quantized.search(e), e


def test_nemotron3_nano_keeps_attention_and_the_mamba_layers_feeding_it_in_bf16():
    # NVIDIA's card: "keeps the attention layers and the Mamba layers that feed into them in BF16, quantizes
    # remaining layers to NVFP4 and uses FP8 for the KV cache"
    a = Architecture.from_config(CONFIGS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    q = a.quantization
    attention = [i for i, t in enumerate(a.layer_types) if t == "full_attention"]
    mamba = [i for i, t in enumerate(a.layer_types) if t == "recurrent"]
    feeding = {max(m for m in mamba if m < i) for i in attention}
    assert len(attention) == 6 and len(feeding) == 6
    for i in mamba:
        assert q.quantizes(f"model.layers.{i}.mixer.in_proj", "linear") == (i not in feeding), i
    for i in attention:
        assert not q.quantizes(f"model.layers.{i}.self_attn.q_proj", "linear")
    assert q.kv_cache_dtype == "fp8_e4m3"


def test_qwen3_235b_nvfp4_bytes_written_out():
    """Qwen3-235B-A22B-NVFP4: lm_head and routers excluded; attention and experts NVFP4 (9/16 byte a weight: half a
    byte and an fp8 scale per 16), the rest bf16."""
    a = Architecture.from_config(CONFIGS / "nvidia--Qwen3-235B-A22B-NVFP4")
    h, v, L, e, i = 4096, 151936, 94, 128, 1536
    attention = (64 * 128 + 2 * 4 * 128) * h + h * 64 * 128  # q, k, v, o
    nvfp4 = lambda n: n * 9 / 16  # noqa: E731
    expected = (2 * v * h * 2  # embed_tokens, lm_head (excluded): bf16
                + L * (nvfp4(attention) + 4 * 4  # a float32 global scale per matrix
                       + e * h * 2  # router, bf16
                       + (2 * h + 2 * 128) * 2  # two norms, q_norm and k_norm
                       + e * (nvfp4(3 * h * i) + 4 * 3 * 3))  # experts and their float32 scalars
                + h * 2)  # final norm
    assert weight_breakdown(a).total == pytest.approx(expected, rel=1e-9)


def test_the_nvfp4_experts_pad_as_each_gpus_kernel_does():
    """Nemotron-3-Nano's routed experts (hidden 2688, intermediate 1856, 128 of them, relu² so not gated), one MoE
    layer, one rank: FlashInfer TRT-LLM on datacenter Blackwell pads hidden to 256 and the intermediate to 128;
    Marlin on Hopper pads the intermediate to 64 (1856 is already); the checkpoint layout pads nothing."""
    a = Architecture.from_config(CONFIGS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    layer = next(i for i in range(a.num_layers) if a.is_moe_layer(i))
    scalars = 128 * 4 * 3 * 2  # float32 weight and input scales, per expert and matrix

    def experts(generation, segment=None):
        q = a.quantization.for_device(generation, segment=segment)
        return q.experts_bytes(f"model.layers.{layer}.mlp.experts", 128, 2688, 1856, False, False, 2)

    assert experts("blackwell", "datacenter") == 128 * 9 / 16 * 2 * 1920 * 2816 + scalars  # 778,567,680 B + scalars
    assert experts("hopper") == 128 * 9 / 16 * 2 * 1856 * 2688 + scalars
    assert experts(None) == experts("hopper")
    # an RTX Blackwell (sm_120) runs other backends, not analysed: the checkpoint's layout
    assert experts("blackwell", "consumer") == experts(None)


def test_the_checkpoints_kv_dtype_is_what_auto_means():
    """vLLM resolves --kv-cache-dtype auto to the ModelOpt checkpoint's kv_cache_quant_algo (FP8 → fp8_e4m3);
    a KV dtype given on the command line wins."""
    a = Architecture.from_config(CONFIGS / "nvidia--Qwen3-235B-A22B-NVFP4")
    h100 = resolve_gpu("h100")[0]
    auto = make_plan(a, PlanInputs(tensor_parallel_size=4), h100)
    assert auto.kv_cache_dtype == "fp8_e4m3" and auto.kv_cache_dtype_from == "checkpoint"
    assert auto.kv_bytes_per_token == 94 * 1 * 128 * 2 * 1  # 4 KV heads over 4 ranks, K and V, one byte
    given = make_plan(a, PlanInputs(tensor_parallel_size=4, kv_cache_dtype="bfloat16"), h100)
    assert given.kv_cache_dtype_from == "option" and given.kv_bytes_per_token == 94 * 128 * 2 * 2


def test_a_compressed_tensors_kv_cache_scheme_makes_auto_fp8():
    # attention.py: "llm-compressor models declare an FP8 KV-cache scheme in their checkpoint config. Honor it only
    # when the user did not explicitly pick a kv_cache_dtype"
    cfg = json.loads((resolve_model("qwen3-8b")[1] / "config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"], "weights": {
            "num_bits": 8, "type": "float", "strategy": "channel"}}},
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}}
    plan = make_plan(Architecture.from_config(cfg, "qwen3-8b-fp8-kv"), PlanInputs(), resolve_gpu("h100")[0])
    assert plan.kv_cache_dtype == "fp8" and plan.kv_bytes_per_token == 36 * 8 * 128 * 2


def _checkpoint(tmp_path, config, side):
    (tmp_path / "config.json").write_text(json.dumps(config))
    if side is not None:
        (tmp_path / "hf_quant_config.json").write_text(json.dumps(side))
    return tmp_path


def _qwen3_8b():
    return json.loads((resolve_model("qwen3-8b")[1] / "config.json").read_text())


NVFP4_FILE = {"producer": {"name": "modelopt", "version": "0.29.0"},
              "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                               "exclude_modules": ["lm_head"]}}


def test_the_sidecar_is_read_only_without_a_quantization_config(tmp_path):
    bf16 = Architecture.from_config(_checkpoint(tmp_path, _qwen3_8b(), None))
    assert bf16.quantization is None
    nvfp4 = Architecture.from_config(_checkpoint(tmp_path, _qwen3_8b(), NVFP4_FILE))
    assert nvfp4.quantization.algo == "NVFP4" and nvfp4.quantization.kv_cache_dtype is None
    # 8.19B parameters, the 36 layers' 6.95B matrices at 9/16 byte: far under the bf16 16.4 GB
    assert weight_breakdown(nvfp4).total < 0.5 * weight_breakdown(bf16).total
    # config.json's own quantization_config wins (transformers_utils/config.py)
    fp8 = _qwen3_8b() | {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    assert Architecture.from_config(_checkpoint(tmp_path, fp8, NVFP4_FILE)).quantization.method == "fp8"


@pytest.mark.parametrize("side, match", [
    # what vLLM 0.32 does not read as ModelOpt, or refuses to start on
    ({"quantization": {"quant_algo": "NVFP4"}}, 'names no producer "modelopt"'),
    ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION"}},
     "reads only FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4 from this file"),
    ({"producer": {"name": "modelopt"}}, 'no "quantization" object'),
    ({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"}},
     "KV cache is NVFP4"),
])
def test_a_sidecar_vllm_would_not_load_is_refused_by_name(tmp_path, side, match):
    with pytest.raises(UnsupportedArchitecture, match=match):
        Architecture.from_config(_checkpoint(tmp_path, _qwen3_8b(), side))


def test_a_family_whose_checkpoint_names_kvprof_has_not_read_is_refused(tmp_path):
    cfg = json.loads((resolve_model("gemma-3-27b")[1] / "config.json").read_text())
    with pytest.raises(UnsupportedArchitecture, match="does not know how this family's checkpoint names its modules"):
        Architecture.from_config(_checkpoint(tmp_path, cfg, NVFP4_FILE))


def test_a_mixed_precision_config_without_its_layers_takes_the_files(tmp_path):
    # weight_utils.get_quant_config: config.json's MIXED_PRECISION without quantized_layers reads hf_quant_config.json
    layers = {f"model.layers.{i}.mlp.{p}": {"quant_algo": "NVFP4", "group_size": 16}
              for i in range(36) for p in ("gate_proj", "up_proj", "down_proj")}
    cfg = _qwen3_8b() | {"quantization_config": {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
                                                 "producer": {"name": "modelopt"}}}
    side = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "MIXED_PRECISION",
                                                               "quantized_layers": layers}}
    q = Architecture.from_config(_checkpoint(tmp_path, cfg, side)).quantization
    assert q.quantizes("model.layers.3.mlp.up_proj", "linear")
    assert not q.quantizes("model.layers.3.self_attn.q_proj", "linear")  # not listed: unquantized
    assert not q.quantizes("lm_head", "lm_head")
