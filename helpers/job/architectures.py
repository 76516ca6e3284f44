"""Every text-only causal-LM architecture Megatron-Bridge registers, and what the kit does with it:
supported (built on the kit's local backend and checked against transformers) or refused before
start with the piece that is missing named. No third outcome.

The list of architectures is read from the installed Megatron-Bridge itself: every
`register_bridge(source=...)` or `register_bridge_implementation(source=...)` in its sources,
parsed with `ast` (no import: Bridge's full import takes ~9 s and needs the TE stand-in).
tests/unit/test_hf_model.py checks that this equals Bridge's live registry
(`AutoBridge.list_supported_models()`), tests/unit/test_architectures.py that every text-only
architecture found has exactly one outcome here. `python -m helpers --list-architectures` prints the
table (`markdown()`); docs/architectures.md is that table with the tests that check each row. Which
family each architecture is, and what is missing for a refused one: its record in
helpers/job/families.py."""
from __future__ import annotations

import ast
import functools
import importlib.metadata
from dataclasses import dataclass

from helpers.job import families

BRIDGE = "megatron-bridge"
SOURCES = "megatron/bridge/"
REGISTER = ("register_bridge", "register_bridge_implementation")
TE_FIX = ("convert it with Megatron-Bridge on Transformer Engine instead (AutoBridge.from_hf_pretrained(folder)"
          ".to_megatron_provider() with its default layer spec, on a GPU machine)")


@dataclass(frozen=True)
class Registration:
    """One `register_bridge` of Megatron-Bridge: HF architecture -> Megatron model class."""
    architecture: str
    target: str
    module: str  # the module whose import registers it

    @property
    def text_causal_lm(self) -> bool:
        """Text-only causal LM: `...ForCausalLM` (vision/audio/omni models are `...ForConditionalGeneration`)."""
        return self.architecture.endswith("ForCausalLM")


@dataclass(frozen=True)
class Supported:
    family: str
    exercises: str  # what the tiny model exercises in the kit's builder
    configs: str = ""  # its rotary kinds and the config.json values refused for it


@dataclass(frozen=True)
class Piece:
    """A refusal reason: what the kit's local backend lacks (or cannot check) for an architecture."""
    name: str  # the violation is named hf_missing_<name>
    what: str  # what is missing, a noun phrase (the table's "missing" column)
    fix: str
    sentence: str = "{} (no local-backend module here)"  # what the refusal says is missing

    def message(self) -> str:
        return self.sentence.format(self.what)


@dataclass(frozen=True)
class Refused:
    family: str
    pieces: tuple[str, ...]  # Piece names


PIECES = {p.name: p for p in (
    Piece("linear_attention", "gated delta-net (linear attention) layers", TE_FIX),
    Piece("sparse_attention", "DeepSeek sparse attention (a lightning indexer picks the keys each query sees)",
          TE_FIX),
    Piece("compressed_attention", "compressed sparse attention, hash-routed experts and hyper-connections "
          "(Megatron-Core's experimental DeepSeek-V4 modules)", TE_FIX),
    Piece("per_layer_attention", "attention that changes shape by layer (its own head size or KV heads "
          "in the sliding-window layers)", TE_FIX),
    Piece("attention_sinks", "attention sinks (a learned softmax offset per head), clamped SwiGLU experts", TE_FIX),
    Piece("post_norm", "post-norm layers (norms after attention and the MLP, none before)", TE_FIX),
    Piece("layernorm_1p", "LayerNorm with a (1 + weight) gain, partial rotary embeddings", TE_FIX),
    Piece("heterogeneous_layers", "layers of different shapes (per-layer heads and MLP widths, skipped blocks)",
          TE_FIX),
    Piece("parallel_hybrid", "attention and Mamba in parallel inside one layer, muP multipliers", TE_FIX),
    Piece("remote_code", "a transformers class: transformers 5.12.1 has none (the checkpoint ships remote code), "
          "so its logits cannot be checked offline",
          "convert it with Megatron-Bridge directly (it runs the checkpoint's own code)",
          "{}"),
    Piece("unchecked", "a parity check: this combination of layers has not been held to transformers' logits "
          "on the kit's builder",
          "give its record in helpers/job/families.py what the kit's builder adds for it, a tiny random model "
          "and no missing pieces, and tests/hf_families.py the layouts the parity job "
          "(tests/jobs/test_hf_import.py) checks it at",
          "{}"),
    Piece("router_losses", "training that matches one process: Megatron-Bridge 0.6.2 gives its router Megatron's "
          "global_aux_loss (coefficient 1e-2), whose gradient depends on the layout. Each rank's auxiliary loss is "
          "its own tokens' share of one loss over the expert loads summed across data-parallel ranks, and DDP then "
          "averages the ranks' gradients, so the auxiliary gradient shrinks as 1/DP (measured on a tiny model: one "
          "process with one microbatch and half the coefficient trains like EP=2 at DP=2, to 1.6e-7); and within an iteration each "
          "microbatch sees the loads of the microbatches so far, so the microbatch split changes it too. Its logits "
          "and language-model gradients equal transformers' at TP=1 and EP=2 (1.8e-6), and without that loss EP=2 "
          "trains like one process (1.6e-7)",
          "convert and train it with Megatron-Bridge, choosing moe_aux_loss_coeff for the data-parallel size and "
          "microbatches you train with", "{}"),
    Piece("first_k_dense_replace", "first_k_dense_replace in config.json: Megatron-Bridge 0.6.2's Hunyuan V3 "
          "bridge reads it, and transformers 5.12.1's HYV3Config does not write it (it lists mlp_layer_types)",
          "add \"first_k_dense_replace\": N to config.json, N = the number of leading \"dense\" entries of "
          "mlp_layer_types", "{}"),
    Piece("layer_pattern", "layer_types other than five sliding-window layers to one full one: Megatron-Bridge "
          "0.6.2 builds Gemma 3 with that pattern whatever config.json says",
          "convert it with a Megatron-Bridge whose Gemma 3 provider reads layer_types, or give the model "
          "Gemma 3's own pattern", "{}"),
    Piece("bidirectional_attention", "causal attention: use_bidirectional_attention=true (an embedding model) "
          "is not a causal LM", "train it with a bidirectional-attention setup, not as a causal LM", "{}"),
    Piece("tied_embeddings", "tie_word_embeddings=true: Megatron-Bridge 0.6.2 builds this family's output layer "
          "apart from the input embedding whatever config.json says, and looks for lm_head.weight",
          "save the model untied (tie_word_embeddings=false, lm_head.weight a copy of the embedding): the same "
          "model, trained with its own output layer", "{}"),
    Piece("untied_embeddings", "tie_word_embeddings=false: Megatron-Bridge 0.6.2 ties this family's output layer to "
          "the input embedding whatever config.json says, and would drop lm_head.weight",
          "convert it with a Megatron-Bridge whose provider reads tie_word_embeddings, or tie them if "
          "lm_head.weight equals the embedding", "{}"),
    Piece("attention_bias", "attention_bias=true: Megatron-Bridge 0.6.2 maps no attention bias for this family (the "
          "kit would build the model without them, or fail to load them)",
          "convert it with a Megatron-Bridge that maps this family's attention biases", "{}"),
    Piece("no_attention_bias", "attention_bias=false: Megatron-Bridge 0.6.2 builds this family's attention with "
          "biases whatever config.json says", "use a checkpoint with attention biases (GPT-OSS's own have them)",
          "{}"),
    Piece("mlp_bias", "mlp_bias=true: Megatron-Bridge 0.6.2 maps no MLP bias for this family",
          "convert it with a Megatron-Bridge that maps this family's MLP biases", "{}"),
    Piece("no_shared_experts", "routed experts without a shared one (0 shared experts): Megatron-Bridge 0.6.2 "
          "sizes this family's shared expert as moe_intermediate_size x 0, which Megatron-Core refuses (or "
          "loads as a shape mismatch)",
          "convert it with a Megatron-Bridge whose provider leaves the shared expert out when there is none",
          "{}"),
    Piece("sparse_layer_pattern", "MoE layers in a pattern Megatron-Bridge 0.6.2 does not read for this family "
          "(mlp_only_layers, decoder_sparse_step other than 1, or a dense layer after a sparse one in "
          "mlp_layer_types): it builds every layer, or every layer after the leading dense ones, as MoE",
          "convert it with a Megatron-Bridge that reads the family's layer pattern", "{}"),
    Piece("dense_layer_count", "first_k_dense_replace that disagrees with mlp_layer_types: Megatron-Bridge 0.6.2 "
          "builds first_k_dense_replace leading dense layers (GLM-4.7-Flash: 1 when absent), transformers the "
          "dense layers mlp_layer_types lists",
          "set \"first_k_dense_replace\" in config.json to the number of leading \"dense\" entries of "
          "mlp_layer_types", "{}"),
    Piece("rope_scaling", "this rotary scaling (rope_type and its values in rope_parameters or rope_scaling): the "
          "kit builds, as transformers computes them, only the kinds and values docs/architectures.md lists for "
          "this family (dynamic NTK scaling for none: it changes the frequencies with the sequence length)",
          "convert it with Megatron-Bridge on Transformer Engine, checking its logits against transformers'", "{}"),
    Piece("multi_token_prediction", "multi-token prediction layers (num_nextn_predict_layers > 0)",
          "set num_nextn_predict_layers to 0 in config.json: the main model then trains alone (transformers "
          "ignores those layers too)"),
)}

def configs(family: families.Family) -> str:
    """A supported family's rotary kinds and refused config.json values, as its row says them."""
    def value(key, allowed) -> str:
        allowed = allowed if isinstance(allowed, tuple) else (allowed,)
        return f"{key} " + " or ".join("absent" if a == families.ABSENT else str(a) for a in allowed)

    def values(required: dict) -> str:
        said = ", ".join(value(key, allowed) for key, allowed in required.items())
        return f" ({said})" if said else ""
    kinds = "" if family.hybrid else "rotary: " + ", ".join(k + values(v) for k, v in family.rope_kinds.items())
    refused = "; ".join(dict.fromkeys(r.says for r in family.config_refusals))
    return "; ".join(x for x in (kinds, f"refused: {refused}" if refused else "") if x)
# Every family's outcome, from its record (helpers/job/families.py)
SUPPORTED = {a: Supported(f.name, f.exercises, configs(f))
             for f in families.FAMILIES if f.supported for a in f.architectures}
REFUSED = {a: Refused(f.name, f.missing) for f in families.FAMILIES if not f.supported for a in f.architectures}

# Refusals that depend on the config of a supported architecture: (architectures or None for
# all, config key (None: the whole config), applies to its value, piece); a family's own are in
# its record, its rotary scaling kinds too.
CONFIG_REFUSALS = ((None, "num_nextn_predict_layers", lambda value: bool(value), "multi_token_prediction"),) + tuple(
    (f.architectures, r.key, r.applies, r.piece) for f in families.FAMILIES for r in f.config_refusals) + tuple(
    (f.architectures, None, families.rope_outside(f.rope_kinds), "rope_scaling") for f in families.FAMILIES
    if f.supported)


def _source_name(node: ast.expr, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):  # a class imported from transformers, or a module-level string constant
        return constants.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


@functools.lru_cache(maxsize=1)
def bridge_registrations() -> tuple[Registration, ...]:
    """Every `register_bridge(source=..., target=...)` in the installed Megatron-Bridge's model
    sources (read, not imported)."""
    dist = importlib.metadata.distribution(BRIDGE)
    found = []
    for file in dist.files or ():
        name = str(file)
        if not (name.startswith(SOURCES) and name.endswith(".py")):
            continue
        text = dist.locate_file(file).read_text()
        if "register_bridge" not in text:
            continue
        tree = ast.parse(text)
        constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}
        module = name[:-3].replace("/", ".")
        for node in ast.walk(tree):
            called = node.func.attr if isinstance(getattr(node, "func", None), ast.Attribute) else \
                getattr(getattr(node, "func", None), "id", None)
            if not (isinstance(node, ast.Call) and called in REGISTER):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            source = _source_name(kw["source"], constants) if "source" in kw else None
            if source and source[0].isupper():  # not the registry's own `source` argument, passed on
                found.append(Registration(source, _source_name(kw.get("target"), {}) or "?", module))
    return tuple(sorted(set(found), key=lambda r: r.architecture))


def text_architectures() -> dict[str, Registration]:
    """Bridge's text-only causal-LM registrations, by architecture."""
    return {r.architecture: r for r in bridge_registrations() if r.text_causal_lm}


def bridge_module(architecture: str) -> str | None:
    """The Bridge module whose import registers `architecture` (helpers/runtime/hf/bridge_import.py)."""
    for r in bridge_registrations():
        if r.architecture == architecture:
            return r.module
    return None


def refusal(architecture: str, config: dict | None = None) -> list[Piece]:
    """Why the kit refuses a Bridge-registered architecture (with this config.json): [] = supported."""
    if architecture in REFUSED:
        return [PIECES[p] for p in REFUSED[architecture].pieces]
    if architecture not in SUPPORTED:
        return [PIECES["unchecked"]]  # registered by a newer Bridge than this table knows
    config = config or {}
    return [PIECES[piece] for archs, key, applies, piece in CONFIG_REFUSALS
            if (archs is None or architecture in archs) and applies(config if key is None else config.get(key))]


@dataclass(frozen=True)
class Row:
    architecture: str
    family: str
    outcome: str  # "supported" | "refused"
    detail: str  # what is exercised / what is missing


def table() -> list[Row]:
    """One row per text-only causal-LM architecture of the installed Bridge: supported first."""
    rows = []
    for arch in text_architectures():
        if arch in SUPPORTED:
            s = SUPPORTED[arch]
            rows.append(Row(arch, s.family, "supported", s.exercises + (f"; {s.configs}" if s.configs else "")))
        else:
            pieces = refusal(arch)
            family = REFUSED[arch].family if arch in REFUSED else "?"
            rows.append(Row(arch, family, "refused", "missing " + "; ".join(p.what for p in pieces)))
    return sorted(rows, key=lambda r: (r.outcome != "supported", r.family.lower()))


COLUMNS = ("architecture", "family", "outcome", "exercised / missing")


def cells(row: Row) -> tuple[str, ...]:
    """One row of the markdown table, a cell per column of COLUMNS."""
    return f"`{row.architecture}`", row.family, row.outcome, row.detail


def markdown() -> str:
    """What `python -m helpers --list-architectures` prints: the table as markdown."""
    version = importlib.metadata.version(BRIDGE)
    rows = table()
    supported = sum(r.outcome == "supported" for r in rows)
    lines = [
        "# Hugging Face architectures",
        "",
        f"Every text-only causal-LM architecture Megatron-Bridge {version} registers, and what the kit does "
        f"with it: {supported} supported, {len(rows) - supported} refused before start with the missing piece "
        "named. From Bridge's registry, `helpers/job/families.py` and `helpers/job/architectures.py`; "
        "`docs/architectures.md` adds the layouts each supported family is checked at and the tests.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"
