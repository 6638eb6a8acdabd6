"""The config readers, one a family (a ``model_type``): ``FAMILY_READERS`` maps each to its reading, which returns
the config with the generic keys :func:`analysis.model.architecture._from_dict` reads and the architecture fields of
its own. A new family is an entry here (its reader in :mod:`.hybrid`, :mod:`.attention`, :mod:`.dense` or
:mod:`.moe`) and its key list in :data:`analysis.model.config_keys.FAMILIES`.
"""

from __future__ import annotations

from analysis.model.families.attention import (
    _SPARSE_ATTENTION,
    _cohere,
    _dbrx_keys,
    _deepseek_v4,
    _ernie4_5,
    _ernie4_5_moe,
    _exaone4,
    _full_width_qk_norm,
    _gemma4,
    _glm4,
    _glm4_moe,
    _glm4_moe_lite,
    _llama4_text,
    _mimo_v2,
    _minimax_m2,
    _nemotron_nas,
    _qwen2_moe,
    _sparse_attention_keys,
)
from analysis.model.families.dense import READERS as DENSE_READERS
from analysis.model.families.hybrid import (
    _falcon_h1,
    _granite_hybrid,
    _jamba,
    _lfm2,
    _lfm2_moe,
    _mamba,
    _mamba2,
    _nemotron_h,
    _olmo_hybrid,
    _qwen3_next_text,
    _zamba2,
)
from analysis.model.families.moe import READERS as MOE_READERS
from analysis.model.parts import (
    QWEN3_5_TEXT,
    FamilyReader,
    _fields,
)

FAMILY_READERS: dict[str, FamilyReader] = {
    "dbrx": lambda cfg, name: (_dbrx_keys(cfg), {}),
    "nemotron_h": _nemotron_h,
    "granitemoehybrid": _granite_hybrid,
    **dict.fromkeys(_SPARSE_ATTENTION, lambda cfg, name: (_sparse_attention_keys(cfg, name), {})),
    "minimax_m2": _fields(_minimax_m2),
    "falcon_h1": _falcon_h1,
    "jamba": _jamba,
    "nemotron-nas": _nemotron_nas,
    "gemma4_text": _gemma4,
    "mimo_v2_flash": _mimo_v2,
    "glm4_moe": _fields(_glm4_moe),
    "lfm2": _lfm2,
    "lfm2_moe": _lfm2_moe,
    "llama4_text": _llama4_text,
    "deepseek_v4": _deepseek_v4,
    "exaone4": _exaone4,
    "olmo_hybrid": _fields(_olmo_hybrid),
    "glm4_moe_lite": _fields(_glm4_moe_lite),
    "ernie4_5": _fields(_ernie4_5),
    "qwen2_moe": _fields(_qwen2_moe),
    "ernie4_5_moe": _fields(_ernie4_5_moe),
    "zamba2": _zamba2,
    **dict.fromkeys(("cohere", "cohere2"), _cohere),
    "glm4": _fields(_glm4),
    **dict.fromkeys(("olmo2", "olmoe"), _fields(_full_width_qk_norm)),
    **dict.fromkeys(("mamba", "falcon_mamba"), _mamba),
    "mamba2": _mamba2,
    **dict.fromkeys(("qwen3_next", *QWEN3_5_TEXT), _qwen3_next_text),
    **DENSE_READERS,
    **MOE_READERS,
}
