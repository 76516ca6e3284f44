"""The optimizer's settings and the data-parallel overlap: values torch's AdamW and Megatron's
OptimizerParamScheduler accept (they raise or assert deep inside the worker), and the overlap
combinations Megatron-LM's validate_args allows. Category "optimizer".

Overlap runs on the CPU too: Megatron's DDP issues its bucket reduce-scatters / all-reduces and
parameter all-gathers as asynchronous gloo collectives and waits on their handles (measured: a DP=2
distributed-optimizer job with both overlaps on trains as it does with them off), so a CPU job may turn
it on; auto leaves it off there (gloo's collectives run on the cores that compute: there is nothing to
hide them behind)."""
from __future__ import annotations

from helpers.job.violation import Found, Violation

_DEFAULTS = {"adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8}  # Megatron's (OptimizerConfig)


def check(spec) -> list[Violation]:
    v = Found("optimizer")
    for name in ("adam_beta1", "adam_beta2"):
        value = getattr(spec, name)
        if not 0 <= value < 1:
            v.add(f"{name}_range", f"{name} must be in [0, 1), not {value}",
                  f"use a decay rate below 1 (Megatron's default {_DEFAULTS[name]})")
    if not spec.adam_eps > 0:
        v.add("adam_eps_positive", f"adam_eps must be > 0 (it keeps Adam's denominator off zero), not "
              f"{spec.adam_eps}", f"use a small positive number (Megatron's default {_DEFAULTS['adam_eps']})")
    if not spec.weight_decay >= 0:
        v.add("weight_decay_not_negative", f"weight_decay must be >= 0, not {spec.weight_decay}",
              "use 0 for no decay, or a positive coefficient (Megatron's default 0.01)")
    _overlap(spec, v)
    return v


def _overlap(spec, v: Found) -> None:
    """Megatron-LM's validate_args: overlap_param_gather only with the distributed optimizer and
    overlap_grad_reduce. A bucket size only means something when buckets are reduced early."""
    if spec.overlap_param_gather == "on":
        if not spec.dist_opt:
            v.add("overlap_param_gather_needs_dist_opt", "overlap_param_gather all-gathers the parameters the "
                  "distributed optimizer sharded, but dist_opt is off",
                  "set dist_opt=True, or overlap_param_gather='off'")
        if spec.overlap_grad_reduce != "on":
            v.add("overlap_param_gather_needs_overlap_grad_reduce", "overlap_param_gather needs overlap_grad_reduce "
                  f"on (Megatron asserts it), not {spec.overlap_grad_reduce!r}",
                  "set overlap_grad_reduce='on', or overlap_param_gather='off'")
    if spec.ddp_bucket_size is not None:
        if spec.ddp_bucket_size < 1:
            v.add("ddp_bucket_size_positive", f"ddp_bucket_size must be >= 1 parameter, not {spec.ddp_bucket_size}",
                  "use a positive size, or leave it unset for Megatron's default")
        if spec.overlap_grad_reduce != "on":
            v.add("ddp_bucket_size_without_overlap", f"ddp_bucket_size={spec.ddp_bucket_size} but overlap_grad_reduce "
                  f"is {spec.overlap_grad_reduce!r}: without overlap Megatron reduces all gradients as one bucket "
                  "and ignores the size", "set overlap_grad_reduce='on', or leave ddp_bucket_size unset")
