"""The tensor names of an HF folder against the names Megatron-Bridge looks up, before any process
starts: read from the safetensors headers with safetensors' own reader (`safe_open` maps the file and
parses the header only: no tensor data read, and no torch, with the "numpy" framework).
`read_names` is the one place a header is read: each tensor's name with its dtype and shape.
helpers/job/hf_model.read reads each file once per job and hands the names to every check and to
the run directory's model.json, which the workers read, and the shapes to helpers/job/hf_shapes.py.

Two spellings of one tensor exist in folders users have: transformers 5.12.1's own NemotronH
`save_pretrained` writes the embedding as `backbone.embedding.weight` (the reverse of its load-time
renaming), while the published checkpoints and Bridge 0.6.2's mapping say `backbone.embeddings.weight`.
ALIASES lists such spellings; `renames` says which one a folder uses, and the worker hands Bridge
that name (model.json's `renames`; helpers/runtime/hf/registry.py), so import and export keep the
folder's own spelling.

What Bridge needs besides the per-layer tensors (REQUIRED: embedding, final norm, output layer
unless tied; plus every layer index) is checked here; a name that matches neither Bridge's spelling
nor an alias is one violation naming the tensors and the fix."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from safetensors import SafetensorError, safe_open

from helpers.job import families
from helpers.job.violation import Found, Violation

# architecture -> {Bridge's name: other names of the same tensor in saved folders} (families.py)
ALIASES = {a: f.tensor_aliases for f in families.FAMILIES for a in f.architectures if f.tensor_aliases}
DECODER = ("model.embed_tokens.weight", "model.norm.weight", "model.layers")
# architecture -> (embedding, final norm, prefix of the layers) when not DECODER's; the output layer is lm_head.weight
REQUIRED = {a: f.tensors for f in families.FAMILIES for a in f.architectures if f.tensors}
OUTPUT = "lm_head.weight"


class Unreadable(ValueError):
    pass


class Tensor(NamedTuple):
    """A tensor as its safetensors header describes it."""
    dtype: str  # safetensors' name: "F32", "BF16", "F8_E4M3", "U8", ...
    shape: tuple[int, ...]


def read_names(file: Path) -> dict[str, Tensor]:
    """One safetensors file's tensor names, each with its dtype and shape (the only place the kit
    reads a header). safetensors checks the header as it does before any load: a file too short for
    one, a header that is not its JSON, or tensors whose data runs past the end of the file (a
    partial download or copy) is Unreadable."""
    try:
        # "numpy", not "pt": opening with "pt" imports torch, which the notebook side does not need here
        with safe_open(file, framework="numpy") as f:
            return {name: Tensor(s.get_dtype(), tuple(s.get_shape())) for name in f.keys()
                    for s in (f.get_slice(name),)}
    except (OSError, SafetensorError) as e:
        raise Unreadable(f"{file.name}: {e}") from e


def tensors(folder: str | Path) -> dict[str, Tensor]:
    """Every tensor of the folder's *.safetensors headers by name, each file read once."""
    found = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        found.update(read_names(file))
    return found


def expected(architecture: str, config: dict) -> list[str]:
    """Bridge's names of the non-layer tensors, and one prefix per layer ("model.layers.3.")."""
    embedding, norm, layers = REQUIRED.get(architecture, DECODER)
    count = len(config.get("layers_block_type") or config.get("hybrid_override_pattern") or ()) or \
        config.get("num_hidden_layers", 0)
    tied = bool(config.get("tie_word_embeddings", False))
    return [embedding, norm] + ([] if tied else [OUTPUT]) + [f"{layers}.{i}." for i in range(count)]


def renames(architecture: str, names: set[str]) -> dict[str, str]:
    """Bridge's name -> the folder's, for every aliased tensor the folder spells the other way."""
    out = {}
    for bridge_name, others in ALIASES.get(architecture, {}).items():
        if bridge_name not in names:
            found = [o for o in others if o in names]
            if found:
                out[bridge_name] = found[0]
    return out


def unreadable(folder: str | Path, error: Unreadable) -> list[Violation]:
    """hf_weights_unreadable: a safetensors file without a header `tensors` could read."""
    v = Found("hf")
    v.add("hf_weights_unreadable", f"hf_model folder {str(folder)!r}: {error}",
          "save the model again with save_pretrained() (a partial download or copy leaves such a file)")
    return v


def problems(folder: str | Path, architecture: str, config: dict, names: set[str]) -> list[Violation]:
    """hf_weights_unnamed: tensors Bridge will look for and not find among `names` (the keys of `tensors`)."""
    v = Found("hf")
    aliased = renames(architecture, names)
    missing = []
    for name in expected(architecture, config):
        if name.endswith("."):
            if not any(n.startswith(name) for n in names):
                missing.append(name + "*")
        elif name not in names and name not in aliased:
            missing.append(name)
    if missing:
        spelled = sorted(n for n in names if ".layers." not in n and not n.startswith("layers."))[:6]
        also = {o for others in ALIASES.get(architecture, {}).values() for o in others}
        v.add("hf_weights_unnamed", f"hf_model folder {str(folder)!r} ({architecture}): Megatron-Bridge looks for "
              f"{', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}, which its safetensors do not hold "
              f"(its tensors outside the layers: {', '.join(spelled) or 'none'}"
              f"{'; aliases the kit accepts: ' + ', '.join(sorted(also)) if also else ''})",
              "save the model with transformers' save_pretrained() from the class of its architecture, or rename "
              "the tensors to the names above (safetensors.torch.load_file / save_file)")
    return v
