"""Current open checkpoints' published config.json files, each planned or refused by name: never a traceback, never
planned as something else (issue #47). The table of what kvprof does with each is docs/model-support.md."""

import pytest
from published_configs import DOC, outcomes, table


@pytest.fixture(scope="module")
def results():
    return {name: (model_type, result, why) for name, model_type, result, why in outcomes()}


def test_every_published_config_is_planned_or_refused_with_a_reason(results):
    assert len(results) == 84
    assert all(r in ("planned", "refused") for _, r, _ in results.values())
    assert all(why for _, r, why in results.values() if r == "refused")


@pytest.mark.parametrize("name, reason", [
    # the two tracebacks (a list where an integer was compared)
    ("MiniMaxAI/MiniMax-M3", "names architecture MiniMaxM3ForCausalLM, which vLLM 0.32 has no model class for"),
    # an hf_quant_config.json vLLM 0.32 does not read as ModelOpt (no producer): it would not start
    ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4", 'names no producer "modelopt"'),
])
def test_what_the_issue_found_silently_wrong_is_refused_by_name(results, name, reason):
    _, result, why = results[name]
    assert result == "refused" and reason in why


def test_the_other_traceback_is_now_a_plan(results):
    # MiMo-V2-Flash's per-layer moe_layer_freq list crashed the DeepSeek reading; its own reader plans it: 9 full and
    # 39 sliding layers, 308.78B parameters (transformers' count and the score bias vLLM loads)
    assert results["XiaomiMiMo/MiMo-V2-Flash"][1:] == (
        "planned", "308.78 · 36.3 · 9 full, 39 sliding · fp8 block 128x128")


def test_nvfp4_builds_are_planned_from_their_hf_quant_config(results):
    # the issue found Qwen3-235B-A22B-NVFP4 planned in bf16 at 54.75 GiB a GPU on 8 B200s, 3.5 times its size:
    # 235B parameters at 9/16 byte and its bf16 embeddings are about 125 GiB, 15.7 a GPU (its routers whole on each)
    assert results["nvidia/Qwen3-235B-A22B-NVFP4"][1:] == (
        "planned", "235.09 · 15.7 · 94 full · modelopt nvfp4, fp8_e4m3 KV cache")


def test_sparse_attention_is_planned_with_its_indexer(results):
    # the issue found DeepSeek-V3.2 planned as V3, its indexer's cache uncounted; GLM-5.2 keeps an indexer on 21 of
    # its 78 layers (index_topk_freq 4, offset 3: its indexer_types' "full" entries)
    assert results["deepseek-ai/DeepSeek-V3.2"][1:] == ("planned", "671.88 · 80.2 · 61 sparse_mla · fp8 block 128x128")
    assert "21 sparse_mla, 57 sparse_mla (no indexer)" in results["zai-org/GLM-5.2-FP8"][2]


def test_llama4_maverick_is_planned_with_its_interleaved_layers(results):
    # the issue found it planned as all-MoE at 181 GiB a GPU on 8 B200s; its 400B parameters in bf16 are 93 GiB
    # (and the RoPE cache)
    assert results["meta-llama/Llama-4-Maverick-17B-128E-Instruct"][1:] == (
        "planned", "400.71 · 93.6 · 36 chunked, 12 full")


def test_the_hybrids_are_planned_with_their_recurrent_layers(results):
    # Nemotron-3-Nano-30B-A3B: 23 Mamba2 layers and 6 attention layers, 31.58B parameters (its listing: 31.6B)
    assert results["nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"][1:] == ("planned", "31.58 · 7.4 · 23 mamba2, 6 full")
    assert results["nvidia/Nemotron-H-56B-Base-8K"][1] == "planned"


def test_the_docs_table_is_what_kvprof_does():
    assert DOC.read_text() == table(), "rerun python tests/published_configs.py --write"


def test_kimi_k2_is_read_as_the_deepseek_v3_architecture_it_declares():
    from published_configs import CONFIGS

    from analysis.model.architecture import Architecture
    from analysis.model.params import count_params

    a = Architecture.from_config(CONFIGS / "moonshotai--Kimi-K2-Instruct")
    assert a.mla is not None and a.moe.num_experts == 384 and a.quantization.method == "fp8"
    p = count_params(a)
    # its card: "32 billion activated parameters and 1 trillion total parameters" (rounded figures)
    assert p.total / 1e12 == pytest.approx(1, abs=0.03) and p.active / 32e9 == pytest.approx(1, abs=0.03)


def test_mimo_7b_is_qwen2s_decoder_without_its_mtp_layers():
    """vLLM's MiMoForCausalLM is Qwen2's decoder; its mapper drops the checkpoint's model.mtp_layers. The count is
    transformers' own Qwen2 on the same config (q/k/v biased, o_proj not, whatever attention_bias says)."""
    import json

    import torch
    import transformers
    from published_configs import CONFIGS

    from analysis.model.architecture import Architecture
    from analysis.model.params import count_params

    cfg = json.loads((CONFIGS / "XiaomiMiMo--MiMo-7B-Base" / "config.json").read_text())
    plain = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "num_nextn_predict_layers")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.Qwen2Config(**plain))
    assert count_params(Architecture.from_config(cfg, "MiMo-7B")).total == sum(
        t.numel() for t in model.parameters())
