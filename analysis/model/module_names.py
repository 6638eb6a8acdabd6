"""How each family's checkpoint names its modules, and which of them vLLM fuses into one layer.

kvprof names every weight matrix as a plain decoder's Hugging Face checkpoint does
(``model.layers.3.self_attn.q_proj``, ``model.layers.3.mlp.experts``, ``lm_head``:
analysis.model.params.weight_matrices). A checkpoint's own lists of modules
(ModelOpt's ``exclude_modules`` and ``quantized_layers``) are written in *its*
names: Nemotron-H's layers live under ``backbone.`` with every mixer called
``mixer``, Qwen3.5's under ``model.language_model.``. vLLM matches those lists
against its own layers, several of which fuse checkpoint matrices into one
(``qkv_proj`` of q/k/v, ``gate_up_proj`` of gate/up, DeepSeek's
``fused_qkv_a_proj``, Qwen3.5's ``in_proj_qkvz`` of ``in_proj_qkv`` and
``in_proj_z``): every shard of a fused layer gets the layer's scheme.

A family is listed here once its naming has been read off vLLM 0.32's model file
(``packed_modules_mapping`` and ``hf_to_vllm_mapper``); a ModelOpt checkpoint of a
family not listed is refused by name (analysis.model.quantization.ModelOpt).
Adding a family is one entry.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

_ATTENTION = (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj")))
_MLA = (("fused_qkv_a_proj", ("q_a_proj", "kv_a_proj_with_mqa")), ("gate_up_proj", ("gate_proj", "up_proj")))


class ModuleNames(BaseModel):
    """A family's checkpoint names: ``prefix`` replaces kvprof's leading ``model.``, ``head`` is the output
    projection's name, each ``infixes`` pair renames a path component (``.self_attn.`` → ``.mixer.``), and
    ``fused`` maps a vLLM layer to the checkpoint matrices it holds."""

    model_config = ConfigDict(frozen=True)

    prefix: str = "model."
    head: str = "lm_head"
    infixes: tuple[tuple[str, str], ...] = ()
    fused: tuple[tuple[str, tuple[str, ...]], ...] = _ATTENTION

    def checkpoint(self, name: str) -> str:
        """``name`` (kvprof's) as the checkpoint spells it."""
        if name == "lm_head":
            return self.head
        if name.startswith("model."):
            name = self.prefix + name[len("model."):]
        for old, new in self.infixes:
            name = name.replace(old, new)
        return name

    def layer(self, name: str) -> tuple[str, tuple[str, ...]]:
        """The vLLM layer holding checkpoint matrix ``name`` and that layer's shards (empty: not fused)."""
        parent, _, leaf = name.rpartition(".")
        for fused, shards in self.fused:
            if leaf == fused or leaf in shards:
                return f"{parent}.{fused}", tuple(f"{parent}.{s}" for s in shards)
        return name, ()


# vLLM 0.32 model files: llama.py, qwen2.py, qwen3.py, qwen3_moe.py (packed qkv_proj, gate_up_proj);
# deepseek_v2.py (fused_qkv_a_proj when q_lora_rank is set); nemotron_h.py (hf_to_vllm_mapper
# "backbone" -> "model", every mixer named "mixer"); qwen3_5.py and qwen3_vl.py (hf_to_vllm_mapper
# "model.language_model." -> "language_model.model.", packed in_proj_qkvz / in_proj_ba of Qwen3.5's
# split projections); kimi_k25.py (below).
_QWEN_WRAPPED = ModuleNames(prefix="model.language_model.")
_DELTANET = ((".mixer.", ".linear_attn."),)  # kvprof's recurrent mixer is the checkpoint's linear_attn
_QWEN3_5 = ModuleNames(prefix="model.language_model.", infixes=_DELTANET, fused=(
    *_ATTENTION, ("in_proj_qkvz", ("in_proj_qkv", "in_proj_z")), ("in_proj_ba", ("in_proj_b", "in_proj_a"))))

MODULE_NAMES: dict[str, ModuleNames] = {
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "mimo", "nemotron-nas"),
                    ModuleNames()),
    "qwen3_next": ModuleNames(infixes=_DELTANET),
    **dict.fromkeys(("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa"), ModuleNames(fused=_MLA)),
    # minimax_m2.py: the checkpoint calls the MoE block_sparse_moe but vLLM's layers are prefixed "mlp" and its
    # mapper does not rename them, so vLLM matches a list against .mlp. names (a listed block_sparse_moe.gate, the
    # router, matches nothing; vLLM builds the router unquantized anyway)
    "minimax_m2": ModuleNames(),
    "nemotron_h": ModuleNames(prefix="backbone.", infixes=((".self_attn.", ".mixer."), (".mlp.", ".mixer.")),
                              fused=_ATTENTION[:1]),  # relu² MLPs: up_proj and down_proj, nothing to fuse
    **dict.fromkeys(("qwen3_vl", "qwen3_vl_moe"), _QWEN_WRAPPED),
    **dict.fromkeys(("qwen3_5", "qwen3_5_moe"), _QWEN3_5),
    # kimi_k25.py: DeepSeek-V3's decoder built under "language_model" (DeepseekV2ForCausalLM: its layers
    # language_model.model.layers.N, its head language_model.lm_head), the names NVIDIA's builds list
    "kimi_k25": ModuleNames(prefix="language_model.model.", head="language_model.lm_head", fused=_MLA),
    # gemma4.py / gemma4_mm.py (mapper "model.language_model." -> "language_model.model."): a layer's dense MLP is
    # its "mlp" (kvprof's shared expert beside the experts) and its experts sit beside it, "layers.N.experts"
    "gemma4": ModuleNames(prefix="model.language_model.",
                          infixes=((".mlp.shared_experts.", ".mlp."), (".mlp.experts", ".experts"))),
}
