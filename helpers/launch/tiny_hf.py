"""Small random Hugging Face checkpoints, made offline with `transformers`' own config classes, so
the HF import can be learned and tested without a download. Notebook/test side (torch and
transformers are imported inside the functions).

What each tiny model is, and what it exercises of the import: its family's record in
helpers/job/families.py (`Tiny`: transformers' config class and the fields that differ from
TINY_COMMON). Every norm weight is randomised (1 + 0.3 N(0,1)) and every projection bias
(0.1 N(0,1)): HF initialises them at 1.0 and 0, which is also Megatron's init, so a norm or bias the
import forgot would otherwise look loaded."""
from __future__ import annotations

import copy
import math
from pathlib import Path

from helpers.job import families

FAMILIES = tuple(families.TINY)  # the tiny models' names, e.g. "llama", "dsv2lite", "nemotronh"


def hf_config(family: str, num_layers: int | None = None, **changes):
    """The transformers config of a tiny model of `family` (a name in FAMILIES); `changes` replace
    config fields (e.g. hidden_size for a GPU-sized model of the same shape)."""
    import transformers

    tiny = families.TINY.get(family)
    if tiny is None:
        raise ValueError(f"unknown tiny HF family {family!r}; choose one of {', '.join(FAMILIES)}")
    common = {k: v for k, v in families.TINY_COMMON.items() if k not in tiny.without}
    fields = copy.deepcopy({**common, **tiny.fields})  # the record's lists stay the record's
    if num_layers and tiny.pattern_key:  # repeat the layer pattern
        fields[tiny.pattern_key] = (fields[tiny.pattern_key] * num_layers)[:num_layers]
    elif num_layers:
        fields["num_hidden_layers"] = num_layers
    return getattr(transformers, tiny.config_class)(**{**fields, **changes})


def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges (256 byte tokens + <|endoftext|>): tiny, made
    here, so the HF folder is complete (export writes the tokenizer back) without any download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<|endoftext|>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def make(family: str, path: str | Path, seed: int = 0, num_layers: int | None = None,
         tokenizer: bool = True, dtype: str = "float32", published_names: bool = False, **changes) -> Path:
    """Save a random HF model of `family` (tiny unless `changes` say otherwise; one
    model.safetensors) and a tokenizer to `path`; returns the folder. Same arguments, same weights.
    Tensor names are those transformers' save_pretrained writes; `published_names` renames the
    Nemotron-H embedding to the published checkpoints' spelling (see published_embedding_name)."""
    import torch
    import transformers as T

    path = Path(path)
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(hf_config(family, num_layers, **changes), dtype=getattr(torch, dtype))
    # Zero-centred norms (Gemma's) store gain - 1 (they multiply by 1 + weight): the same gains as the
    # others' 1 + 0.3 N are weights of 0.3 N there (1 + 0.3 N would double every gain: 24 norms of gain
    # ~2 in the Gemma 3 model make training chaotic, layouts' rounding growing tenfold per step).
    gain_offset = 0.0 if families.of_model_type(model.config.model_type).zero_centered_norms else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # input/post-attention/final norms, q/k norms, q_a/kv_a norms
                p.copy_(gain_offset + 0.3 * torch.randn_like(p))
            if name.endswith("_proj.bias"):  # Qwen2's QKV biases: HF starts them at zero, which hides a lost one
                p.copy_(0.1 * torch.randn_like(p))
        for name, p in model.named_parameters():
            if name.endswith("mixer.dt_bias"):  # see the module doc: every step above time_step_min
                dt = torch.exp(torch.empty_like(p).uniform_(math.log(0.01), math.log(0.1)))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # Nemotron-H's routing bias: zero would hide a lost one
                b.copy_(0.1 * torch.randn_like(b))
    model.save_pretrained(path)
    if published_names:
        published_embedding_name(path)
    if tokenizer:
        byte_tokenizer().save_pretrained(path)
    return path


def published_embedding_name(path: Path) -> None:
    """transformers 5.12 saves Nemotron-H's embedding as `backbone.embedding.weight` (the reverse of
    its load-time renaming); the published checkpoints, and Megatron-Bridge 0.6.2's mapping, name it
    `backbone.embeddings.weight`, which transformers loads as well. Rename it in the saved file (the
    kit imports both spellings: helpers/job/hf_names.py)."""
    from safetensors.torch import load_file, save_file

    file = Path(path) / "model.safetensors"
    tensors = load_file(file)
    if "backbone.embedding.weight" in tensors:
        tensors["backbone.embeddings.weight"] = tensors.pop("backbone.embedding.weight")
        save_file(tensors, file, metadata={"format": "pt"})


def config_only(path: str | Path, config: dict) -> Path:
    """A folder with `config` as config.json and a model.safetensors whose header lists every tensor
    Megatron-Bridge looks up (helpers/job/hf_names.py), each empty: what the checks before start
    read, without weights (tests of those checks)."""
    import json

    from helpers.job import hf_model, hf_names

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    arch = hf_model.architecture(config) or ""
    names = [n + "weight" if n.endswith(".") else n for n in hf_names.expected(arch, config)]
    header = json.dumps({n: {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for n in names}).encode()
    header += b" " * (-len(header) % 8)
    (path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return path
