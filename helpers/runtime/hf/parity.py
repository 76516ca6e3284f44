"""The imported model against `transformers`, in several layouts inside one torchrun job
(JobSpec.hf_parity_layouts: dicts of sizes, optionally `hf_model`, `check_export` and
`check_grads`; started by helpers/launch/hf_check.py).

For each layout: Megatron's process groups are rebuilt with its sizes, the kit builds the model
(hf/config.py, build.py, layers/specs.py) and loads the HF weights (weights.load) or, with load_dir, a
kit checkpoint; one fixed token batch goes through Megatron's forward-only schedule (so pipeline
stages pass activations as in training) and the last stage's logits, gathered over TP, are
compared with `transformers`' fp32 eager logits of the same folder. Without load_dir the layout
also exports (save_hf_pretrained) and compares every tensor with the source safetensors.

With `check_grads`, the same batch then goes forward and backward through Megatron's training
schedule (DDP, finalize_model_grads: what training runs) and every parameter's gradient is compared
with transformers' gradient of the same loss. Both sides are in eval mode: Megatron attaches its
router's auxiliary losses only in training mode, and transformers' loss has none, so both
differentiate the language-model loss alone. Megatron's gradients are written into its parameters
and exported through Megatron-Bridge (its names and conversions: fused QKV split, experts
renumbered, TP shards gathered); transformers' go through its own save conversion
(revert_weight_conversion); each tensor's relative error is max|a - b| / max|b|. Every rank holds
the same batch, so under data parallelism the averaged gradient is one process's.

A case that raises is recorded with its error and the job goes on to the next case.
Rank 0 writes one record per layout to hf_parity.json."""
from __future__ import annotations

import dataclasses
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.job.spec import JobSpec
from helpers.rundir import names, prepared
from helpers.rundir.writer import write_json

BATCH, SEED = 2, 0
WORST_SHOWN = 3  # the tensors with the largest gradient errors a record names


@dataclasses.dataclass
class Reference:
    """transformers' side of one HF folder on the fixed batch: logits in the job's precision and,
    when asked, every gradient by HF tensor name (checkpoint layout) and the loss they are of."""
    logits: torch.Tensor
    grads: dict | None = None
    loss: float | None = None


def tokens(spec: JobSpec, vocab_size: int) -> torch.Tensor:
    """The fixed batch every layout and transformers see."""
    return torch.randint(0, vocab_size, (BATCH, spec.seq_len), generator=torch.Generator().manual_seed(SEED))


def next_token_labels(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels (the next token) and the loss mask (every position but the last, which has none)."""
    labels = torch.roll(ids, -1, dims=1)
    mask = torch.ones_like(ids, dtype=torch.float32)
    mask[:, -1] = 0.0
    return labels, mask


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

    for chunk in chunks:
        chunk.eval()
    with torch.no_grad():
        run_schedule(chunks, [iter([ids]) for _ in chunks], one_batch(spec, ids), forward_step, forward_only=True)
    return captured[0] if ps.is_pipeline_last_stage(ignore_virtual=True) else None


def one_batch(spec: JobSpec, ids: torch.Tensor) -> JobSpec:
    """The job as one microbatch of `ids` on every data-parallel rank."""
    return dataclasses.replace(spec, micro_batch=ids.shape[0], global_batch=ids.shape[0] * spec.dp)


def megatron_grads(bridge, config, chunks: list, ids: torch.Tensor, spec: JobSpec, device) -> dict:
    """Every parameter's gradient after one backward of the next-token loss on `ids`, through
    Megatron's DDP and schedule (finalize_model_grads: the DP average, the sums over TP of
    sequence-parallel norms, the embedding shared over PP), as HF tensors by name (collective:
    Bridge gathers the shards; every rank gets every tensor)."""
    from functools import partial

    from megatron.core.distributed import finalize_model_grads

    from helpers.runtime import build, step

    labels, mask = next_token_labels(ids)
    positions = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    batch = {"tokens": ids, "position_ids": positions, "labels": labels, "loss_mask": mask}
    model = build.wrap_ddp(config, chunks, spec, device)
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = None
    for chunk in model:
        chunk.eval()  # no router auxiliary loss (see the module doc)
        chunk.zero_grad_buffer()
    step.run_schedule(model, [iter([batch]) for _ in model], one_batch(spec, ids), partial(step.forward_step, device),
                      forward_only=False)
    with torch.no_grad():
        for chunk in chunks:  # the gradients in place of the weights, exported as weights are
            for p in chunk.parameters():
                p.copy_(p.main_grad)
            for name, b in chunk.named_buffers():
                if name.endswith("expert_bias"):  # a routing bias is no parameter: zero on both sides
                    b.zero_()
        return {name: t.float() for name, t in bridge.export_hf_weights(chunks, cpu=True, show_progress=False)}


def transformers_reference(folder: str, ids: torch.Tensor, dtype: torch.dtype, device, grads: bool) -> Reference:
    """transformers' logits in `dtype` (the job's precision; fp32 on CPU: the parity bound 1e-5
    applies) and, with `grads`, the gradient of the next-token loss on `ids` of every tensor
    save_pretrained writes (a tensor that is no parameter, e.g. a routing bias: zeros)."""
    import transformers
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    hf = hf.to(device).eval()
    with torch.set_grad_enabled(grads):
        logits = hf(ids.to(device)).logits
    reference = Reference(logits.detach().float().cpu())
    if grads:
        labels, mask = next_token_labels(ids.to(device))
        losses = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
        loss = (losses * mask.flatten()).sum() / mask.sum()
        loss.backward()
        state = {name: (t.grad if isinstance(t, torch.nn.Parameter) and t.grad is not None else torch.zeros_like(t))
                 for name, t in hf.state_dict(keep_vars=True).items()}
        state = revert_weight_conversion(hf, remove_tied_weights_from_state_dict(state, hf))
        reference.grads = {name: t.detach().float().cpu() for name, t in state.items()}
        reference.loss = loss.item()
    del hf
    return reference


def grad_diffs(ours: dict, reference: dict) -> dict:
    """Per HF tensor: max|ours - reference| / max|reference| (0 when both are zero); the record's
    worst error, the tensors with the largest errors, and any name only one side has."""
    rel = {}
    for name, b in reference.items():
        if name in ours:
            err, scale = (ours[name] - b).abs().max().item(), b.abs().max().item()
            rel[name] = err / scale if scale else (0.0 if err == 0 else float("inf"))
    worst = sorted(rel, key=rel.get, reverse=True)
    return {"grad_max_rel_diff": rel[worst[0]] if worst else float("inf"),
            "grad_worst": {n: rel[n] for n in worst[:WORST_SHOWN]}, "grad_tensors": len(rel),
            "grad_missing": sorted(set(reference) - set(ours)), "grad_extra": sorted(set(ours) - set(reference))}


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


def check_layout(spec: JobSpec, built: tuple, reference: Reference, ids: torch.Tensor, device,
                 check_export: bool, truth: torch.Tensor | None = None, check_grads: bool = False) -> dict:
    """`built`: (the model, its HF folder's record) from model.json. `reference`: transformers'
    logits (and gradients, for `check_grads`) in the job's precision. `truth` (bf16 jobs):
    transformers' logits in fp32 on the same weights, to measure how far each bf16 computation is from it."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from helpers.runtime import build
    from helpers.runtime.checkpoint import io as checkpoint_io
    from helpers.runtime.hf import config as hf_import
    from helpers.runtime.hf import weights as hf_weights

    release_groups()
    ps.destroy_model_parallel()
    # TP, PP and the expert grid only: the check compares whole-sequence logits, so context parallel is
    # not set up here (every rank computes the whole sequence); CP layouts are checked by training
    # them like one process
    ps.initialize_model_parallel(tensor_model_parallel_size=spec.tp, pipeline_model_parallel_size=spec.pp,
                                 expert_model_parallel_size=spec.ep, expert_tensor_parallel_size=spec.expert_tp)
    model_parallel_cuda_manual_seed(spec.seed)
    model, hf = built
    bridge = hf_import.open_bridge(hf)
    config = hf_import.provider_config(bridge, spec, on_cpu=device.type == "cpu", bf16=spec.bf16)
    chunks = [chunk.to(device) for chunk in build.model_chunks(config, model, spec)]
    hf_weights.load(bridge, chunks)
    if spec.load_dir:  # resharded into this layout by dist_checkpointing
        checkpoint_io.load(spec.load_paths()[0], chunks, spec, model, beat=lambda *a: None)
    logits = megatron_logits(chunks, ids.to(device), spec)
    diff = torch.zeros(3, dtype=torch.float64, device=device)  # on the device: NCCL reduces no CPU tensors
    if logits is not None:
        logits = logits.float().cpu()
        diff[0] = max_rel_diff(logits, reference.logits)
        diff[1] = (logits.argmax(-1) != reference.logits.argmax(-1)).float().mean().item()
        if truth is not None:
            diff[2] = max_rel_diff(logits, truth)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    record = {"layout": spec.layout_name(), "sizes": spec.parallel_sizes(), "max_rel_diff": diff[0].item(),
              "argmax_disagreement": diff[1].item()}
    if truth is not None:  # the bf16 bound: the kit's bf16 error is of the order of transformers' own
        record["megatron_vs_fp32"] = diff[2].item()
        record["transformers_vs_fp32"] = max_rel_diff(reference.logits, truth)
    if check_export and not spec.load_dir:
        record["export_identical"] = export_identical(bridge, chunks, Path(spec.hf_model))
    if check_grads:  # last: it overwrites the weights with the gradients
        start = time.perf_counter()
        ours = megatron_grads(bridge, config, chunks, ids.to(device), spec, device)
        compared = [grad_diffs(ours, reference.grads) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(compared)
        record.update(compared[0], grad_seconds=time.perf_counter() - start)
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


def run(run_dir: Path, spec: JobSpec, device) -> None:
    """Every case of spec.hf_parity_layouts: sizes, optionally another hf_model (one job, many models).
    transformers' side is computed once per HF folder and precision, whatever the number of layouts."""
    records, references = [], {}

    def reference(folder: str, ids: torch.Tensor, bf16: bool, grads: bool) -> Reference:
        key = (folder, bf16)
        if key not in references or (grads and references[key].grads is None):
            references[key] = transformers_reference(folder, ids, torch.bfloat16 if bf16 else torch.float32, device,
                                                     grads)
        return references[key]

    for case in spec.hf_parity_layouts:
        case = dict(case)
        check_export = case.pop("check_export", True)
        check_grads = case.pop("check_grads", False)
        layout = dataclasses.replace(spec, **case)
        start = time.perf_counter()
        try:
            built = prepared.model(run_dir, layout.hf_model)  # as the rules checked it, before start
            ids = tokens(layout, built[0].vocab_size)
            truth = reference(layout.hf_model, ids, False, False).logits if layout.bf16 else None
            record = check_layout(layout, built, reference(layout.hf_model, ids, layout.bf16, check_grads), ids,
                                  device, check_export, truth, check_grads)
        except Exception as e:  # noqa: BLE001  (recorded: the test of this case fails on it, the others go on)
            record = {"layout": layout.layout_name(), "sizes": layout.parallel_sizes(),
                      "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        records.append({"hf_model": layout.hf_model, **record, "seconds": time.perf_counter() - start})
        if dist.get_rank() == 0:
            write_json(Path(run_dir) / names.HF_PARITY, records)
