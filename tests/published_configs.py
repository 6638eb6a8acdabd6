"""What kvprof does with each published config.json of tests/fixtures/published_configs/: planned (on 8 B200s), or
refused with the reason. docs/model-support.md holds the table; ``python tests/published_configs.py --write`` rewrites
it after a change, and tests/analysis/model/test_published_configs.py holds the two together."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "tests" / "fixtures" / "published_configs"
DOC = ROOT / "docs" / "model-support.md"
HEADER = """# Which published models kvprof plans

Every config.json in `tests/fixtures/published_configs/` (current open checkpoints, verbatim; their source in its
SOURCE.md), read and planned with `kvprof plan --model DIR --gpu b200 --tp 8`. A config kvprof does not fully
understand is refused with the reason, never planned as something else; none gives a traceback
(tests/analysis/model/test_published_configs.py). Gemma-4's mixed head sizes leave the block size to the attention
backend vLLM picks, so kvprof asks for it; its rows are planned with `--block-size 128`, FlashAttention 4's on
Blackwell. Rewritten by `python tests/published_configs.py --write`.

| checkpoint | model_type | result | parameters (B) · weights a GPU (GiB) · KV layers · quantization, or the reason |
|---|---|---|---|
"""


def outcomes() -> list[tuple[str, str, str, str]]:
    """(checkpoint, model_type, 'planned' or 'refused', reason) for every published config, by name."""
    import json

    from analysis.catalog import resolve_gpu
    from analysis.model.architecture import Architecture, UnsupportedArchitecture
    from analysis.model.params import count_params, weight_bytes
    from analysis.planning.plan import PlanError, PlanInputs, make_plan
    from analysis.vllm.allocator import NotModelled

    b200, _ = resolve_gpu("b200")
    rows = []
    for d in sorted(p for p in CONFIGS.iterdir() if p.is_dir()):
        name = d.name.replace("--", "/", 1)
        model_type = str(json.loads((d / "config.json").read_text()).get("model_type"))
        given = ""
        try:
            arch = Architecture.from_config(d, name=name)
            try:
                plan = make_plan(arch, PlanInputs(tensor_parallel_size=8), b200)
                weights, quant = plan.weight_bytes, plan.quantization
            except PlanError as exc:  # Gemma-4's mixed head sizes: the block size FA4 takes on Blackwell, given
                if "--block-size (unset) must be given" not in str(exc):
                    raise
                plan, given = make_plan(arch, PlanInputs(tensor_parallel_size=8, block_size=128), b200), " · block 128"
                weights, quant = plan.weight_bytes, plan.quantization
        except (UnsupportedArchitecture, NotModelled) as exc:
            reason = str(exc).removeprefix(f"{name}: ")
            rows.append((name, model_type, "refused", reason.split("; such a key")[0].split(" (read: ")[0]))
            continue
        except PlanError as exc:  # read, and too large for 8 B200s: the plan says so
            if "does not fit" not in str(exc):
                raise
            weights = weight_bytes(arch.with_quantization(None, "blackwell"), 8)
            quant = "does not fit on 8 B200s"
        kinds = ", ".join(f"{n} {layer.label}" for layer, n in arch.attention_kinds)
        quant = f" · {quant}" if quant else ""
        rows.append((name, model_type, "planned", f"{(count_params(arch).total + arch.encoder_params) / 1e9:.2f} · "
                                                  f"{weights / 2**30:.1f} · {kinds}{quant}{given}"))
    return rows


def table() -> str:
    return HEADER + "".join(f"| {n} | `{t}` | {r} | {why.replace('|', '/')} |\n" for n, t, r, why in outcomes())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if "--write" in sys.argv:
        DOC.write_text(table())
        print(f"wrote {DOC}")
    else:
        print(table())
