"""JobSpec: everything a training job needs, as plain data. The runner writes it into the run
directory as `spec.json`; every worker reads it from there. Safe to import on both sides.

The parallel sizes and what derives from them come from `ParallelSizes` (helpers/job/sizes.py).
Every field has a one-line doc (`JobSpec.doc(name)`); `python -m helpers --help` prints them."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

from helpers.job.data.source import DEFAULT_SPLIT
from helpers.job.data.tokenizers import NAMES as TOKENIZERS
from helpers.job.sizes import ParallelSizes, knob

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16", "fp8")
BACKENDS = ("auto", "local", "te")  # local: Megatron's local layer spec + the kit's modules; te: Megatron's TE spec
ATTENTION_KINDS = ("auto", "sdpa", "megatron_local", "transformer_engine")
CROSS_ENTROPY_KINDS = ("kit", "megatron")
LR_DECAYS = ("constant", "linear", "cosine")  # Megatron's OptimizerParamScheduler styles the kit offers
OVERLAP = ("auto", "on", "off")  # overlap_grad_reduce, overlap_param_gather
GRAD_REDUCE_DTYPES = ("fp32", "bf16")  # the DDP gradient buffer (Megatron's grad_reduce_in_fp32)
FP8_RECIPES = ("tensorwise", "rowwise", "delayed")  # helpers/precision/fp8_matmul.py
PER_TENSOR_FP8_RECIPES = ("tensorwise", "delayed")  # one scale per tensor: the same GEMMs and saved tensors
# What Megatron-FSDP shards over the data-parallel ranks (Megatron-LM's --data-parallel-sharding-strategy)
FSDP_STRATEGIES = ("optim", "optim_grads", "optim_grads_params")
TENSORBOARD = ("auto", "on", "off")
FP8_LINEARS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")  # the linears precision='fp8' swaps
INSTRUMENTS = ("auto", "on", "off")
PROFILE_MODES = ("full", "device")  # helpers/runtime/measure/torch_profile.py
# Activation recompute, with Megatron-Core 0.19.2's TransformerConfig names and values
RECOMPUTE_GRANULARITIES = ("full", "selective")
RECOMPUTE_METHODS = ("uniform", "block")
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
                     "gdn_norm_out")  # what TransformerConfig.__post_init__ accepts
RECOMPUTE_MODULES_DEFAULT = ("core_attn",)  # what TransformerConfig.__post_init__ puts in place of None


def attention_of(attention: str, backend: str, sinks: bool = False) -> str:
    """auto: TE's on te; on the local backend the kit's SDPA one, or Megatron's own local attention
    for a model with attention sinks (GPT-OSS), the one local attention that computes them."""
    if attention != "auto":
        return attention
    return "transformer_engine" if backend == "te" else "megatron_local" if sinks else "sdpa"


@dataclass(frozen=True)
class JobSpec(ParallelSizes):
    dist_opt: bool = knob(False, "distributed optimizer: optimizer state sharded over data-parallel ranks",
                          per_run=True)
    megatron_fsdp: str | None = knob(None, "Megatron-FSDP in place of Megatron's DDP, and what it shards over the "
                                     "data-parallel ranks: optim (main parameters and Adam states, as dist_opt), "
                                     "optim_grads (+ gradients), optim_grads_params (+ parameters, each layer's "
                                     "gathered before it runs: ZeRO-3); none = DDP. Planned, not run: the kit's "
                                     "worker builds Megatron's DDP", choices=FSDP_STRATEGIES, per_run=True)
    # ---- model and training
    model: str = knob("tiny-gpt", "model preset (helpers/job/models.py)")
    model_overrides: dict = knob(dict, "preset fields to change, e.g. num_layers=2", cli="keyvalue")
    hf_model: str | None = knob(None, "train a local Hugging Face model folder (config.json + safetensors), "
                                "imported through Megatron-Bridge into the layout; replaces model")
    export_hf: str | None = knob(None, "after training, write the model back as a Hugging Face folder here "
                                 "(needs hf_model; $VARS expanded on the node); with eval_only and one "
                                 "load_dir: that checkpoint", per_run=True)
    iters: int = knob(5, "training iterations")
    lr: float = knob(3e-3, "peak learning rate (constant unless lr_warmup_iters or lr_decay change it)")
    lr_warmup_iters: int = knob(0, "linear warm-up from 0 to lr over this many iterations (Megatron's "
                                "OptimizerParamScheduler; as in Megatron, the first iteration then trains at lr 0)")
    lr_decay: str = knob("constant", "after the warm-up: constant, or linear / cosine decay to min_lr at "
                         "lr_decay_iters", choices=LR_DECAYS)
    lr_decay_iters: int | None = knob(None, "iteration where the decay reaches min_lr; none = iters (set it to the "
                                      "whole run's length when the run is split into resumed jobs)")
    min_lr: float = knob(0.0, "learning rate at the end of the decay")
    clip_grad: float = knob(1.0, "gradient-norm clipping threshold")
    # ---- the optimizer and data-parallel communication, with Megatron-LM's names and defaults
    weight_decay: float = knob(0.01, "AdamW's decoupled weight decay on the weight matrices (Megatron leaves "
                               "biases and other 1-D parameters, e.g. norms, undecayed)")
    adam_beta1: float = knob(0.9, "Adam's decay rate of the gradient's running mean")
    adam_beta2: float = knob(0.999, "Adam's decay rate of the squared gradient's running mean")
    adam_eps: float = knob(1e-8, "added to Adam's denominator (numerical stability)")
    overlap_grad_reduce: str = knob("auto", "reduce each gradient bucket over the data-parallel ranks while the "
                                    "backward pass goes on: auto = on for cuda jobs that reduce gradients over "
                                    "several ranks (DP x CP or expert DP > 1), off on cpu", choices=OVERLAP)
    overlap_param_gather: str = knob("auto", "with dist_opt and overlap_grad_reduce: all-gather the updated "
                                     "parameters during the next forward pass instead of in the optimizer step: "
                                     "auto = on when both are on (cuda)", choices=OVERLAP)
    ddp_bucket_size: int | None = knob(None, "parameters per gradient bucket with overlap_grad_reduce (each bucket "
                                       "is reduced as soon as its gradients are ready); none = Megatron's "
                                       "max(40M, 1M x DP x CP)")
    grad_reduce_dtype: str = knob("fp32", "dtype of the gradient buffers, accumulated and reduced over the data-"
                                  "parallel ranks: fp32 (Megatron-LM's for bf16), or bf16 (--grad-reduce-in-bf16: "
                                  "half the bytes and traffic; bf16 and fp8 jobs only)", choices=GRAD_REDUCE_DTYPES)
    seed: int = knob(1234, "random seed: initial weights, synthetic data")
    moe_dispatcher: str = knob("alltoall", "MoE token dispatcher", choices=("alltoall", "allgather"))
    backend: str = knob("auto", "layer implementation: auto = Megatron's Transformer Engine spec when "
                        "transformer_engine is installed and the job runs on GPU, else local (the kit's modules on "
                        "Megatron's local spec); te is not tested on this kit's machines", choices=BACKENDS)
    attention: str = knob("auto", "core attention: auto = sdpa on the local backend, Transformer Engine's on te; "
                          "sdpa = the kit's on torch's fused scaled_dot_product_attention, its context-parallel "
                          "form when cp > 1 (helpers/runtime/layers/attention/); megatron_local = Megatron's "
                          "local DotProductAttention (materialises every score matrix; no CP, no MLA)",
                          choices=ATTENTION_KINDS)
    cross_entropy: str = knob("kit", "the loss's fused vocab-parallel cross-entropy on GPU: kit = the kit's Triton "
                              "kernels (Transformer Engine's way: the logits kept as they are, the softmax recomputed "
                              "in the backward; helpers/runtime/layers/cross_entropy_triton.py); megatron = "
                              "Megatron-Core's native one (torch.compile'd, keeps an fp32 softmax for the backward: "
                              "what Megatron-LM runs without Transformer Engine). CPU jobs take Megatron's unfused one",
                              choices=CROSS_ENTROPY_KINDS)
    # ---- activation recompute, with Megatron-Core's TransformerConfig names and defaults
    recompute_granularity: str | None = knob(None, "activation recompute: none = every activation kept for the "
                                             "backward; full = only each recomputed unit's input kept, its layers "
                                             "run forward again in the backward; selective = only "
                                             "recompute_modules' outputs recomputed", choices=RECOMPUTE_GRANULARITIES)
    recompute_method: str | None = knob(None, "with full: uniform = every model chunk's layers in units of "
                                        "recompute_num_layers, each recomputed from its input; block = the first "
                                        "recompute_num_layers layers of every model chunk recomputed, the rest "
                                        "kept", choices=RECOMPUTE_METHODS)
    recompute_num_layers: int | None = knob(None, "with full: layers per recomputed unit (uniform) or layers "
                                            "recomputed per model chunk (block); at least 1")
    recompute_modules: list | None = knob(None, "with selective: the parts recomputed, of "
                                          + ", ".join(RECOMPUTE_MODULES) + "; none = Megatron's "
                                          + ", ".join(RECOMPUTE_MODULES_DEFAULT), metavar="MODULE")
    # ---- data (helpers/job/data/; worker side helpers/runtime/data/)
    data: str = knob("synthetic", "what to train on: synthetic tokens; wikitext (WikiText-2, continued pretraining); "
                     "sft (the kit's generated prompt/response set, or data_dir's); or a path: a folder of .txt "
                     "files, a .txt/.jsonl/.parquet file or a folder of them, or a Megatron indexed dataset "
                     "prefix (PREFIX.bin + PREFIX.idx). Rows with messages or prompt + response train SFT (loss "
                     "on the answers), text rows continued pretraining", per_run=True)
    tokenizer: str = knob("auto", "auto = the hf_model folder's own tokenizer (hf) when it has one, else byte; "
                          "byte (258 tokens, fits the tiny presets), gpt2, qwen3, or hf", choices=TOKENIZERS)
    data_dir: str | None = knob(None, "wikitext: the folder with wikitext-2-raw-v1/ (none = KIT_DATA_DIR, then HF "
                                "datasets, then 'generated'); sft: a .jsonl file or folder (none = the generated set)")
    data_column: str | None = knob(None, "the JSONL key / Parquet column with each document's text or each "
                                   "example's conversation; none = text, then messages, then prompt + response")
    data_split: str = knob(DEFAULT_SPLIT, "train,valid,test weights dividing the documents of a source without "
                           "its own split files (Megatron's --split)")
    eval_interval: int = knob(0, "validate every K iterations (0 = after the last only); real data only")
    eval_iters: int = knob(2, "global batches per validation and per test pass")
    # ---- where and how
    device: str = knob("auto", "auto = cuda when a GPU is visible, else cpu", choices=DEVICES)
    precision: str = knob("auto", "auto = fp32 on cpu, bf16 on cuda; fp8 = bf16 weights and activations with the "
                          "GEMMs of the attention and dense-MLP linears in FP8 (a GPU of compute capability >= 8.9; "
                          "local backend: the kit's FP8 linears on torch._scaled_mm, te: Transformer Engine's FP8)",
                          choices=PRECISIONS)
    fp8_recipe: str = knob("tensorwise", "FP8 scaling with precision=fp8: tensorwise (one scale per tensor, from "
                           "its amax), rowwise (one per row; Hopper and newer, local backend) or delayed (one per "
                           "tensor, from the amaxes of the last 16 steps: no amax pass before each cast)",
                           choices=FP8_RECIPES)
    fp8_param_gather: bool = knob(False, "with precision=fp8 on te and dist_opt or megatron_fsdp: the parameters "
                                  "kept in FP8 (Transformer Engine's FP8 weights, 1 byte), so the parameter "
                                  "all-gather moves FP8 and no separate FP8 weight copy is made. Planned, not run: "
                                  "the kit's worker keeps bf16 weights", per_run=True)
    fp8_output_layer: bool = knob(False, "with precision=fp8 on the local backend, the output layer's (logits) "
                                  "GEMMs in FP8 too; off: bf16, as Transformer Engine's recipes keep it "
                                  "(docs/results/precision.md measures both)")
    seed_checkpoint: bool = knob(True, "start from the cached world-size-1 seed checkpoint (same weights in "
                                 "every layout); off = each layout's own random init")
    seed_checkpoint_dir: str | None = knob(None, "where the workers find the seed checkpoint (the rules name the "
                                           "cached one; a multi-node job may name a node-local copy)", cli=False,
                                           resolved=True)
    name: str | None = knob(None, "run-directory prefix; none = <model>-<layout>")
    out: str = knob("runs", "parent folder of run directories")
    tensorboard: str = knob("auto", "TensorBoard event files in the run directory (loss, lr, grad norm, tokens/s, "
                            "memory, validation/test loss; tensorboard --logdir runs): auto = on when the tensorboard "
                            "package is installed", choices=TENSORBOARD)
    timeout_s: float = knob(600.0, "wall-clock limit in seconds; the job is killed and its stalled ranks named",
                            aliases=("--timeout",))
    stall_timeout_s: float | None = knob(None, "stop the job when no rank has reported progress (a heartbeat) "
                                         "for this long once the first arrived, naming the stalled ranks; "
                                         "none = only timeout_s")
    collective_timeout_s: float | None = knob(None, "how long a rank waits inside one collective before it fails "
                                              "with the backend's timeout error; none = 300 s (gloo) / 600 s (NCCL)")
    env: dict = knob(dict, "extra environment variables for every rank, e.g. NCCL_DEBUG=INFO", cli="keyvalue")
    hf_parity_layouts: list | None = knob(None, "compare the imported model's logits with transformers' in each "
                                          "of these layouts (dicts of sizes), then stop (helpers/launch/hf_check.py)",
                                          cli=False, per_run=True)
    groups_only: bool = knob(False, "start the process groups, write groups.json and stop (no model, no data)",
                             cli=False, per_run=True)
    # ---- checkpoints (helpers/runtime/checkpoint/). Paths may use $VARS, expanded on each node.
    save_interval: int | None = knob(None, "save every N iterations and after the last; none = never", per_run=True)
    save_dir: str | None = knob(None, "where to save; none = <run_dir>/checkpoints", per_run=True)
    load_dir: str | list | None = knob(None, "resume from the checkpoint this folder's tracker names (Megatron-LM's "
                                       "latest_checkpointed_iteration.txt), or an iter_* folder (the kit's, "
                                       "Megatron-LM's or Megatron-Bridge's); several with eval_only", per_run=True)
    load_optimizer: bool = knob(True, "load the optimizer state too (off: weights only, fresh optimizer)")
    eval_only: bool = knob(False, "evaluate load_dir's checkpoint(s) on a fixed batch, forward only "
                           "(eval.json); no training", per_run=True)
    # ---- what is recorded around the loop, and failures injected on purpose (helpers/runtime/measure/)
    log_interval: int = knob(1, "a metrics.jsonl row, TensorBoard point and progress step every N iterations and "
                             "after the last (Megatron-LM's --log-interval; step time = the interval's mean); only "
                             "those iterations compute the global loss, the one wait for the device the kit adds. A "
                             "NaN stops the job at its own iteration by the grad norm Megatron computes every step "
                             "(with clip_grad > 0), else at the next logged loss")
    instruments: str = knob("auto", "comm.jsonl, timeline.jsonl and moe.jsonl (every collective and the one a hung "
                            "rank waited in, forward/backward per microbatch, tokens per expert): auto = on on cpu "
                            "(the lessons' pictures), off on cuda, where their hooks, CUDA events and copies to the "
                            "host slow every step", choices=INSTRUMENTS)
    capture_tensors_at: int | None = knob(None, "at this iteration rank 0 keeps the input, output gradient and weight "
                                          "of each linear of the first layer (linear_tensors.pt; lesson 17); "
                                          "none = off", per_run=True)
    torch_profile: str | None = knob(None, "write torch.profiler tables of rank 0's last two iterations and the "
                                     "device's idle gaps to this file (+ FILE.idle.json); cuda, 3+ iterations; "
                                     "none = off", per_run=True)
    torch_profile_mode: str = knob("full", "with torch_profile: full = host ranges and device activity (the host "
                                   "runs ~2x slower); device = device kernels and launches over one iteration "
                                   "(idle gaps close to an unprofiled step's)", choices=PROFILE_MODES)
    faults: list = knob(list, "failures injected on purpose (tests, lesson 13), each KIND@ITERATION[:rankN], "
                        "e.g. hang@2:rank1; KIND: raise, exit, killjob, hang, nan, exit|hang|killjob_during_save, "
                        "exit|hang_during_load (helpers/job/faults.py)", metavar="KIND@ITERATION[:rankN]", per_run=True)

    # ---- what other modules ask of a spec ---------------------------------------------
    @property
    def bf16(self) -> bool:
        """Weights and activations in bf16: bf16 jobs and fp8 ones (only their GEMMs run in FP8)."""
        return self.precision in ("bf16", "fp8")

    @property
    def lr_decay_end(self) -> int:
        """The iteration where the learning-rate decay ends: lr_decay_iters, or the run's last."""
        return self.lr_decay_iters if self.lr_decay_iters is not None else self.iters

    @property
    def overlap_bucket_size(self) -> int:
        """Elements per DDP gradient bucket when overlap_grad_reduce is on: ddp_bucket_size, or
        Megatron-LM's max(40M, 1M x DP x CP), large enough that each rank's share of a bucket keeps
        the collective bandwidth-bound. (Off, Megatron reduces the whole buffer as one bucket.)"""
        return self.ddp_bucket_size or max(40_000_000, 1_000_000 * self.dp * self.cp)

    def layout_record(self) -> dict:
        """The layout as recorded in manifest.json and in every checkpoint's kit record (a
        checkpoint resumed in an equal layout also restores each rank's RNG state)."""
        return {"world_size": self.world_size, "tp": self.tp, "pp": self.pp, "vpp": self.vpp, "cp": self.cp,
                "dp": self.dp, "ep": self.ep, "etp": self.expert_tp, "edp": self.edp, "sp": self.sp,
                "dist_opt": self.dist_opt, "first_stage_layers": self.first_stage_layers,
                "last_stage_layers": self.last_stage_layers}

    def model_preset(self):
        """The model this job trains: the preset with its overrides, or the HF folder's description."""
        from helpers.job import hf_model, models
        if self.hf_model:
            return hf_model.describe(self.hf_model)
        return models.preset(self.model).with_(**self.model_overrides)

    def load_dirs(self) -> list[str]:
        """load_dir as a list, as written ($VARS kept: a command written for another node)."""
        if isinstance(self.load_dir, list):
            return list(self.load_dir)
        return [self.load_dir] if self.load_dir else []

    def load_paths(self) -> list[Path]:
        """load_dir as a list of paths, $VARS expanded (on a worker: this node's values)."""
        return [Path(os.path.expandvars(str(d))) for d in self.load_dirs()]

    @classmethod
    def per_run_defaults(cls) -> dict:
        """Every per_run field at its default: what a run derived for the model alone (the seed
        checkpoint's) resets."""
        return {f.name: f.default_factory() if f.default_factory is not MISSING else f.default
                for f in fields(cls) if f.metadata.get("per_run")}

    def unresolved(self) -> "JobSpec":
        """This spec with every field the rules fill in (resolved=True) back at its default."""
        return dataclasses.replace(self, **{f.name: f.default for f in fields(self) if f.metadata.get("resolved")})

    @classmethod
    def doc(cls, name: str) -> str:
        return next(f.metadata.get("doc", "") for f in fields(cls) if f.name == name)

    # ---- (de)serialisation ---------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "JobSpec":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown JobSpec fields: {sorted(unknown)}")
        return cls(**d)

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def read(cls, path: Path) -> "JobSpec":
        return cls.from_dict(json.loads(Path(path).read_text()))
