"""The model classes vLLM 0.32 has: its registry's architecture names (``vllm/model_executor/models/registry.py``,
``ModelRegistry.get_supported_archs()``), kept in ``vllm_models_0_32.txt`` beside this file.

A config.json whose ``architectures`` names a class outside this list is one vLLM 0.32 has no model class for: it
would refuse it, or run it through its Transformers modeling backend, whose memory kvprof does not plan. The list
is checked against the installed vLLM by ``tests/analysis/model/test_vllm_models.py``; after a vLLM upgrade,
``python tests/vllm_models.py --write`` regenerates it (and the Transformers-backend list) from the installed
package.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

LIST = Path(__file__).with_name("vllm_models_0_32.txt")
# Of those, the classes vLLM maps to its Transformers modeling backend (registry.py's _TRANSFORMERS_SUPPORTED_MODELS):
# it builds transformers' own model for them, with vLLM's attention and linear layers swapped in
TRANSFORMERS_BACKEND_LIST = Path(__file__).with_name("vllm_transformers_backend_0_32.txt")


@lru_cache(maxsize=1)
def supported_architectures() -> frozenset[str]:
    return frozenset(line.strip() for line in LIST.read_text(encoding="utf-8").splitlines() if line.strip())


@lru_cache(maxsize=1)
def transformers_backend_architectures() -> frozenset[str]:
    return frozenset(line.strip() for line in TRANSFORMERS_BACKEND_LIST.read_text(encoding="utf-8").splitlines()
                     if line.strip())
