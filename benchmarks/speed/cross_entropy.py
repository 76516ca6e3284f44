"""The kit's Triton cross-entropy (helpers/runtime/layers/cross_entropy_triton.py) against Megatron-Core's
native fused one (megatron/core/fusions/fused_cross_entropy.py, torch.compile'd), on one GPU: forward +
backward time, the memory each keeps beyond the logits, and how far apart their losses and gradients are.

    python -m benchmarks.speed.cross_entropy --out OUT

Shape: the 1.4B GPT's logits at micro batch 8 (seq 2048 x 8 x vocabulary 50,304, bf16). Prints a table
and writes OUT/cross_entropy.json."""
import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

from benchmarks.common.cuda_timing import timed_ms

SEQ, BATCH, VOCAB = 2048, 8, 50304


def forward_backward(fn, logits, labels, dloss):
    x = logits.detach().requires_grad_()
    loss = fn(x, labels, dist.group.WORLD)
    loss.backward(dloss)
    return loss, x.grad


def kept_for_backward_gib(fn, logits, labels) -> float:
    """Memory the loss's autograd graph holds beyond its inputs, between the forward and the backward."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    x = logits.detach().requires_grad_()
    loss = fn(x, labels, dist.group.WORLD)
    kept = torch.cuda.memory_allocated() - before
    del loss
    return kept / 2**30


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    from megatron.core.fusions.fused_cross_entropy import fused_vocab_parallel_cross_entropy as native
    from helpers.runtime.layers.cross_entropy_triton import vocab_parallel_cross_entropy as kit

    torch.manual_seed(0)
    logits = (torch.randn(SEQ, BATCH, VOCAB, device="cuda") * 3).to(torch.bfloat16)
    labels = torch.randint(0, VOCAB, (SEQ, BATCH), device="cuda")
    dloss = torch.rand(SEQ, BATCH, device="cuda") / (SEQ * BATCH)
    native_loss, native_grad = forward_backward(native, logits, labels, dloss)
    kit_loss, kit_grad = forward_backward(kit, logits, labels, dloss)
    exact_loss = torch.logsumexp(logits.double(), -1) - logits.double().gather(-1, labels[..., None]).squeeze(-1)
    differing = (native_grad != kit_grad)
    result = {
        "date": time.strftime("%Y-%m-%d"), "command": "python -m benchmarks.speed.cross_entropy --out OUT",
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "shape": [SEQ, BATCH, VOCAB],
        "native_ms": timed_ms(lambda: forward_backward(native, logits, labels, dloss), reps=10),
        "kit_ms": timed_ms(lambda: forward_backward(kit, logits, labels, dloss), reps=10),
        "native_kept_gib": kept_for_backward_gib(native, logits, labels),
        "kit_kept_gib": kept_for_backward_gib(kit, logits, labels),
        "native_loss_max_abs_error": float((native_loss.double() - exact_loss).abs().max()),
        "kit_loss_max_abs_error": float((kit_loss.double() - exact_loss).abs().max()),
        "grad_elements_differing": int(differing.sum()),
        "grad_elements": differing.numel(),
        "grad_max_abs_difference_over_max": float((native_grad.float() - kit_grad.float()).abs().max()
                                                  / native_grad.float().abs().max()),
    }
    (args.out / "cross_entropy.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
