"""The Triton cross-entropy (helpers/runtime/layers/cross_entropy_triton.py) in Triton's interpreter on
CPU, against the float64 formula from the same bf16 logits: loss = logsumexp(x) - x[target], gradient =
(softmax(x) - onehot(target)) x dloss. Three cases: a vocabulary that leaves the last block ragged, one
smaller than a block (lanes that only ever see padding), and tensor parallel over two gloo processes,
each with half of the vocabulary (targets in both halves), which must give the one-process answer.

Tolerances. Loss: fp32 sums of ~5,000 exponentials and a log, relative error ~1e-6 of a loss of ~9:
|error| <= 1e-4. Gradient: one rounding to bf16 (the interpreter truncates: up to 2^-7 relative) on top
of fp32 arithmetic, plus 1e-6 absolute for p - 1 at the target (p's fp32 error, not cancelled);
test_bounds_are_tight shows a gradient without the -1 at the target, or a loss with the target's logit
taken from the wrong rank's slice, falls outside them."""
from __future__ import annotations

import json
import os
import sys
import tempfile

import pytest
import torch

CASES = {"ragged": (3, 2, 5000), "small": (2, 3, 1000)}


def inputs(s, b, v, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(s, b, v, generator=g) * 3).to(torch.bfloat16)
    labels = torch.randint(0, v, (s, b), generator=g)
    dloss = torch.rand(s, b, generator=g) + 0.5
    return logits, labels, dloss


def reference(logits, labels, dloss):
    x = logits.double().requires_grad_()
    loss = torch.logsumexp(x, dim=-1) - x.gather(-1, labels[..., None]).squeeze(-1)
    (grad,) = torch.autograd.grad(loss, x, dloss.double())
    return loss.detach(), grad


def run_one(case):
    from helpers.runtime.layers import cross_entropy_triton as ce
    logits, labels, dloss = inputs(*CASES[case])
    x = logits.clone().requires_grad_()
    loss = ce.VocabParallelCrossEntropy.apply(x, labels, None)
    loss.backward(dloss)
    return {"loss": loss.tolist(), "grad": x.grad.float().tolist(), "dtype": str(x.grad.dtype)}


def tp_rank(rank, path):
    import torch.distributed as dist
    from helpers.runtime.layers import cross_entropy_triton as ce
    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=2)
    logits, labels, dloss = inputs(*CASES["ragged"])
    half = logits.shape[-1] // 2
    x = logits[..., rank * half:(rank + 1) * half].clone().requires_grad_()
    loss = ce.VocabParallelCrossEntropy.apply(x, labels, dist.group.WORLD)
    loss.backward(dloss)
    with open(f"{path}.{rank}", "w") as f:
        json.dump({"loss": loss.tolist(), "grad": x.grad.float().tolist()}, f)
    dist.destroy_process_group()


def run_tp():
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tp")
        mp.spawn(tp_rank, args=(path,), nprocs=2)
        ranks = [json.load(open(f"{path}.{r}")) for r in range(2)]
    return {"loss": [r["loss"] for r in ranks], "grad": torch.cat([torch.tensor(r["grad"]) for r in ranks], -1).tolist()}


@pytest.fixture(scope="module")
def kernel(triton_interpreter):
    return triton_interpreter(__file__, timeout=300)


def loss_ok(got, want) -> bool:
    return bool(((got - want).abs() <= 1e-4).all())


def grad_ok(got, want, dloss) -> bool:
    return bool(((got - want).abs() <= 2.0 ** -7 * want.abs() + 1e-6 * dloss[..., None]).all())


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_gradient_match_the_formula(kernel, case):
    logits, labels, dloss = inputs(*CASES[case])
    want_loss, want_grad = reference(logits, labels, dloss)
    got = kernel[case]
    assert got["dtype"] == "torch.bfloat16"  # the gradient in the logits' dtype, as Megatron's
    assert loss_ok(torch.tensor(got["loss"], dtype=torch.float64), want_loss)
    assert grad_ok(torch.tensor(got["grad"], dtype=torch.float64), want_grad, dloss.double())


def test_tensor_parallel_halves_give_the_one_process_answer(kernel):
    logits, labels, dloss = inputs(*CASES["ragged"])
    want_loss, want_grad = reference(logits, labels, dloss)
    got = kernel["tp"]
    for rank_loss in got["loss"]:  # every rank holds the whole loss
        assert loss_ok(torch.tensor(rank_loss, dtype=torch.float64), want_loss)
    assert grad_ok(torch.tensor(got["grad"], dtype=torch.float64), want_grad, dloss.double())


def test_bounds_are_tight():
    logits, labels, dloss = inputs(*CASES["ragged"])
    want_loss, want_grad = reference(logits, labels, dloss)
    no_onehot = want_grad + torch.nn.functional.one_hot(labels, logits.shape[-1]).double() * dloss.double()[..., None]
    assert not grad_ok(no_onehot, want_grad, dloss.double())
    half = logits.shape[-1] // 2
    other_slice = labels + torch.where(labels < half, half, -half)  # the target's logit read from the other rank
    wrong_loss = want_loss + logits.double().gather(-1, labels[..., None]).squeeze(-1) \
        - logits.double().gather(-1, other_slice[..., None]).squeeze(-1)
    assert not loss_ok(wrong_loss, want_loss)


def test_other_logits_go_to_megatron_s_own_function():
    from helpers.runtime.layers import cross_entropy_triton as ce
    seen = []
    ce._native, saved = (lambda logits, labels, group: seen.append(logits.dtype) or "native"), ce._native
    try:
        logits, labels, _ = inputs(*CASES["small"])
        assert ce.vocab_parallel_cross_entropy(logits, labels) == "native"  # CPU bf16
        assert ce.vocab_parallel_cross_entropy(logits.float(), labels) == "native"
    finally:
        ce._native = saved
    assert seen == [torch.bfloat16, torch.float32]


if __name__ == "__main__":
    sys.path.insert(0, os.environ.get("PYTHONPATH", ""))
    out = {case: run_one(case) for case in CASES}
    out["tp"] = run_tp()
    print(json.dumps(out))
