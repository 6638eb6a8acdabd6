"""KV offloading to CPU memory as the pinned vLLM sizes it (``--kv-offloading-size``, issue #28).

``--kv-offloading-size X`` (GiB, "the total buffer size summed across all TP ranks", vllm/config/cache.py) with
the default ``native`` backend becomes the ``OffloadingConnector`` with ``cpu_bytes_to_use = X · 2³⁰``
(``VllmConfig._post_init_kv_transfer_config``). Its CPU spec (vllm/v1/kv_offload/cpu/spec.py
``CPUOffloadingSpec``) stores chunks of ``blocks_per_chunk`` GPU blocks (1 unless the connector's extra config
says otherwise), one copy per worker of the engine (a single copy only for MLA over tensor parallelism on one
node), each chunk rounded up to the page size of the shared mapping:

    offloaded chunks = cpu_bytes // round_up(bytes per GPU block × workers × blocks_per_chunk, page)

What it does not do is add room for running sequences: a request's blocks must be on the GPU while it runs, so
the GPU-resident capacity (what runs at once) is the plan's unchanged; the offloaded blocks hold KV evicted from
the GPU's prefix cache, so a later request sharing that prefix loads it back instead of recomputing it. A
"40 GB GPU + 40 GB of CPU" is a 40 GB GPU with a 40 GB second-level prefix cache, not an 80 GB GPU. The
``lmcache`` backend keeps its store in LMCache's own server, which ``--kv-offloading-size`` does not size.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PAGE_BYTES = 4096  # mmap.PAGESIZE on Linux: SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT
Backend = Literal["native", "lmcache"]
BACKENDS: tuple[Backend, ...] = ("native", "lmcache")


def offloaded_chunks(cpu_bytes: int, bytes_per_block: int, workers: int, blocks_per_chunk: int = 1,
                     single_copy: bool = False) -> int:
    """Chunks of ``blocks_per_chunk`` GPU blocks the CPU buffer holds (vLLM's ``CPUOffloadingSpec.num_chunks``)."""
    if bytes_per_block <= 0 or workers <= 0:
        return 0
    per_chunk = bytes_per_block * (1 if single_copy else workers) * blocks_per_chunk
    aligned = -(-per_chunk // PAGE_BYTES) * PAGE_BYTES
    return int(cpu_bytes) // aligned


class OffloadPlan(BaseModel):
    """What ``--kv-offloading-size`` adds to a plan: the host memory it pins and the prefix cache's reach there."""

    model_config = ConfigDict(extra="forbid")

    backend: Backend
    size_gib: float = Field(gt=0, description="--kv-offloading-size: GiB of pinned host memory")
    cpu_bytes: int = Field(ge=0)
    gpu_resident_sequences: int | None = Field(description="what runs at once: the GPU-resident sequences")
    offloaded_blocks: int | None = Field(None, ge=0, description="GPU blocks the host buffer holds (native)")
    offloaded_kv_tokens: int | None = Field(None, ge=0)
    offloaded_sequences: int | None = Field(None, ge=0)
    note: str


def offload_plan(size_gib: float, backend: Backend, *, bytes_per_block: int, block_size: int, workers: int,
                 blocks_per_sequence: int, gpu_resident_sequences: int | None, mla_over_tp: bool) -> OffloadPlan:
    """What ``--kv-offloading-size`` adds to a plan: the host memory it pins and the prefix cache's reach there."""
    cpu_bytes = int(size_gib * (1 << 30))
    common = {"backend": backend, "size_gib": size_gib, "cpu_bytes": cpu_bytes,
              "gpu_resident_sequences": gpu_resident_sequences}
    if backend == "lmcache":
        return OffloadPlan(**common, note=(
            "the LMCache backend keeps its store in LMCache's own server, which --kv-offloading-size does not size: "
            "its reach is LMCache's configuration, not planned here"))
    chunks = offloaded_chunks(cpu_bytes, bytes_per_block, workers, single_copy=mla_over_tp)
    return OffloadPlan(**common, offloaded_blocks=chunks, offloaded_kv_tokens=chunks * block_size,
                       offloaded_sequences=chunks // blocks_per_sequence if blocks_per_sequence else None,
                       note="running sequences stay on the GPU: what runs at once is the GPU-resident capacity; the "
                            "offloaded blocks hold prefixes evicted from the GPU's prefix cache, loaded back instead "
                            "of recomputed")
