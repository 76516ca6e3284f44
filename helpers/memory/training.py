"""What the planner needs to know about how a job trains (precision, optimizer, recompute), and
the allocator allowance; `Training.of(spec)` reads it from a JobSpec."""
from __future__ import annotations

from dataclasses import dataclass

from helpers.job.rules.resolve import overlap_grad_reduce_of, precision_of
from helpers.job.spec import attention_of

GiB = 2**30


@dataclass(frozen=True)
class Training:
    precision: str = "bf16"  # bf16 | fp8 | fp32 (fp8: FP8 GEMMs, bf16 weights; TE's or the kit's local ones)
    fp8_recipe: str = "tensorwise"  # the kit's local FP8 linears (helpers/precision/fp8_matmul.py)
    fp8_output_layer: bool = False  # the kit's local FP8 GEMMs in the output layer too (JobSpec.fp8_output_layer)
    dist_opt: bool = False  # distributed optimizer: main params and Adam states sharded over DP
    # Megatron-FSDP's sharding strategy (JobSpec.megatron_fsdp): optim | optim_grads | optim_grads_params; None = DDP
    fsdp: str | None = None
    fp8_param_gather: bool = False  # FP8 weights (JobSpec.fp8_param_gather): 1 byte per FP8 linear's weight
    recompute: str = "none"  # none | selective (recompute_modules' outputs) | full (recomputed units' inputs only)
    # Megatron's recompute fields (JobSpec.recompute_*). full: uniform = each model chunk's layers in units
    # of recompute_num_layers, block = its first recompute_num_layers layers one by one, the rest kept;
    # None = every layer on its own (uniform, 1). selective: the modules recomputed; None = core_attn.
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    recompute_modules: tuple[str, ...] | None = None
    # Megatron's activation offloading (cpu_offloading with cpu_offloading_num_layers): the saved activations
    # of that many of a model chunk's layers wait in host memory until their backward
    offload_layers: int = 0
    grad_reduce_in_fp32: bool = True  # the DDP gradient buffers' dtype (JobSpec.grad_reduce_dtype; fp32 jobs: fp32)
    # Elements per gradient bucket with overlap_grad_reduce (JobSpec.overlap_bucket_size); None: one
    # bucket. The distributed optimizer pads every bucket, and each rank owns a slice of each.
    bucket_size: int | None = None
    # Megatron-Core's TransformerConfig default (the kit does not change it): each pipeline stage keeps
    # its output tensor until the backward of that microbatch. Megatron-LM's training script sets True.
    deallocate_pipeline_outputs: bool = False
    allocator_overhead: float = 0.10  # reserved / allocated - 1 (see module docstring)
    # Core attention on the local backend (JobSpec.attention): "sdpa" = the kit's fused torch SDPA
    # (no s x s matrix), "megatron_local" = Megatron's DotProductAttention (materialises it)
    attention: str = "sdpa"
    # Megatron's own cross-entropy on GPU (what Megatron-LM runs without Transformer Engine's; the kit's
    # GPU jobs with JobSpec.cross_entropy = "megatron", or fp32 logits, which the kit's kernels leave to
    # it): it keeps fp32 exp-logits instead of the 16-bit logits. False: the kit's kernels
    # (helpers/runtime/layers/cross_entropy_triton.py) or Transformer Engine's, which keep the logits
    # as they are, or CPU jobs (Megatron's unfused one on fp32 logits)
    fused_cross_entropy: bool = True

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """What selective recompute recomputes (Megatron's default: the attention core); () otherwise."""
        if self.recompute != "selective":
            return ()
        return ("core_attn",) if self.recompute_modules is None else self.recompute_modules

    def recomputed_units(self, layers: list) -> tuple[list[list], list]:
        """Full recompute over one model chunk's layers: (the units recomputed, each from its input;
        the layers kept whole), as Megatron's checkpointed forward splits them (megatron/core/recompute.py)."""
        if self.recompute != "full":
            return [], list(layers)
        n = max(1, self.recompute_num_layers or 1)
        if self.recompute_method == "block":
            return [[i] for i in layers[:n]], list(layers[n:])
        return [list(layers[k:k + n]) for k in range(0, len(layers), n)], []

    @property
    def param_bytes(self) -> int:
        return 4 if self.precision == "fp32" else 2

    @property
    def act_bytes(self) -> int:
        return 4 if self.precision == "fp32" else 2

    @classmethod
    def of(cls, spec) -> "Training":
        """The Training a JobSpec runs with (its precision as helpers/job/rules/resolve.py decides it)."""
        overlap = overlap_grad_reduce_of(spec.overlap_grad_reduce, spec.device, spec) == "on"
        modules = None if spec.recompute_modules is None else tuple(spec.recompute_modules)
        return cls(precision=precision_of(spec.precision, spec.device), fp8_recipe=spec.fp8_recipe,
                   fp8_output_layer=spec.fp8_output_layer, dist_opt=spec.dist_opt, fsdp=spec.megatron_fsdp,
                   fp8_param_gather=spec.fp8_param_gather,
                   recompute=spec.recompute_granularity or "none", recompute_method=spec.recompute_method,
                   recompute_num_layers=spec.recompute_num_layers, recompute_modules=modules,
                   bucket_size=spec.overlap_bucket_size if overlap else None,
                   grad_reduce_in_fp32=spec.grad_reduce_dtype == "fp32",
                   attention=attention_of(spec.attention, "te" if spec.backend == "te" else "local"),
                   fused_cross_entropy=spec.device == "cuda" and (
                       spec.cross_entropy == "megatron" or precision_of(spec.precision, spec.device) == "fp32"))
