"""Every `auto` of a JobSpec decided once, before the checks: the spec the workers read from
spec.json says what they build. Values that are not `auto` are left as given (a wrong one is a
violation of helpers/job/rules/fields.py, reported with every other problem).

  device     auto -> cuda when this machine sees a GPU, else cpu
  precision  auto -> bf16 on cuda, fp32 on cpu
  backend    auto -> te (Megatron's Transformer Engine spec) on cuda with TE installed, else local
  attention  auto -> sdpa on the local backend (the kit's attention on torch SDPA; its
             context-parallel form when cp > 1), megatron_local for attention sinks (GPT-OSS),
             transformer_engine on te
  tokenizer  auto -> hf (the hf_model folder's own tokenizer) when the folder holds one, else byte
  tensorboard auto -> on when the tensorboard package is installed, else off
  instruments auto -> on on cpu, off on cuda (comm log, timeline and router log cost GPU time)
  overlap_grad_reduce  auto -> on on cuda when gradients are reduced over several ranks, else off
  overlap_param_gather auto -> on on cuda with dist_opt and overlap_grad_reduce on, else off
Also: `out="runs"` becomes the repository's runs/ folder, and an `hf_model` folder an absolute
path (workers may start elsewhere) with no seed checkpoint (the HF weights are the same start in
every layout), and a `torch_profile` file an absolute path."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job import checkpoint_dir, data, hf_model, paths
from helpers.job.data.pinned import Pinned
from helpers.job.data.tokenizers import has_folder_tokenizer
from helpers.job.models import ModelPreset
from helpers.job.spec import attention_of
from helpers.job.rules import fields
from helpers.job.rules.environment import Environment
from helpers.job.violation import Violation


def device_of(device: str, env: Environment) -> str:
    return ("cuda" if env.cuda_devices > 0 else "cpu") if device == "auto" else device


def precision_of(precision: str, device: str) -> str:
    """What `precision` trains in on `device`: auto is bf16 on a GPU, fp32 on the CPU."""
    return ("bf16" if device == "cuda" else "fp32") if precision == "auto" else precision


def backend_of(backend: str, device: str, te_installed: bool) -> str:
    return ("te" if device == "cuda" and te_installed else "local") if backend == "auto" else backend


def tokenizer_of(tokenizer: str, hf_model: str | None) -> str:
    return ("hf" if has_folder_tokenizer(hf_model) else "byte") if tokenizer == "auto" else tokenizer


def tensorboard_of(tensorboard: str, installed: bool) -> str:
    return ("on" if installed else "off") if tensorboard == "auto" else tensorboard


def instruments_of(instruments: str, device: str) -> str:
    return ("on" if device == "cpu" else "off") if instruments == "auto" else instruments


def overlap_grad_reduce_of(overlap: str, device: str, spec) -> str:
    """auto: on where the overlap hides something, a GPU job whose gradients are reduced over
    several ranks (DP x CP for the dense part, expert DP for the experts); off on the CPU."""
    if overlap != "auto":
        return overlap
    return "on" if device == "cuda" and (spec.dp * spec.cp > 1 or spec.edp > 1) else "off"


def overlap_param_gather_of(overlap: str, device: str, grad_reduce: str, dist_opt: bool) -> str:
    """auto: on for a GPU job where Megatron allows it (the distributed optimizer, overlap_grad_reduce on)."""
    if overlap != "auto":
        return overlap
    return "on" if device == "cuda" and dist_opt and grad_reduce == "on" else "off"


def resolve(spec, env: Environment, seed_path: str | None = None, folders: dict | None = None) -> Resolved:
    """`spec` (a JobSpec) with every auto decided for this machine, and what follows from it worked
    out once (`settle`): the model, the data source pinned, the seed checkpoint's path. `seed_path`
    names where the workers find the seed checkpoint instead of the cache (e.g. a node-local copy);
    `folders`: HF folders this job read already (absolute path -> hf_model.Folder), not read again."""
    device = device_of(spec.device, env)
    backend = backend_of(spec.backend, device, env.te_installed)
    decided = dict(device=device, precision=precision_of(spec.precision, device), backend=backend,
                   attention=attention_of(spec.attention, backend, hf_model.needs_megatron_attention(spec.hf_model)),
                   tensorboard=tensorboard_of(spec.tensorboard, env.tensorboard_installed),
                   instruments=instruments_of(spec.instruments, device),
                   overlap_grad_reduce=overlap_grad_reduce_of(spec.overlap_grad_reduce, device, spec),
                   out=str(paths.runs_dir()) if spec.out == "runs" else spec.out)
    if spec.torch_profile:
        decided["torch_profile"] = str(Path(spec.torch_profile).expanduser().resolve())
    if spec.hf_model:
        decided.update(hf_model=str(Path(spec.hf_model).expanduser().resolve()), seed_checkpoint=False)
    decided["tokenizer"] = tokenizer_of(spec.tokenizer, decided.get("hf_model"))
    decided["overlap_param_gather"] = overlap_param_gather_of(spec.overlap_param_gather, device,
                                                              decided["overlap_grad_reduce"], spec.dist_opt)
    return settle(dataclasses.replace(spec, **decided), seed_path, folders)


@dataclass(frozen=True)
class Resolved:
    """A job worked out once, before any process starts; `rules.check` checks it and the run
    directory carries it (spec.json, model.json, data.json), so the workers build what was checked
    without reading the HF folder or the data source again."""
    spec: object  # the JobSpec: every auto decided, the data source and the seed checkpoint pinned
    model: ModelPreset | None  # the model it trains; None when that is a problem (model_problems, or hf)
    data: Pinned | None = None  # the data source with every file's size and SHA-256; None: synthetic or unresolved
    hf: hf_model.Folder | None = None  # spec.hf_model read once: config.json, tensor names, what stops it
    model_problems: tuple[Violation, ...] = ()  # why there is no model (an unknown preset or field)
    data_error: Exception | None = None  # why the data source did not resolve (DataNotFound, ValueError)


def settle(spec, seed_path: str | None = None, folders: dict | None = None) -> Resolved:
    """What a spec with its autos decided implies, each read once: the HF folder (config.json and
    the safetensors headers), the model, the data source (resolved, every file hashed, its path
    written into the spec) and the seed checkpoint (seed_checkpoint_dir). What does not resolve is kept for
    the rules to report with every other problem."""
    folder = ((folders or {}).get(spec.hf_model) or hf_model.read(spec.hf_model)) if spec.hf_model else None
    model, model_problems = fields.model_of(spec, folder)
    pinned, error = None, None
    try:
        src = data.resolve(spec)
        if src is not None:
            pinned = data.pin(src)
            spec = dataclasses.replace(spec, **data.spec_fields(spec, src))
    except (DataNotFound, ValueError) as e:
        error = e
    if spec.seed_checkpoint and model is not None:
        seed = seed_path or str(checkpoint_dir.seed_path(spec, model))
        spec = dataclasses.replace(spec, seed_checkpoint_dir=seed)
    return Resolved(spec, model, pinned, folder, tuple(model_problems), error)
