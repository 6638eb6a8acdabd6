"""kvprof refuses a config.json naming a model class vLLM 0.32 does not have (issue #47)."""

import json
import re
import sys
from pathlib import Path

import pytest

from analysis.model.architecture import Architecture, UnsupportedArchitecture
from analysis.model.vllm_models import supported_architectures, transformers_backend_architectures

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "tests" / "fixtures" / "published_configs"


def test_the_kept_list_is_the_installed_vllms_registry():
    pytest.importorskip("vllm")
    sys.path.insert(0, str(ROOT / "tests"))
    from vllm_models import installed, installed_transformers_backend

    assert sorted(supported_architectures()) == installed(), "run: python tests/vllm_models.py --write"
    assert sorted(transformers_backend_architectures()) == installed_transformers_backend(), \
        "run: python tests/vllm_models.py --write"


@pytest.mark.parametrize("checkpoint, arch", [
    # Step-3.7-Flash's published config names Step3p7FlashForCausalLM; vLLM 0.32 registers only the VL wrapper
    # Step3p7ForConditionalGeneration
    ("stepfun-ai--Step-3.7-Flash", "Step3p7FlashForCausalLM"),
    # MiniMax-M3's names MiniMaxM3ForCausalLM; vLLM 0.32 has MiniMaxM3SparseForCausalLM and the VL wrapper
    ("MiniMaxAI--MiniMax-M3", "MiniMaxM3ForCausalLM"),
])
def test_an_architecture_vllm_has_no_class_for_is_refused_by_name(checkpoint, arch):
    assert arch not in supported_architectures()
    with pytest.raises(UnsupportedArchitecture, match=re.escape(f"names architecture {arch}, which vLLM 0.32 has no "
                                                                "model class for")):
        Architecture.from_config(CONFIGS / checkpoint)


def test_a_registered_architecture_passes_and_a_malformed_list_is_refused():
    cfg = json.loads((ROOT / "analysis" / "catalog" / "models" / "tiny-llama-gqa" / "config.json").read_text())
    assert Architecture.from_config(cfg, "t").num_layers == 4
    assert Architecture.from_config({**cfg, "architectures": []}, "t").num_layers == 4
    for bad in ("LlamaForCausalLM", [1], {"a": 1}):
        with pytest.raises(UnsupportedArchitecture, match="architectures must be a list of class names"):
            Architecture.from_config({**cfg, "architectures": bad}, "t")
