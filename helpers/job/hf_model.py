"""A Hugging Face model folder, as the notebook side sees it: its config.json read as plain JSON
(no torch, no transformers), checked, and described as a ModelPreset so the layout rules, the
memory planner and the run records treat an imported model like a preset. Planning reads config.json
alone (`read_config`: a folder whose weights are not downloaded yet, or the file itself); a job's
folder needs its weights too (`read`). The worker imports the weights through Megatron-Bridge
(helpers/runtime/hf/config.py, weights.py).

Architectures: helpers/job/architectures.py says, for every text-only causal LM Megatron-Bridge
registers, whether the kit builds it (checked against transformers) or refuses it, naming the
missing piece; a refused one is turned away here, before start, rather than trained as a subtly
different model. What a family adds beyond config.json's values: its record in helpers/job/families.py."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from helpers.errors import InvalidJob
from helpers.job import architectures, families, hf_names
from helpers.job.models import ModelPreset
from helpers.job.violation import Found, Violation

HYBRID_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}  # Megatron's hybrid_layer_pattern
CONFIG = "config.json"
WEIGHT_SUFFIXES = (".safetensors",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class Folder:
    """An HF folder read once per job (helpers/job/rules/resolve.py): config.json, its SHA-256 and
    the tensors of its safetensors headers (names, dtypes and shapes), or what stops the kit from
    importing it. The checks before start, the model's description and the run directory's record
    all take it from here."""
    path: str
    config: dict | None = None
    config_sha256: str | None = None
    names: frozenset = frozenset()
    problems: tuple[Violation, ...] = ()
    # name -> hf_names.Tensor (dtype, shape): what helpers/job/hf_shapes.py compares with the built model
    tensors: dict = field(default_factory=dict, hash=False)

    def record(self) -> dict:
        """The folder as the run records it (manifest.json, model.json) and its workers import it:
        path, name, config.json's SHA-256, the architectures listed, the one the kit builds, and the
        folder's own spelling of any aliased tensor (hf_names.renames)."""
        arch = architecture(self.config)
        return {"path": self.path, "name": Path(self.path).expanduser().resolve().name,
                "config_sha256": self.config_sha256, "architectures": self.config["architectures"],
                "architecture": arch, "renames": hf_names.renames(arch, set(self.names))}


def read(folder: str | Path) -> Folder:
    """The folder read once: what stops the kit from importing it (rules/hf.py reports them with the
    job's other problems): no folder, no config.json, unreadable JSON, an architecture the kit does
    not build, no safetensors weights, or tensors Bridge will not find (headers only)."""
    v = Found("hf")
    path = Path(folder).expanduser()
    if not path.is_dir():
        v.add("hf_model_not_a_folder", f"hf_model={str(path)!r} is not a folder",
              "give the local folder of a Hugging Face model (config.json + *.safetensors), e.g. one saved with "
              "save_pretrained() or made by helpers.launch.tiny_hf.make(); the kit never downloads")
        return Folder(str(folder), problems=tuple(v))
    file = path / CONFIG
    if not file.is_file():
        v.add("hf_model_no_config", f"hf_model folder {str(path)!r} has no {CONFIG}: it is not a Hugging Face "
              "model folder", "save one with model.save_pretrained(folder)")
        return Folder(str(folder), problems=tuple(v))
    loaded = load_config(file, v, "re-save the model with save_pretrained()")
    if loaded is None:
        return Folder(str(folder), problems=tuple(v))
    raw, config = loaded
    read_as = Folder(str(folder), config, hashlib.sha256(raw).hexdigest())
    v += architecture_problems(file, config)
    if not any(f.suffix in WEIGHT_SUFFIXES for f in path.iterdir()):
        v.add("hf_model_no_weights", f"hf_model folder {str(path)!r} has no *.safetensors weights",
              "save the model with save_pretrained() (safetensors is its default)")
    elif not v:  # a supported architecture: the tensors Bridge will look up are there (headers only)
        try:
            tensors = hf_names.tensors(path)
        except hf_names.Unreadable as e:
            return dataclasses.replace(read_as, problems=tuple(hf_names.unreadable(path, e)))
        read_as = dataclasses.replace(read_as, names=frozenset(tensors), tensors=tensors)
        v += hf_names.problems(path, architecture(config), config, set(tensors))
    return dataclasses.replace(read_as, problems=tuple(v))


def problems(folder: str | Path) -> list[Violation]:
    """What stops the kit from importing the HF folder (`read`'s problems)."""
    return list(read(folder).problems)


def architecture(config: dict) -> str | None:
    """The config's architecture the kit builds (the first listed one it supports)."""
    return next((a for a in config.get("architectures") or () if a in architectures.SUPPORTED), None)


def architecture_problems(path: Path, config: dict) -> list[Violation]:
    """The config's architecture against helpers/job/architectures.py: supported, refused with the
    missing pieces named (hf_missing_<piece>), or not a text-only causal LM Bridge maps."""
    v = Found("hf")
    listed = config.get("architectures") or []
    supported = ", ".join(architectures.SUPPORTED)
    text = architectures.text_architectures()
    arch = next((a for a in listed if a in architectures.SUPPORTED), None) or next((a for a in listed if a in text),
                                                                                   None)
    if arch is None:
        registered = {r.architecture for r in architectures.bridge_registrations()}
        what = ("not a text-only causal LM (Megatron-Bridge maps it to a vision/audio model)"
                if any(a in registered for a in listed) else "not one Megatron-Bridge maps")
        v.add("hf_architecture_not_built", f"{path}: architecture {listed or '(none listed)'} is {what}; the kit "
              f"imports {supported}", "python -m helpers --list-architectures shows every architecture Bridge maps "
              "and why each other one is refused")
        return v
    family = architectures.SUPPORTED.get(arch) or architectures.REFUSED.get(arch)
    for piece in architectures.refusal(arch, config):
        v.add(f"hf_missing_{piece.name}", f"{path}: {family.family if family else arch} ({arch}) is refused: "
              f"missing {piece.message()}", piece.fix)
    return v


def load_config(file: Path, v: Found, fix: str) -> tuple[bytes, dict] | None:
    """config.json's bytes and its JSON object; None, with the problem added to `v`, when the file
    cannot be read or holds something other than a JSON object."""
    try:
        raw = file.read_bytes()
        config = json.loads(raw)
    except (OSError, ValueError) as e:
        v.add("hf_model_config_unreadable", f"{file} cannot be read as JSON ({e})", fix)
        return None
    if not isinstance(config, dict):
        v.add("hf_model_config_unreadable", f"{file} holds a JSON {type(config).__name__}, not the object of a "
              "model's config", fix)
        return None
    return raw, config


def config_file(path: str | Path) -> Path:
    """The config.json `path` names: a folder's, or `path` itself when it is a file."""
    given = Path(path).expanduser()
    return given / CONFIG if given.is_dir() else given


def read_config(path: str | Path) -> dict:
    """config.json for planning: `path` is a Hugging Face model folder or its config.json file. Only
    config.json is read, so a folder without its weights plans as well as a downloaded one (weights
    are what running needs: `read` refuses a job's folder without them). InvalidJob naming the
    problem and the fix: nothing there, a folder without config.json, a file that is not a JSON
    object, an architecture the kit does not build."""
    v = Found("hf")
    given, file = Path(path).expanduser(), config_file(path)
    fetch = (f"put the model's {CONFIG} there, e.g. `hf download REPO {CONFIG} --local-dir FOLDER` ({CONFIG} "
             "alone is enough to plan; running needs the *.safetensors weights too)")
    config = None
    if not given.exists():
        v.add("hf_model_not_found", f"{str(given)!r} does not exist", "give a Hugging Face model folder holding "
              f"{CONFIG}, or the path of a {CONFIG} file")
    elif given.is_dir() and not file.is_file():
        v.add("hf_model_no_config", f"folder {str(given)!r} has no {CONFIG}: it is not a Hugging Face model folder",
              fetch)
    elif (loaded := load_config(file, v, f"give the model's own {CONFIG} (save_pretrained() writes one)")):
        config = loaded[1]
        v += architecture_problems(file, config)
    if v:
        raise InvalidJob("\n".join(str(p) for p in v), list(v))
    return config


def model_name(path: str | Path) -> str:
    """The name a described model goes by: its folder's (for a config.json given as a file, the
    folder holding it; for a config file named otherwise, the file's own stem)."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        return p.name
    return p.parent.name if p.name == CONFIG else p.stem


def source(path: str | Path, c: dict) -> str:
    """Where a described model came from, as ModelPreset.source says it: a folder, or a config file."""
    given = Path(path).expanduser()
    where = f"config {given.name} of {model_name(path)}" if given.is_file() else f"folder {given.name}"
    return f"Hugging Face {where} ({', '.join(c['architectures'])})"


def has_tokenizer(folder: str | Path) -> bool:
    return any((Path(folder) / f).is_file() for f in TOKENIZER_FILES)


def needs_megatron_attention(folder: str | Path | None) -> bool:
    """The folder's model has attention sinks, which only Megatron's own local attention computes
    (helpers/job/rules/resolve.py picks it for attention='auto'); False when unreadable."""
    try:
        model_type = json.loads((Path(folder).expanduser() / CONFIG).read_text()).get("model_type")
        return families.of_model_type(model_type).attention_sinks
    except (OSError, ValueError, TypeError):
        return False


def describe(folder: str | Path, config: dict | None = None) -> ModelPreset:
    """The imported model's architecture in the kit's terms (what the layout rules and the memory
    planner read); `folder`: an HF folder or its config.json file; `config`: its config.json as
    `read` found it (None: read it here, weights not needed). InvalidJob when config.json lacks a
    value the description needs or gives one of the wrong type (a hand-edited file)."""
    c = read_config(folder) if config is None else config
    family = families.of_model_type(c.get("model_type"))  # what config.json's values leave unsaid
    fix = f"give the model's own {CONFIG} as save_pretrained() writes it"
    try:
        return describe_hybrid(folder, c) if family.hybrid else describe_layers(folder, c)
    except KeyError as e:
        v = Violation("hf_config_missing_value", f"{config_file(folder)} has no {e.args[0]!r}, which the kit needs "
                      f"to describe {architecture(c) or c.get('model_type')}", fix, "hf")
    except TypeError as e:
        v = Violation("hf_config_wrong_type", f"{config_file(folder)} gives a value of the wrong type ({e})", fix,
                      "hf")
    raise InvalidJob(str(v), [v])


def describe_layers(folder: str | Path, c: dict) -> ModelPreset:
    """A decoder of uniform attention layers (dense, MoE, MLA): every family but the hybrids."""
    family = families.of_model_type(c.get("model_type"))
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim")
    mla = c.get("kv_lora_rank") is not None  # DeepSeek-V2/V3 (and their relatives): multi-latent attention
    experts = c.get("num_experts") or c.get("num_local_experts") or c.get("n_routed_experts")
    first_k = c.get("first_k_dense_replace") or leading_dense(c.get("mlp_layer_types") or [])
    if first_k >= c["num_hidden_layers"]:
        experts = None  # every layer dense: no expert is ever built
    moe_ffn = c.get("moe_intermediate_size") or (c["intermediate_size"] if experts else None)  # OLMoE: one width
    shared = (c.get("n_shared_experts") or c.get("num_shared_experts") or 0) * (moe_ffn or 0)
    return ModelPreset(
        name=model_name(folder),
        num_layers=c["num_hidden_layers"], hidden_size=c["hidden_size"], num_attention_heads=heads,
        ffn_hidden_size=c["intermediate_size"], vocab_size=c["vocab_size"],
        num_query_groups=c.get("num_key_value_heads") or heads,
        kv_channels=None if mla or not head_dim or head_dim == c["hidden_size"] // heads else head_dim,
        num_experts=experts or None, moe_router_topk=c.get("num_experts_per_tok") or 2,
        moe_ffn_hidden_size=moe_ffn if experts else None,
        moe_shared_expert_intermediate_size=shared or None,
        num_shared_experts=c.get("n_shared_experts") or c.get("num_shared_experts") or 0,
        first_k_dense=first_k if experts else 0,
        normalization="RMSNorm", activation=activation(c),
        qk_layernorm=family.qk_norm is not None or bool(c.get("use_qk_norm")),
        qk_norm_full_width=family.qk_norm == families.FULL_WIDTH,
        add_qkv_bias=bool(c.get("attention_bias")) or family.qkv_bias,
        add_bias_linear=family.all_biases, attention_sinks=family.attention_sinks,
        attention_softcap=bool(c.get("attn_logit_softcapping")), sandwich_norms=family.sandwich_norms,
        max_seq_len=c.get("max_position_embeddings", 4096),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        multi_latent_attention=mla, q_lora_rank=c.get("q_lora_rank") if mla else None,
        kv_lora_rank=c.get("kv_lora_rank") if mla else None,
        qk_head_dim=c.get("qk_nope_head_dim") if mla else None,
        qk_pos_emb_head_dim=c.get("qk_rope_head_dim") if mla else None,
        v_head_dim=c.get("v_head_dim") if mla else None, built_from_hf=True,
        source=source(folder, c),
    )


GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")


def activation(c: dict) -> str:
    """The kit's name of the MLP's activation: every decoder family here gates its MLP."""
    act = c.get("hidden_activation") or c.get("hidden_act")
    return "swiglu" if act == "silu" else "geglu" if act in GELU_TANH else act


def leading_dense(mlp_layer_types: list[str]) -> int:
    """How many layers lead with a dense MLP, from GLM-4.7-Flash's mlp_layer_types ("dense"/"sparse")."""
    count = 0
    for kind in mlp_layer_types:
        if kind != "dense":
            break
        count += 1
    return count


def describe_hybrid(folder, c: dict) -> ModelPreset:
    """Nemotron-H: one layer per entry of layers_block_type (or the older hybrid_override_pattern).
    `c` is the config.json dict; `folder` only names the model (a results file has no folder)."""
    pattern = c.get("hybrid_override_pattern") or "".join(HYBRID_SYMBOLS[k] for k in c["layers_block_type"])
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim")
    experts = c.get("n_routed_experts") if "E" in pattern else None
    return ModelPreset(
        name=model_name(folder),
        num_layers=len(pattern), hidden_size=c["hidden_size"], num_attention_heads=heads,
        ffn_hidden_size=c["intermediate_size"], vocab_size=c["vocab_size"],
        num_query_groups=c.get("num_key_value_heads") or heads,
        kv_channels=None if not head_dim or head_dim == c["hidden_size"] // heads else head_dim,
        num_experts=experts, moe_router_topk=c.get("num_experts_per_tok") or 2,
        moe_ffn_hidden_size=c.get("moe_intermediate_size") if experts else None,
        moe_shared_expert_intermediate_size=(c.get("moe_shared_expert_intermediate_size") if experts else None),
        num_shared_experts=(c.get("n_shared_experts") or 0) if experts else 0,
        normalization="RMSNorm",
        activation="squared_relu" if c.get("mlp_hidden_act", "relu2") == "relu2" else c.get("mlp_hidden_act"),
        max_seq_len=c.get("max_position_embeddings", 4096),
        tied_embeddings=bool(c.get("tie_word_embeddings", False)),
        hybrid_pattern=pattern, mamba_num_heads=c["mamba_num_heads"], mamba_head_dim=c["mamba_head_dim"],
        mamba_state_dim=c["ssm_state_size"], mamba_num_groups=c["n_groups"],
        mamba_chunk_size=c.get("chunk_size", 128), built_from_hf=True,
        source=source(folder, c),
    )
