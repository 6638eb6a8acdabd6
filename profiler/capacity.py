"""Start a vLLM engine and read back the capacity it settled on.

Run as a child process (``python -m profiler.capacity --model DIR ...``): it builds
``vllm.LLM`` with dummy weights, prints one JSON line of capacity facts, and exits.
The sweep's engine child records the same facts through :func:`read_capacity`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

# Engine core and worker in this process: a child per engine is already isolated,
# and skipping two more interpreter start-ups saves ~30 s per engine on CPU.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

CAPACITY_PREFIX = "KVPROF_CAPACITY "


def read_capacity(llm: Any) -> dict[str, Any]:
    """The engine's own capacity facts (attribute names as in vLLM 0.32; newer
    fields read with a fallback so older releases still report what they have)."""
    cfg = llm.llm_engine.vllm_config
    cc, sc = cfg.cache_config, cfg.scheduler_config
    return {
        "num_gpu_blocks": cc.num_gpu_blocks,
        "block_size": cc.block_size,
        "cache_dtype": str(cc.cache_dtype),
        "kv_cache_size_tokens": getattr(cc, "kv_cache_size_tokens", None),
        "kv_cache_max_concurrency": getattr(cc, "kv_cache_max_concurrency", None),
        "kv_cache_memory_bytes": getattr(cc, "kv_cache_memory_bytes", None),
        "max_model_len": cfg.model_config.max_model_len,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_num_seqs": sc.max_num_seqs,
        "async_scheduling": bool(getattr(sc, "async_scheduling", False)),
        "enable_chunked_prefill": bool(getattr(sc, "enable_chunked_prefill", True)),
        "tensor_parallel_size": cfg.parallel_config.tensor_parallel_size,
        "model_dtype": str(cfg.model_config.dtype).removeprefix("torch."),
        "enable_prefix_caching": bool(getattr(cc, "enable_prefix_caching", False)),
        "mamba_cache_mode": getattr(cc, "mamba_cache_mode", None),
        "mamba_ssm_cache_dtype": getattr(cc, "mamba_ssm_cache_dtype", None),
    }


def read_engine_mode(llm: Any) -> dict[str, Any]:
    """How the engine runs (analysis.results.schema.EngineMode): the vLLM choices that change what
    a step time means — async scheduling, the model runner, CUDA graphs, compilation, processes."""
    import vllm

    from analysis.results.schema import TESTED_VLLM_VERSIONS

    cfg = llm.llm_engine.vllm_config
    cc = getattr(cfg, "compilation_config", None)

    def name(x: Any) -> str | None:
        return None if x is None else str(getattr(x, "name", x))

    try:
        from vllm.platforms import current_platform

        platform = str(getattr(current_platform, "device_type", "") or type(current_platform).__name__)
    except Exception:
        platform = None
    return {
        "vllm_version": vllm.__version__,
        "tested_vllm_version": vllm.__version__ in TESTED_VLLM_VERSIONS,
        "async_scheduling": bool(getattr(cfg.scheduler_config, "async_scheduling", False)),
        "model_runner": None if not hasattr(cfg, "use_v2_model_runner") else
        ("v2" if cfg.use_v2_model_runner else "v1"),
        "cudagraph_mode": name(getattr(cc, "cudagraph_mode", None)),
        "compilation_mode": name(getattr(cc, "mode", None)),
        "enforce_eager": getattr(cfg.model_config, "enforce_eager", None),
        "multiprocessing": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "1",
        "platform": platform,
    }


def build_llm(llm_kwargs: dict[str, Any]) -> Any:
    """``vllm.LLM(**llm_kwargs)``, nothing added: the caller's kwargs are exactly what runs."""
    from vllm import LLM

    return LLM(**llm_kwargs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="model directory holding config.json")
    ap.add_argument("--engine-args", default="{}", help="JSON object passed to vllm.LLM")
    ns = ap.parse_args(argv)
    kwargs = {"model": ns.model, "load_format": "dummy", "skip_tokenizer_init": True, "disable_log_stats": False}
    kwargs.update(json.loads(ns.engine_args))
    t0 = time.perf_counter()
    llm = build_llm(kwargs)
    facts = read_capacity(llm)
    facts["startup_s"] = time.perf_counter() - t0
    import vllm

    facts["vllm_version"] = vllm.__version__
    # One tagged line: engines log freely on stdout, the parent greps for this.
    print(CAPACITY_PREFIX + json.dumps(facts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
