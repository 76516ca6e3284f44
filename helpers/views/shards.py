"""Checkpoint shards, the idea: one global weight tensor of a tiny GPT, cut by a layout into TP
shards (column parallel: rows split; row parallel: columns split) and PP stages (which layers),
and the shard file each piece is written to. Notebook side only.

Megatron's dist_checkpointing stores every tensor once by its global name and shape: the decoder
layers' matrices are one tensor [layers, rows, cols] (the layer axis is global, so a stage writes
its layers at their global offsets), each rank writes its pieces with their offsets into its own
file `__<rank>_0.distcp`, and only the first data-parallel (and context-parallel) replica writes
(the others hold copies). A job at another layout reads, for each of its pieces, the overlapping
pieces from whichever files hold them: that is why a checkpoint reloads at another layout.
Which layers a stage holds is the memory planner's split (memory/static.py `stage_layers`), which
the test holds equal to Megatron's (`get_transformer_layer_offset`, `get_num_layers_to_build`); the
offsets match a TP=2 checkpoint's `.metadata` (see the test)."""
from __future__ import annotations

from helpers.job.layout import Layout
from helpers.job.models import ModelPreset
from helpers.memory import static

# matrix -> (module, the matrix dimension TP splits: 0 = rows, column parallel; 1 = cols, row parallel)
MATRICES = {"linear_qkv": ("self_attention", 0), "linear_proj": ("self_attention", 1),
            "linear_fc1": ("mlp", 0), "linear_fc2": ("mlp", 1)}


def checkpoint_key(matrix: str) -> str:
    return f"decoder.layers.{MATRICES[matrix][0]}.{matrix}.weight"


def matrix_shape(model: ModelPreset, matrix: str) -> tuple[int, int]:
    """One layer's [rows, cols] (Megatron's [out, in])."""
    if matrix not in MATRICES:
        raise ValueError(f"unknown matrix {matrix!r}; choose one of {', '.join(MATRICES)}")
    if matrix.startswith("linear_fc") and (model.is_moe or model.activation == "swiglu"):
        raise ValueError(f"{model.name}: its {matrix} is stored as experts or as gate/up halves, not as one "
                         "matrix; pick linear_qkv or linear_proj, or a dense gelu model such as tiny-gpt")
    head_dim = model.kv_channels or model.hidden_size // model.num_attention_heads
    groups = model.num_query_groups or model.num_attention_heads
    heads = model.num_attention_heads * head_dim
    return {"linear_qkv": (heads + 2 * groups * head_dim, model.hidden_size),
            "linear_proj": (model.hidden_size, heads),
            "linear_fc1": (model.ffn_hidden_size, model.hidden_size),
            "linear_fc2": (model.hidden_size, model.ffn_hidden_size)}[matrix]


def stage_layers(layout: Layout, model: ModelPreset) -> dict[int, list[int]]:
    """{pipeline stage: global layer indices it holds} (all its virtual chunks, in chunk order)."""
    per_chunk = static.stage_layers(model, layout)  # [stage][virtual chunk] -> layers
    return {stage: [i for chunk in chunks for i in chunk] for stage, chunks in enumerate(per_chunk)}


def shards(layout: Layout, model: ModelPreset, matrix: str) -> list[dict]:
    """The pieces of the global tensor [layers, rows, cols] that land in shard files:
    {rank, file, stage, tp_rank, offset (layer, row, col), size (1, rows, cols)}, one per layer."""
    rows, cols = matrix_shape(model, matrix)
    split = MATRICES[matrix][1]
    full = [rows, cols]
    if full[split] % layout.tp:
        raise ValueError(f"{checkpoint_key(matrix)}: {full[split]} is not divisible by TP={layout.tp}")
    part = list(full)
    part[split] //= layout.tp
    layers = stage_layers(layout, model)
    out = []
    for rank in range(layout.world_size):
        g = layout.groups_of(rank)
        if g["dp"].index(rank) or g["cp"].index(rank):
            continue  # a replica: the first DP/CP replica writes this piece
        tp_rank, stage = g["tp"].index(rank), g["pp"].index(rank)
        for layer in layers[stage]:
            offset = [layer, 0, 0]
            offset[1 + split] = tp_rank * part[split]
            out.append({"rank": rank, "file": f"__{rank}_0.distcp", "stage": stage, "tp_rank": tp_rank,
                        "offset": tuple(offset), "size": (1, part[0], part[1])})
    return out


def _overlaps(a: dict, b: dict) -> bool:
    return all(oa < ob + sb and ob < oa + sa for oa, sa, ob, sb in zip(a["offset"], a["size"], b["offset"], b["size"]))


def files_read(saved: Layout, loading: Layout, model: ModelPreset, matrix: str) -> dict[int, list[str]]:
    """{rank of the loading layout: files of the saved checkpoint it reads for this tensor}."""
    written = shards(saved, model, matrix)
    out: dict[int, set[str]] = {}
    for piece in shards(loading, model, matrix):
        out.setdefault(piece["rank"], set()).update(w["file"] for w in written if _overlaps(piece, w))
    return {r: sorted(files) for r, files in sorted(out.items())}


def plot(model: ModelPreset, matrix: str, layout_a: Layout, layout_b: Layout, title: str | None = None):
    """The global tensor twice, one layer per column (each layer drawn in the same box, not to
    scale), cut into the shards layout A writes (left) and layout B would write (right); each
    piece names its rank; under each panel, which file each rank writes, and (B) which of A's
    files it reads when loading A's checkpoint."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    rows, cols = matrix_shape(model, matrix)
    layers = model.num_layers
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.9))
    reads = files_read(layout_a, layout_b, model, matrix)
    for ax, layout, name in ((axes[0], layout_a, "A"), (axes[1], layout_b, "B")):
        pieces = shards(layout, model, matrix)
        ranks = sorted({p["rank"] for p in pieces})
        colours = {r: colormaps["tab10"](i % 10) for i, r in enumerate(ranks)}
        for p in pieces:
            layer, r0, c0 = p["offset"]
            _, nr, nc = p["size"]
            x, y, w, h = layer * 1.25 + c0 / cols, r0 / rows * 1.6, nc / cols, nr / rows * 1.6
            ax.add_patch(Rectangle((x, y), w, h, facecolor=colours[p["rank"]], edgecolor="white", linewidth=1.5))
            narrow = w < 0.45  # a thin column: write along it
            ax.text(x + w / 2, y + h / 2, f"r{p['rank']}" + (" " if narrow else "\n") + f"({layer},{r0},{c0})",
                    ha="center", va="center", fontsize=7, color="white", rotation=90 if narrow else 0)
        for layer in range(layers):
            ax.add_patch(Rectangle((layer * 1.25, 0), 1, 1.6, fill=False, edgecolor="black", linewidth=0.8))
            ax.text(layer * 1.25 + 0.5, -0.06, f"layer {layer}", ha="center", va="bottom", fontsize=8)
        ax.set_xlim(-0.15, layers * 1.25)
        ax.set_ylim(1.75 + 0.13 * len({p["rank"] for p in pieces}), -0.3)
        ax.axis("off")
        lines = []
        for r in ranks:
            mine = [p for p in pieces if p["rank"] == r]
            line = f"r{r} (stage {mine[0]['stage']}, TP {mine[0]['tp_rank']}) writes {mine[0]['file']}"
            if name == "B":
                line += f"; loading A reads {', '.join(reads[r])}"
            lines.append(line)
        ax.text(0, 1.75, "\n".join(lines), ha="left", va="top", fontsize=7.5, family="monospace")
        short = f"TP={layout.tp}, PP={layout.pp}" + (f", VPP={layout.vpp}" if layout.vpp else "") + f", DP={layout.dp}"
        ax.set_title(f"layout {name}: {short}, {layout.world_size} ranks", fontsize=9, loc="left")
    kind = "column parallel: TP splits rows" if MATRICES[matrix][1] == 0 else "row parallel: TP splits columns"
    fig.suptitle(title or f"{model.name}: {checkpoint_key(matrix)}, global [{layers}, {rows}, {cols}] ({kind}); "
                 "labels: rank (global offset)", fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return fig
