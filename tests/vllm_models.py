"""The installed vLLM's model registry, as analysis.model.vllm_models_0_32.txt keeps it.

``python tests/vllm_models.py --write`` rewrites that file from the installed package (after a vLLM upgrade);
tests/analysis/model/test_vllm_models.py checks the two agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.model.vllm_models import LIST


def installed() -> list[str]:
    from vllm.model_executor.models.registry import ModelRegistry

    return sorted(ModelRegistry.get_supported_archs())


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/vllm_models.py --write")
    LIST.write_text("\n".join(installed()) + "\n", encoding="utf-8")
    print(f"wrote {LIST}")
