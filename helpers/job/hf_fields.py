"""The config.json fields an HF tensor's shape comes from, for the messages of helpers/job/hf_shapes.py:
`disagreements` says, for a tensor of a given header shape, each dimension config.json's fields give
another size (in the fields' names and values, as transformers' modeling code sizes the tensor);
`notes` and `q_lora_note` say where config.json disagrees with itself or with the tensors' names.
Only the tensors whose sizes a config's fields can set apart are known here (embeddings, attention
projections and norms, MLA's projections, MLP and expert widths); any other gets no words."""
from __future__ import annotations

import re

from helpers.job import families

# A dimension as config.json gives it: (size, the fields in words, the head count it is a multiple of or None)
MLP = ("gate_proj.weight", "up_proj.weight", "down_proj.weight")


def _field(config: dict, name: str):
    value = config.get(name)
    return (value, f"{name} {value}", None) if isinstance(value, int) and not isinstance(value, bool) else None


def _per_head(heads, width):
    if heads is None or width is None:
        return None
    return heads[0] * width[0], f"{heads[1]} x {width[1]}", heads[0]


def _plus(a, b):
    if a is None or b is None:
        return None
    return a[0] + b[0], f"({a[1]} + {b[1]})", None


def implied(config: dict, name: str) -> tuple | None:
    """The shape config.json gives the HF tensor `name`, one dimension per axis (None where no field
    says it); None for a tensor this table does not know."""
    f = lambda k: _field(config, k)  # noqa: E731
    hidden, heads = f("hidden_size"), f("num_attention_heads")
    mla = config.get("kv_lora_rank") is not None
    if config.get("head_dim") and not mla:  # MLA's head widths are its own fields; head_dim is not read
        head = f("head_dim")
    elif hidden and heads:
        head = (hidden[0] // heads[0], f"(hidden_size {hidden[0]} / num_attention_heads {heads[0]})", None)
    else:
        head = None
    leaf = ".".join(name.rsplit(".", 2)[-2:])
    if leaf == "norm.weight" and ".layers." in name:  # a layer's own norm (Mamba's): not the final one
        return None
    if leaf in MLP:
        if re.search(r"\.experts\.\d+\.", name):
            width = f("moe_intermediate_size") or f("intermediate_size")
        elif ".mlp." in name and "expert" not in name:
            width = f("intermediate_size")
        else:
            return None
        return (hidden, width) if leaf == "down_proj.weight" else (width, hidden)
    qk = _plus(f("qk_nope_head_dim"), f("qk_rope_head_dim"))
    vocab = f("vocab_size")
    kv_heads = f("num_key_value_heads") or heads
    norms = families.of_model_type(config.get("model_type")).qk_norm
    if norms == families.FULL_WIDTH:  # one norm over every head at once (OLMoE's)
        q_norm, k_norm = (_per_head(heads, head),), (_per_head(kv_heads, head),)
    else:
        q_norm = k_norm = (None if mla else head,)
    return {
        "q_norm.weight": q_norm, "k_norm.weight": k_norm, "q_a_layernorm.weight": (f("q_lora_rank"),),
        "kv_a_layernorm.weight": (f("kv_lora_rank"),), "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,), "norm.weight": (hidden,),
        "embed_tokens.weight": (vocab, hidden), "lm_head.weight": (vocab, hidden),
        "embeddings.weight": (vocab, hidden), "embedding.weight": (vocab, hidden),
        "q_proj.weight": (_per_head(heads, qk if mla else head), hidden),
        "q_a_proj.weight": (f("q_lora_rank"), hidden),
        "q_b_proj.weight": (_per_head(heads, qk), f("q_lora_rank")),
        "kv_a_proj_with_mqa.weight": (_plus(f("kv_lora_rank"), f("qk_rope_head_dim")), hidden),
        "kv_b_proj.weight": (_per_head(heads, _plus(f("qk_nope_head_dim"), f("v_head_dim"))), f("kv_lora_rank")),
        "k_proj.weight": (_per_head(kv_heads, head), hidden), "v_proj.weight": (_per_head(kv_heads, head), hidden),
        "o_proj.weight": (hidden, _per_head(heads, f("v_head_dim") if mla else head)),
    }.get(leaf)


def disagreements(config: dict, name: str, header: list[int]) -> list[str]:
    """Each dimension of the tensor `name` where config.json's fields give another size than the
    header's, in words: "q_proj dim 0 = num_attention_heads 4 x (qk_nope_head_dim 16 +
    qk_rope_head_dim 16) = 128, the safetensors 96 (4 x 24)"."""
    dims = implied(config, name)
    if dims is None or len(dims) != len(header):
        return []
    said = []
    for axis, (dim, size) in enumerate(zip(dims, header)):
        if dim is None or dim[0] == size:
            continue
        said_as = dim[1] if dim[1].endswith(f" {dim[0]}") else f"{dim[1]} = {dim[0]}"  # a field alone: its value once
        words = f"{name.rsplit('.', 2)[-2]} dim {axis} = {said_as}, the safetensors {size}"
        if dim[2] and size % dim[2] == 0:
            words += f" ({dim[2]} x {size // dim[2]})"
        said.append(words)
    return said


def notes(config: dict) -> str:
    """What in config.json disagrees with itself, where that explains a shape."""
    nope, rope, stored = config.get("qk_nope_head_dim"), config.get("qk_rope_head_dim"), config.get("qk_head_dim")
    if config.get("kv_lora_rank") is not None and all(isinstance(x, int) for x in (nope, rope, stored)) and \
            stored != nope + rope:
        return (f"config.json's qk_head_dim {stored} is not qk_nope_head_dim {nope} + qk_rope_head_dim {rope} = "
                f"{nope + rope}: transformers sized the query projection with other head dimensions than config.json "
                "now gives, as when head_dim is given to a config class that takes it as another name for "
                "qk_rope_head_dim (GLM-4.7-Flash's Glm4MoeLiteConfig): head_dim replaced qk_rope_head_dim after the "
                "weights' width was fixed")
    return ""


def fix(config: dict) -> str:
    """The fix of a shape mismatch: the head widths the weights were made with where `notes` names them."""
    if notes(config):
        return (f"give qk_nope_head_dim and qk_rope_head_dim the values the weights were made with (their sum "
                f"{config.get('qk_head_dim')}, config.json's qk_head_dim), or make the model again from a config that "
                "sets qk_rope_head_dim alone (no head_dim) and re-save it with save_pretrained()")
    return ("give config.json the values the safetensors were made with (the fields named above), or make the model "
            "again from a config whose fields agree and save it with save_pretrained()")


def q_lora_note(config: dict, names) -> str:
    """q_lora_rank against the query projections the safetensors hold (MLA with or without q-LoRA)."""
    if config.get("kv_lora_rank") is None:
        return ""
    lora = any(n.endswith("self_attn.q_a_proj.weight") for n in names)
    plain = any(n.endswith("self_attn.q_proj.weight") for n in names)
    rank = config.get("q_lora_rank")
    if rank is None and lora and not plain:
        return ("config.json's q_lora_rank is null (the query projected directly: q_proj), but the safetensors hold "
                "q-LoRA's q_a_proj and q_b_proj: set q_lora_rank to q_a_proj's rows")
    if rank is not None and plain and not lora:
        return (f"config.json's q_lora_rank {rank} says the query goes through q-LoRA (q_a_proj, q_b_proj), but the "
                "safetensors hold q_proj: set q_lora_rank to null")
    return ""
