"""The installed vLLM's model registry, as analysis.model.vllm_models_0_32.txt keeps it (and, in
vllm_transformers_backend_0_32.txt, the classes it runs through its Transformers modeling backend).

``python tests/vllm_models.py --write`` rewrites that file from the installed package (after a vLLM upgrade);
tests/analysis/model/test_vllm_models.py checks the two agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.model.vllm_models import LIST, TRANSFORMERS_BACKEND_LIST


def installed() -> list[str]:
    from vllm.model_executor.models.registry import ModelRegistry

    return sorted(ModelRegistry.get_supported_archs())


def installed_transformers_backend() -> list[str]:
    """The registered classes vLLM builds through its Transformers modeling backend."""
    from vllm.model_executor.models.registry import _VLLM_MODELS

    return sorted(arch for arch, (module, _) in _VLLM_MODELS.items() if module == "transformers")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/vllm_models.py --write")
    LIST.write_text("\n".join(installed()) + "\n", encoding="utf-8")
    TRANSFORMERS_BACKEND_LIST.write_text("\n".join(installed_transformers_backend()) + "\n", encoding="utf-8")
    print(f"wrote {LIST} and {TRANSFORMERS_BACKEND_LIST}")
