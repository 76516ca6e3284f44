"""Hugging Face weights in and out of the kit-built model chunks, through Megatron-Bridge 0.6.2.

`load`: `bridge.load_hf_weights(chunks)` streams each HF tensor into this rank's shard (TP split
chosen by module kind, QKV interleaved per query group, gate/up fused, experts renumbered for this
EP rank, layers placed by PP stage). Bridge only *warns* when an HF key is missing (the parameter
keeps its random init) and fails mid-load with an AttributeError on a parameter it has no mapping
for. So the kit checks first (Bridge's own conversion plan must cover every local parameter) and
after (every parameter was NaN before the load and none is NaN after, agreed by every rank), and
raises one HFImportError naming the parameters.

`export`: `bridge.save_hf_pretrained` (collective: every rank gathers full HF tensors; rank 0
writes config.json, the tokenizer and the safetensors in the source's shard layout). It imports one
function of nvidia-modelopt, which te_standin stands in for. It needs the source's tokenizer
(helpers/job/rules/hf.py checks that before launch)."""
from __future__ import annotations

from pathlib import Path

import torch

from helpers.errors import HFImportError


def _local_params(chunks) -> set[tuple[int, str]]:
    """Every parameter Bridge must write. Not the last stage's copy of tied embeddings (pipeline
    parallel): Megatron fills that from the first stage (see `load`)."""
    return {(vp, name) for vp, chunk in enumerate(chunks) for name, p in chunk.named_parameters()
            if not (name == "output_layer.weight" and chunk.share_embeddings_and_output_weights)}


def planned(bridge, chunks) -> set[tuple[int, str]]:
    """(virtual stage, parameter name) of every local parameter Bridge would write."""
    return {(t.vp_stage, t.param_name) for t in bridge.get_conversion_tasks(chunks)
            if t is not None and t.megatron_module is not None}


def _fail(what: str, names: list[str]) -> HFImportError:
    shown = ", ".join(names[:8]) + (f" (+{len(names) - 8} more)" if len(names) > 8 else "")
    return HFImportError(f"{what}: {shown}. The HF checkpoint and the model the kit built disagree: check "
                         "that config.json matches the safetensors files, and that every module of the "
                         "built model has a Megatron-Bridge mapping", names)


def load(bridge, chunks: list[torch.nn.Module]) -> None:
    """Write the HF weights into `chunks` (the unwrapped GPTModels of this rank, before DDP)."""
    import torch.distributed as dist

    unplanned = sorted(f"{name} (virtual stage {vp})" if len(chunks) > 1 else name
                       for vp, name in _local_params(chunks) - planned(bridge, chunks))
    if unplanned:  # before touching any weight
        raise _fail(f"Megatron-Bridge has no HF weight for {len(unplanned)} parameter(s)", unplanned)
    with torch.no_grad():
        for chunk in chunks:
            for p in chunk.parameters():
                p.fill_(float("nan"))
    bridge.load_hf_weights(chunks)
    for chunk in chunks:  # tied embeddings under PP: Megatron's own first-to-last-stage copy, as at init
        chunk.setup_embeddings_and_output_layer()
    unwritten = sorted(name for chunk in chunks for name, p in chunk.named_parameters() if torch.isnan(p).any())
    count = torch.tensor([len(unwritten)], dtype=torch.int64, device=next(chunks[0].parameters()).device)
    dist.all_reduce(count)  # every rank stops together, not only the one that noticed
    if count.item():
        raise _fail(f"{count.item()} parameter(s) were not written by the HF import (on this rank: "
                    f"{len(unwritten)})", unwritten or ["<on other ranks>"])


def export(bridge, chunks: list[torch.nn.Module], out_dir: Path) -> None:
    """Write the model as an HF folder (collective: call on every rank; rank 0 writes)."""
    from helpers.runtime.hf import te_standin

    with te_standin.modelopt_standin():
        bridge.save_hf_pretrained(chunks, str(out_dir), show_progress=False)
