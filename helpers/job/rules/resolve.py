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
Also: `out="runs"` becomes the repository's runs/ folder, and an `hf_model` folder an absolute
path (workers may start elsewhere) with no seed checkpoint (the HF weights are the same start in
every layout)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from helpers.job import hf_model, paths
from helpers.job.data.tokenizers import has_folder_tokenizer
from helpers.job.rules.environment import Environment


def device_of(device: str, env: Environment) -> str:
    return ("cuda" if env.cuda_devices > 0 else "cpu") if device == "auto" else device


def precision_of(precision: str, device: str) -> str:
    """What `precision` trains in on `device`: auto is bf16 on a GPU, fp32 on the CPU."""
    return ("bf16" if device == "cuda" else "fp32") if precision == "auto" else precision


def backend_of(backend: str, device: str, te_installed: bool) -> str:
    return ("te" if device == "cuda" and te_installed else "local") if backend == "auto" else backend


def attention_of(attention: str, backend: str, sinks: bool = False) -> str:
    """auto: TE's on te; on the local backend the kit's SDPA one, or Megatron's own local attention
    for a model with attention sinks (GPT-OSS), the one local attention that computes them."""
    if attention != "auto":
        return attention
    return "transformer_engine" if backend == "te" else "megatron_local" if sinks else "sdpa"


def tokenizer_of(tokenizer: str, hf_model: str | None) -> str:
    return ("hf" if has_folder_tokenizer(hf_model) else "byte") if tokenizer == "auto" else tokenizer


def tensorboard_of(tensorboard: str, installed: bool) -> str:
    return ("on" if installed else "off") if tensorboard == "auto" else tensorboard


def resolve(spec, env: Environment):
    """A copy of `spec` (a JobSpec) with every auto decided for this machine."""
    device = device_of(spec.device, env)
    backend = backend_of(spec.backend, device, env.te_installed)
    decided = dict(device=device, precision=precision_of(spec.precision, device), backend=backend,
                   attention=attention_of(spec.attention, backend, hf_model.needs_megatron_attention(spec.hf_model)),
                   tensorboard=tensorboard_of(spec.tensorboard, env.tensorboard_installed),
                   out=str(paths.runs_dir()) if spec.out == "runs" else spec.out)
    if spec.hf_model:
        decided.update(hf_model=str(Path(spec.hf_model).expanduser().resolve()), seed_checkpoint=False)
    decided["tokenizer"] = tokenizer_of(spec.tokenizer, decided.get("hf_model"))
    return dataclasses.replace(spec, **decided)
