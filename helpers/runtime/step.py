"""One training/evaluation step through Megatron's own schedule: the forward step Megatron calls
per microbatch, the loss function it applies, the global-batch loss the kit reports, and the one
call into `get_forward_backward_func()` that training, checkpoint evaluation and validation share.
Near a leaf of the worker (it imports only helpers/precision's per-step FP8 state), so everything
else can import it."""
from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist


def loss_func(loss_mask, cp_group, output_tensor):
    """Mean token loss of one microbatch. The clone matters: the schedule divides the returned
    loss in place by the number of microbatches, and we report the unscaled value.
    Context parallel: Megatron's schedule multiplies the loss by the CP size and DDP averages the
    gradients over DP x CP, so (as Megatron-LM's loss function does) the loss that is
    differentiated is this rank's token-loss sum over the token count of the *whole* sequence; the
    reported value stays this rank's mean (its CP peers' means average to the sequence's)."""
    losses = output_tensor.float()
    total, tokens = torch.sum(losses.view(-1) * loss_mask.view(-1)), loss_mask.sum()
    mean = total / tokens
    loss = mean
    if cp_group is not None:
        all_tokens = tokens.detach().clone()
        dist.all_reduce(all_tokens, group=cp_group)
        loss = total / all_tokens
    return loss, {"lm loss": mean.detach().clone()}


def to_device(t: torch.Tensor, device) -> torch.Tensor:
    """A host batch tensor onto the device. On GPU through pinned memory and asynchronously: a copy
    from ordinary (pageable) host memory makes the CPU wait until the GPU has drained its queue,
    once per microbatch, leaving the GPU idle while the next kernels are launched."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def forward_step(device, data_iterator, model):
    """Megatron's forward_step_func: next microbatch (this CP rank's chunks of it), the model's
    per-token losses, and the loss function to reduce them."""
    from megatron.core import parallel_state as ps
    from megatron.core.utils import get_batch_on_this_cp_rank

    batch = {k: to_device(v, device) for k, v in next(data_iterator).items()}
    if ps.get_context_parallel_world_size() > 1:  # chunks r and 2*CP-1-r of the sequence
        batch = get_batch_on_this_cp_rank(batch, is_hybrid_cp=False, cp_group=ps.get_context_parallel_group())
    output = model(batch["tokens"], batch["position_ids"], attention_mask=None, labels=batch["labels"])
    cp_group = ps.get_context_parallel_group() if ps.get_context_parallel_world_size() > 1 else None
    return output, partial(loss_func, batch["loss_mask"], cp_group)


def global_loss(losses_reduced, spec, device) -> float:
    """Global-batch mean loss on every rank: last-stage ranks hold their DP shard's mean; the
    tp*cp*dp last-stage ranks sum their values and we divide by their count."""
    from megatron.core import parallel_state as ps

    local = torch.zeros(1, dtype=torch.float64, device=device)
    if ps.is_pipeline_last_stage(ignore_virtual=True) and losses_reduced:
        local += torch.stack([d["lm loss"].double() for d in losses_reduced]).mean()
    dist.all_reduce(local)
    return float(local) / (spec.world_size // spec.pp)


def forward_backward(model: list, iterators: list, spec, device) -> list:
    """One training iteration's forward and backward passes over every microbatch, through
    Megatron's schedule. Returns the loss dicts of this rank's microbatches (last stage only)."""
    from helpers.precision import fp8_matmul

    with fp8_matmul.training_step():  # FP8 linears: each weight quantised once per step; delayed scales advance
        return run_schedule(model, iterators, spec, partial(forward_step, device), forward_only=False)


def run_schedule(model: list, iterators: list, spec, forward_step_func, forward_only: bool):
    """Megatron's forward/backward schedule (1F1B, interleaved, or no pipelining). Megatron wants
    a single model/iterator without virtual stages and lists with them."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    chunks = len(model) > 1
    return get_forward_backward_func()(
        forward_step_func=forward_step_func,
        data_iterator=iterators if chunks else iterators[0],
        model=model if chunks else model[0],
        num_microbatches=spec.num_microbatches,
        seq_length=spec.seq_len,
        micro_batch_size=spec.micro_batch,
        forward_only=forward_only,
    )


def forward_only_loss(model: list, iterators: list, spec, device) -> float:
    """Global-batch mean loss of one batch, forward only, model in eval mode (collective)."""
    for m in model:
        m.eval()
    with torch.no_grad():
        out = run_schedule(model, iterators, spec, partial(forward_step, device), forward_only=True)
    for m in model:
        m.train()
    return global_loss(out, spec, device)
