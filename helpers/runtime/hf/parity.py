"""The imported model against `transformers`, in several layouts inside one torchrun job
(JobSpec.hf_parity_layouts: dicts of sizes, optionally `hf_model` and `check_export`; started by
helpers/launch/hf_check.py).

For each layout: Megatron's process groups are rebuilt with its sizes, the kit builds the model
(hf_import, build, layer_specs) and loads the HF weights (hf_weights.load) or, with load_dir, a
kit checkpoint; one fixed token batch goes through Megatron's forward-only schedule (so pipeline
stages pass activations as in training) and the last stage's logits, gathered over TP, are
compared with `transformers`' fp32 eager logits of the same folder. Without load_dir the layout
also exports (save_hf_pretrained) and compares every tensor with the source safetensors.
Rank 0 writes one record per layout to hf_parity.json."""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.job.spec import JobSpec
from helpers.rundir import names
from helpers.rundir.writer import write_json

BATCH, SEED = 2, 0


def tokens(spec: JobSpec, vocab_size: int) -> torch.Tensor:
    """The fixed batch every layout and transformers see."""
    return torch.randint(0, vocab_size, (BATCH, spec.seq_len), generator=torch.Generator().manual_seed(SEED))


def megatron_logits(chunks: list, ids: torch.Tensor, spec: JobSpec) -> torch.Tensor | None:
    """Full-vocabulary logits [b, s, vocab] on last-stage ranks, None elsewhere (collective)."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.mappings import (
        gather_from_tensor_model_parallel_region,
    )

    from helpers.runtime.step import run_schedule

    captured = []
    positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids)

    def forward_step(data_iterator, model):
        batch = next(data_iterator)
        output = model(batch, positions, attention_mask=None)

        def keep(output_tensor):
            captured.append(gather_from_tensor_model_parallel_region(output_tensor))
            return output_tensor.sum() * 0.0, {}
        return output, keep

    one = dataclasses.replace(spec, micro_batch=ids.shape[0], global_batch=ids.shape[0] * spec.dp)
    for chunk in chunks:
        chunk.eval()
    with torch.no_grad():
        run_schedule(chunks, [iter([ids]) for _ in chunks], one, forward_step, forward_only=True)
    return captured[0] if ps.is_pipeline_last_stage(ignore_virtual=True) else None


def export_identical(bridge, chunks, source: Path) -> bool:
    """Export into a temporary folder (collective) and compare every tensor with the source."""
    from safetensors.torch import load_file

    from helpers.runtime.hf import weights as hf_weights

    with tempfile.TemporaryDirectory() as tmp:
        shared = [tmp]
        dist.broadcast_object_list(shared)  # rank 0 writes; one folder name for all
        hf_weights.export(bridge, chunks, Path(shared[0]))
        dist.barrier()
        same = True
        if dist.get_rank() == 0:
            def tensors(folder):
                out = {}
                for f in sorted(Path(folder).glob("*.safetensors")):
                    out.update(load_file(f))
                return out
            a, b = tensors(source), tensors(shared[0])
            same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
        flag = [same]
        dist.broadcast_object_list(flag)
        dist.barrier()
        return flag[0]


def check_layout(spec: JobSpec, reference: torch.Tensor, ids: torch.Tensor, device, check_export: bool,
                 truth: torch.Tensor | None = None) -> dict:
    """`reference`: transformers' logits in the job's precision. `truth` (bf16 jobs): transformers'
    in fp32 on the same weights, to measure how far each bf16 computation is from it."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from helpers.runtime import build
    from helpers.runtime.checkpoint import io as checkpoint_io
    from helpers.runtime.hf import config as hf_import
    from helpers.runtime.hf import weights as hf_weights

    release_groups()
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=spec.tp, pipeline_model_parallel_size=spec.pp,
                                 expert_model_parallel_size=spec.ep, expert_tensor_parallel_size=spec.expert_tp)
    model_parallel_cuda_manual_seed(spec.seed)
    bridge = hf_import.open_bridge(spec.hf_model)
    config = hf_import.provider_config(bridge, spec, on_cpu=device.type == "cpu", bf16=spec.bf16)
    chunks = [chunk.to(device) for chunk in build.model_chunks(config, spec.model_preset(), spec)]
    hf_weights.load(bridge, chunks)
    if spec.load_dir:  # resharded into this layout by dist_checkpointing
        from helpers.runtime.worker import Worker
        layout = Worker(spec, Path(), dist.get_rank(), beat=lambda *a: None, device=device,
                        model_desc=spec.model_preset(), config=config, model=chunks)
        checkpoint_io.load(layout, spec.load_paths()[0], load_optimizer=False)
    logits = megatron_logits(chunks, ids.to(device), spec)
    diff = torch.zeros(3, dtype=torch.float64, device=device)  # on the device: NCCL reduces no CPU tensors
    if logits is not None:
        logits = logits.float().cpu()
        diff[0] = max_rel_diff(logits, reference)
        diff[1] = (logits.argmax(-1) != reference.argmax(-1)).float().mean().item()
        if truth is not None:
            diff[2] = max_rel_diff(logits, truth)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    record = {"layout": spec.layout_name(), "sizes": spec.parallel_sizes(), "max_rel_diff": diff[0].item(),
              "argmax_disagreement": diff[1].item()}
    if truth is not None:  # the bf16 bound: the kit's bf16 error is of the order of transformers' own
        record["megatron_vs_fp32"] = diff[2].item()
        record["transformers_vs_fp32"] = max_rel_diff(reference, truth)
    if check_export and not spec.load_dir:
        record["export_identical"] = export_identical(bridge, chunks, Path(spec.hf_model))
    return record


def release_groups() -> None:
    """Destroy the process groups Megatron's parallel state holds. `destroy_model_parallel` only
    forgets them, and each forgotten gloo group keeps its threads: one job checking some sixty
    layouts grew to ~2,600 threads per rank and ran ten times slower."""
    from megatron.core import parallel_state as ps

    seen = set()
    for value in list(vars(ps).values()):
        for group in (value if isinstance(value, (list, tuple)) else (value,)):
            if isinstance(group, dist.ProcessGroup) and id(group) not in seen and group is not dist.group.WORLD:
                seen.add(id(group))
                dist.destroy_process_group(group)


def max_rel_diff(logits: torch.Tensor, reference: torch.Tensor) -> float:
    return ((logits - reference).abs().max() / reference.abs().max()).item()


def transformers_logits(folder: str, ids: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """transformers' logits in `dtype` (the job's precision; fp32 on CPU: the parity bound 1e-5 applies)."""
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    hf = hf.to(device).eval()
    with torch.no_grad():
        logits = hf(ids.to(device)).logits.float().cpu()
    del hf
    return logits


def run(run_dir: Path, spec: JobSpec, device) -> None:
    """Every case of spec.hf_parity_layouts: sizes, optionally another hf_model (one job, many models)."""
    records = []
    for case in spec.hf_parity_layouts:
        case = dict(case)
        check_export = case.pop("check_export", True)
        layout = dataclasses.replace(spec, **case)
        ids = tokens(layout, layout.model_preset().vocab_size)
        bf16 = layout.bf16
        reference = transformers_logits(layout.hf_model, ids, torch.bfloat16 if bf16 else torch.float32, device)
        truth = transformers_logits(layout.hf_model, ids, torch.float32, device) if bf16 else None
        record = check_layout(layout, reference, ids, device, check_export, truth)
        records.append({"hf_model": layout.hf_model, **record})
        if dist.get_rank() == 0:
            write_json(Path(run_dir) / names.HF_PARITY, records)
