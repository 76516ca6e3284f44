"""Checkpoint directories as files on disk: find the latest, check one is complete before any
process loads it, describe what each file holds. Pure Python (no torch.distributed): the runner
calls `verify` before it starts a job, every worker calls it again on its own node.

A training checkpoint (helpers/runtime/checkpoint/ writes it) is laid out as Megatron-LM and
Megatron-Bridge lay out theirs, so their loaders take it as it is:
    <checkpoints>/latest_checkpointed_iteration.txt   "4": Megatron-LM's tracker, written last, atomically, by rank 0
    <checkpoints>/latest_train_state.pt               Megatron-Bridge's tracker: iter_0000004's train_state.pt
    <checkpoints>/iter_0000004/
        metadata.json                  Megatron: backend (torch_dist) and format version
        .metadata                      torch.distributed.checkpoint: where each tensor shard lives
        __<rank>_0.distcp              the bytes each rank wrote (model, optimizer, RNG shards, and the
                                       common state Megatron-LM keeps: `args`, `iteration`, `checkpoint_version`)
        integrity.json                 Megatron: SHA-256 of every file above
        kit_checkpoint.json            the kit: iteration, layout, model, optimizer kind, eval loss, and
                                       the SHA-256 of the two files below
        run_config.yaml                Megatron-Bridge: the run as a ConfigContainer (model provider, layout, ...)
        train_state.pt                 Megatron-Bridge: step and consumed samples
        kit_node<N>.json               multi-node jobs: the files node N wrote, with SHA-256

A checkpoint Megatron-Bridge or Megatron-LM wrote (no kit record) is accepted as well: complete when
its tracker names it or it holds run_config.yaml (both are written after every shard), and checked
against the job's model from run_config.yaml when it has one.

With node-local save folders (each node writes only its own ranks' shards; node 0 also holds the
index, Megatron's integrity file, the kit's record and the trackers), no node holds a loadable
checkpoint. `consolidate` gathers the nodes' folders into complete ones, checking every file
against the manifest of the node that wrote it, and `verify` then accepts them.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from helpers.errors import CheckpointError
from helpers.job import megatron_names, paths
from helpers.job.paths import sha256

TRACKER = "latest_checkpointed_iteration.txt"  # Megatron-LM's: the iteration number (or "release")
BRIDGE_TRACKER = "latest_train_state.pt"  # Megatron-Bridge's: a copy of the latest train_state.pt
RUN_CONFIG = "run_config.yaml"  # Megatron-Bridge's ConfigContainer of the run that saved
TRAIN_STATE = "train_state.pt"  # Megatron-Bridge's TrainState (step, consumed samples) as tensors
KIT_FILE = "kit_checkpoint.json"
INTEGRITY_FILE = "integrity.json"  # Megatron's dist_checkpointing.save(verify_integrity=True)
SEED_MARKER = "kit_complete"  # seed checkpoints (model only) end with this file
NODE_FILE = "kit_node{}.json"  # one per node of a multi-node job: {"node", "files": {name: sha256}}

WHAT = {  # file name (or prefix) -> what it holds, for describe()
    "metadata.json": "Megatron dist_checkpointing: backend and version (readable without torch)",
    ".metadata": "torch.distributed.checkpoint index: every tensor's global shape and which file holds each shard",
    "common.pt": "non-sharded state saved once by rank 0 (older Megatron-Core versions)",
    INTEGRITY_FILE: "SHA-256 of every other file (written by rank 0 after all ranks finished)",
    KIT_FILE: "kit record: iteration, layout, model, optimizer kind, data position, eval loss",
    SEED_MARKER: "seed checkpoint complete marker",
    "kit_node": "multi-node: the files one node wrote, with SHA-256 (consolidate checks them)",
    "__": "tensor shards written by one rank (model weights, optimizer moments, RNG states, common state)",
    RUN_CONFIG: "Megatron-Bridge's run config (ConfigContainer as YAML): the model provider Bridge rebuilds, layout",
    TRAIN_STATE: "Megatron-Bridge's train state: step, consumed samples, floating-point operations",
    "tokenizer": "Megatron-Bridge: the tokenizer's files",
}


def seed_path(spec, model) -> Path:
    """Where the cached world-size-1 seed checkpoint of this model, seed and weight precision lives
    (helpers/launch/runner.seed_checkpoint builds it on first use), one per Megatron-Core version:
    decided before start, so the spec the rules check already names it. fp8 jobs keep bf16 weights:
    bf16's seed, the same start."""
    try:
        megatron = version("megatron-core")
    except PackageNotFoundError:
        megatron = None
    weights = seed_weights(spec)
    key = json.dumps([model.to_dict(), spec.seed, weights, megatron], sort_keys=True)
    return paths.cache_dir() / "seed-checkpoints" / \
        f"{model.name}-seed{spec.seed}-{weights}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def seed_weights(spec) -> str:
    """The precision of the seed checkpoint's weights: the job's, bf16 for an fp8 job."""
    return "bf16" if spec.bf16 else spec.precision


def iter_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def latest(root) -> Path | None:
    """The checkpoint the tracker in `root` names (Megatron-LM's `latest_checkpointed_iteration.txt`:
    an iteration number, or `release`), or None when there is no tracker."""
    tracker = Path(root) / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    if text == "release":
        return Path(root) / "release"
    if not text.isdigit():
        raise CheckpointError(f"{tracker} holds {text[:40]!r}, not an iteration number. Fix: write the number of "
                              f"the latest complete iter_* folder into it (e.g. 4 for iter_0000004), or point "
                              f"load_dir at an iter_* folder.", "corrupt")
    return Path(root) / iter_name(int(text))


def write_tracker(root, iteration: int) -> None:
    """Point Megatron-LM's tracker in `root` at iter_<iteration> (atomic: readers see the old or the new)."""
    tmp = Path(root) / f".{TRACKER}.tmp"
    tmp.write_text(f"{iteration}\n")
    tmp.replace(Path(root) / TRACKER)


def resolve(path) -> Path:
    """A checkpoint root (with Megatron-LM's tracker) or one iter_* directory -> the directory to load."""
    path = Path(path)
    if (path / TRACKER).is_file():
        return latest(path)
    if (path / KIT_FILE).exists() or (path / "metadata.json").exists() or path.name.startswith("iter_"):
        return path
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist. Fix: point load_dir at a folder that "
                              f"holds `{TRACKER}` and iter_* checkpoints (a run's checkpoints/ folder).")
    raise CheckpointError(f"checkpoint {path} has no `{TRACKER}` tracker and is not an iter_* checkpoint "
                          f"(it holds {sorted(p.name for p in path.iterdir())[:8]}). Fix: point load_dir at a "
                          f"run's checkpoints/ folder or at one of its iter_* folders.")


_ARCH_IGNORED = {"name", "source", "max_seq_len"}  # do not change the saved tensors


def model_mismatch(saved: dict, current: dict) -> list[str]:
    """Architecture fields that differ ("num_layers: saved 4, this job 2")."""
    keys = (set(saved) & set(current)) - _ARCH_IGNORED
    return [f"{k}: saved {saved[k]!r}, this job {current[k]!r}" for k in sorted(keys) if saved[k] != current[k]]


def verify(path, model: dict | None = None, hashes: bool = True) -> dict:
    """Check that the checkpoint at `path` (a root or an iter_* directory) is complete and, when
    `model` (ModelPreset.to_dict()) is given, that it holds this model. Returns the kit record.
    Raises CheckpointError for a missing, partial, corrupt or model-mismatched checkpoint."""
    ckpt = resolve(path)
    fix_partial = (f"Fix: resume from an earlier complete checkpoint (point `{TRACKER}` or load_dir at it) "
                   f"or delete {ckpt}.")
    if not ckpt.is_dir():
        if latest(ckpt.parent) == ckpt:
            raise CheckpointError(f"checkpoint {ckpt} is missing (`{TRACKER}` in {ckpt.parent} points at it). "
                                  f"Fix: restore the folder or point load_dir at an existing iter_* checkpoint.")
        raise CheckpointError(f"checkpoint {ckpt} does not exist. Fix: point load_dir at an existing iter_* "
                              f"checkpoint or at a checkpoints/ folder with `{TRACKER}`.")
    if not (ckpt / KIT_FILE).is_file():
        if (ckpt / RUN_CONFIG).is_file() or latest(ckpt.parent) == ckpt or _megatron_root(ckpt.parent):
            return _verify_theirs(ckpt, model, hashes, fix_partial)
        raise CheckpointError(f"checkpoint {ckpt} is partial: no {KIT_FILE}, which the kit writes only after "
                              f"every rank finished saving (the save was interrupted). {fix_partial}", "partial")
    try:
        info = json.loads((ckpt / KIT_FILE).read_text())
        json.loads((ckpt / "metadata.json").read_text())
        # Megatron's integrity file covers what dist_checkpointing wrote; the kit's record, the
        # files rank 0 writes after it (run_config.yaml, train_state.pt)
        integrity = {**info.get("files", {}), **json.loads((ckpt / INTEGRITY_FILE).read_text())["files"]}
    except FileNotFoundError as e:
        raise CheckpointError(f"checkpoint {ckpt} is partial: {Path(e.filename).name} is missing. "
                              f"{fix_partial}", "partial") from None
    except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {ckpt} is corrupt: a metadata file does not parse ({e}). "
                              f"{fix_partial}", "corrupt") from None
    _all_present(ckpt, integrity, fix_partial)
    for manifest in sorted(ckpt.glob(NODE_FILE.format("*"))):  # multi-node jobs: every node's files
        node = json.loads(manifest.read_text())
        absent = [f for f in node["files"] if not (ckpt / f).is_file()]
        if absent:
            raise CheckpointError(
                f"checkpoint {ckpt} is partial: {len(absent)} file(s) written by node {node['node']} are not here "
                f"({', '.join(absent[:4])}): the save folder was node-local. Fix: gather every node's folder "
                f"with helpers.job.checkpoint_dir.consolidate (or save to a file system every node mounts).",
                "node-local")
        integrity = {**node["files"], **integrity}
    writers = {int(p.name[2:].split("_")[0]) for p in ckpt.glob("__*_*.distcp")}
    world = info.get("layout", {}).get("world_size")
    if world and writers and writers != set(range(world)):
        lost = sorted(set(range(world)) - writers)
        raise CheckpointError(f"checkpoint {ckpt} is partial: no shard file from rank(s) {lost[:8]} of "
                              f"{world}. {fix_partial}", "partial")
    if hashes:
        _unchanged(ckpt, integrity, fix_partial)
    if model is not None:
        diff = model_mismatch(info["model"], model)
        if diff:
            raise CheckpointError(
                f"checkpoint {ckpt} holds a different model ({info['model'].get('name')}) than this job "
                f"({model.get('name')}): {'; '.join(diff)}. Fix: use the same model preset and "
                f"model_overrides as the run that saved it, or start without load_dir.", "model")
    return {**info, "path": str(ckpt)}


def _megatron_root(root: Path) -> bool:
    """A folder Megatron-LM saves into: its tracker names a checkpoint, and none of its checkpoints
    holds the kit's record. (In the kit's own folders a checkpoint without the record is one whose
    save was interrupted.)"""
    return latest(root) is not None and not any((d / KIT_FILE).is_file() for d in root.glob("iter_*"))


def _all_present(ckpt: Path, files: dict, fix_partial: str) -> None:
    missing = [f for f in files if not (ckpt / f).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {ckpt} is partial: {len(missing)} of {len(files)} files are "
                              f"missing ({', '.join(missing[:4])}). {fix_partial}", "partial")


def _unchanged(ckpt: Path, files: dict, fix_partial: str) -> None:
    bad = [f for f, digest in files.items() if sha256(ckpt / f) != digest]
    if bad:
        raise CheckpointError(f"checkpoint {ckpt} is corrupt: {', '.join(bad[:4])} changed since it was "
                              f"written (SHA-256 differs from {INTEGRITY_FILE} or {KIT_FILE}). {fix_partial}",
                              "corrupt")


# ModelPreset field -> the model provider's field in run_config.yaml, for the architecture check
PROVIDER_NAMES = {"num_layers": "num_layers", "hidden_size": "hidden_size", "num_attention_heads": "num_attention_heads",
                  "ffn_hidden_size": "ffn_hidden_size", "vocab_size": "vocab_size", "num_experts": "num_moe_experts"}


def provider_mismatch(provider: dict, model: dict) -> list[str]:
    """Architecture fields in which run_config.yaml's model provider and this job's model differ."""
    out = []
    for ours, theirs in PROVIDER_NAMES.items():
        if theirs in provider and ours in model and provider[theirs] != model[ours]:
            out.append(f"{ours}: saved {provider[theirs]!r}, this job {model[ours]!r}")
    saved_groups = provider.get("num_query_groups") or provider.get("num_attention_heads")
    groups = model.get("num_query_groups") or model.get("num_attention_heads")
    if "num_attention_heads" in provider and saved_groups != groups:
        out.append(f"num_query_groups: saved {saved_groups!r}, this job {groups!r}")
    return out


def _verify_theirs(ckpt: Path, model: dict | None, hashes: bool, fix_partial: str) -> dict:
    """A checkpoint written by Megatron-Bridge (it holds run_config.yaml) or Megatron-LM (its tracker
    names it; its run settings are in the common state, which needs torch to read): the torch_dist
    files are there, Megatron's integrity file (when it wrote one) holds, and run_config.yaml's
    model provider has this job's architecture. The returned record has the kit record's keys:
    no layout of the kit's kind (RNG states are never restored from it), the optimizer state kind
    from run_config.yaml (None: weights only; "unknown" without run_config.yaml)."""
    try:
        json.loads((ckpt / "metadata.json").read_text())
        integrity = json.loads((ckpt / INTEGRITY_FILE).read_text())["files"] if (ckpt / INTEGRITY_FILE).is_file() else {}
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {ckpt} has no metadata.json: it is not a Megatron torch_dist "
                              f"checkpoint (or its save was interrupted). {fix_partial}", "partial") from None
    except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {ckpt} is corrupt: a metadata file does not parse ({e}). "
                              f"{fix_partial}", "corrupt") from None
    if not (ckpt / ".metadata").is_file() or not any(ckpt.glob("__*_*.distcp")):
        raise CheckpointError(f"checkpoint {ckpt} is partial: its tensor index (.metadata) or shard files "
                              f"(__*_*.distcp) are missing. {fix_partial}", "partial")
    _all_present(ckpt, integrity, fix_partial)
    if hashes:
        _unchanged(ckpt, integrity, fix_partial)
    iteration = 0 if ckpt.name == "release" else int(ckpt.name.removeprefix("iter_"))
    info = {"iteration": iteration, "written_by": "Megatron-LM", "layout": None, "model": None,
            "optimizer": "unknown", "path": str(ckpt)}
    if not (ckpt / RUN_CONFIG).is_file():
        return info
    import yaml

    try:
        run = yaml.safe_load((ckpt / RUN_CONFIG).read_text()) or {}
        provider, saving = run.get("model") or {}, run.get("checkpoint") or {}
        distributed = (run.get("optimizer") or {}).get("use_distributed_optimizer", False)
    except (yaml.YAMLError, AttributeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {ckpt} is corrupt: {RUN_CONFIG} does not parse as a run config ({e}). "
                              f"{fix_partial}", "corrupt") from None
    info.update(written_by="Megatron-Bridge", optimizer=("distributed" if distributed else "local")
                if saving.get("save_optim", True) else None,
                saved_layout={k: provider.get(k) for k in map(megatron_names.core_name, ("tp", "pp", "cp", "ep"))})
    if model is not None:
        diff = provider_mismatch(provider, model)
        if diff:
            raise CheckpointError(
                f"checkpoint {ckpt} holds a different model ({provider.get('_target_', 'a model provider')}, "
                f"{RUN_CONFIG}) than this job ({model.get('name')}): {'; '.join(diff)}. Fix: give the job the "
                f"model that checkpoint was made from (its hf_model folder), or start without load_dir.", "model")
    return info


def node_manifest(ckpt, node: int) -> Path:
    """Multi-node save, on each node (its local rank 0, after every rank wrote): the files this
    node sees in the checkpoint folder, with SHA-256 (the kit's record and integrity file, written
    later by rank 0, are left out)."""
    ckpt = Path(ckpt)
    files = {p.name: sha256(p) for p in sorted(ckpt.iterdir())
             if p.is_file() and not p.name.startswith("kit_") and p.name != INTEGRITY_FILE}
    out = ckpt / NODE_FILE.format(node)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"node": node, "files": files}, indent=2))
    tmp.replace(out)
    return out


def consolidate(node_roots: list, into=None) -> list[Path]:
    """Make node-local checkpoint folders loadable: gather the latest checkpoint's files from every
    node's folder (`node_roots`, node 0 first: it holds the trackers, the index and the kit's record)
    into complete copies: `into` (one folder, e.g. on shared storage) or, when None, every node's
    own folder (what rsync to each node would do). Each file is checked against the SHA-256 its
    node recorded before it is copied; each result is verified. Returns the complete iter_* folders."""
    roots = [Path(r) for r in node_roots]
    ckpt = latest(roots[0])
    if ckpt is None:
        raise CheckpointError(f"{roots[0]} has no `{TRACKER}`: node 0's folder (the first of node_roots) holds it. "
                              f"Fix: list node 0's checkpoint folder first.")
    sources = {}  # file name -> (path of a checked copy, its SHA-256 or None)
    for i, root in enumerate(roots):
        folder = root / ckpt.name
        manifest = folder / NODE_FILE.format(i)
        if not manifest.is_file():
            raise CheckpointError(f"{folder} has no {manifest.name}: it is not node {i}'s part of a multi-node "
                                  f"checkpoint. Fix: pass the nodes' folders in node order.", "missing")
        for name, digest in json.loads(manifest.read_text())["files"].items():
            if sha256(folder / name) != digest:
                raise CheckpointError(f"{folder / name} differs from what node {i} wrote (SHA-256). Fix: copy "
                                      f"it again from node {i}, or resume from an earlier checkpoint.", "corrupt")
            sources.setdefault(name, (folder / name, digest))
        sources.setdefault(manifest.name, (manifest, None))
    for name in (KIT_FILE, INTEGRITY_FILE, RUN_CONFIG, TRAIN_STATE):  # written by rank 0, on node 0, after the manifests
        sources.setdefault(name, (ckpt / name, None))
    targets = [Path(into)] if into is not None else roots
    done = []
    for root in targets:
        folder = root / ckpt.name
        folder.mkdir(parents=True, exist_ok=True)
        for name, (src, digest) in sources.items():
            dst = folder / name
            if src.resolve() == dst.resolve() or (digest and dst.is_file() and sha256(dst) == digest):
                continue  # already there (checked above, or the same bytes)
            shutil.copy2(src, dst)
        if (roots[0] / BRIDGE_TRACKER).is_file() and root != roots[0]:
            shutil.copy2(roots[0] / BRIDGE_TRACKER, root / BRIDGE_TRACKER)
        write_tracker(root, int(ckpt.name.removeprefix("iter_")))
        verify(folder)
        done.append(folder)
    return done


def inventory(path) -> dict[str, dict]:
    """{relative file: {bytes, sha256}} for every file under `path` (a file or a folder)."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    base = path.parent if path.is_file() else path
    return {str(p.relative_to(base)): {"bytes": p.stat().st_size, "sha256": sha256(p)} for p in files}


def describe(path) -> list[dict]:
    """One row per file of a checkpoint directory: name, bytes, what it holds."""
    ckpt = resolve(path)
    rows = []
    for p in sorted(ckpt.iterdir()):
        what = WHAT.get(p.name) or next((v for k, v in WHAT.items() if p.name.startswith(k)), "")
        rows.append({"file": p.name, "bytes": p.stat().st_size, "holds": what})
    return rows


def _index(path):
    """The checkpoint's index (`.metadata`, torch.distributed.checkpoint): every global tensor and
    where its pieces are stored."""
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(str(resolve(path))).read_metadata()


def tensor_bytes(path) -> dict[str, int]:
    """Bytes of tensor data a checkpoint's index lists, by top-level key (`embedding`, `decoder`,
    `optimizer`, ...): the global tensors, each counted once however many ranks hold a replica. The
    shard files are larger by their serialisation headers and the non-tensor objects (RNG states,
    extra state)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    out: dict[str, int] = {}
    for key, meta in _index(path).state_dict_metadata.items():
        if isinstance(meta, TensorStorageMetadata):
            size = meta.size.numel() * meta.properties.dtype.itemsize
            out[key.split(".")[0]] = out.get(key.split(".")[0], 0) + size
    return out


def pieces(path, key: str) -> list[tuple[tuple[int, ...], str]]:
    """(global offset, shard file) of every stored piece of one global tensor, from the checkpoint's
    index: where each rank's shard of it landed."""
    return sorted((tuple(i.offset), s.relative_path) for i, s in _index(path).storage_data.items() if i.fqn == key)


def list_checkpoints(root) -> list[dict]:
    """Every iter_* folder under a checkpoint root: iteration, complete or why not, and which is latest."""
    root = Path(root)
    current = latest(root)
    out = []
    for d in sorted(root.glob("iter_*")):
        try:
            verify(d, hashes=False)
            state = "complete"
        except CheckpointError as e:
            state = e.kind
        out.append({"checkpoint": d.name, "iteration": int(d.name[5:]), "state": state,
                    "latest": current is not None and d.name == current.name})
    return out


def check_optimizer(info: dict, dist_opt: bool, loading_optimizer: bool) -> None:
    """The distributed optimizer's and the local optimizer's saved states are different trees:
    loading one into the other is refused with the two ways out. A checkpoint of weights only (what
    Megatron-Bridge's import_ckpt writes) loads with load_optimizer=False."""
    saved, this = info["optimizer"], "distributed" if dist_opt else "local"
    if not loading_optimizer or saved == "unknown":
        return
    if saved is None:
        raise CheckpointError(
            f"checkpoint {info['path']} holds no optimizer state (written by {info.get('written_by', 'the kit')} "
            f"with the weights only). Fix: load_optimizer=False to load the model only (the optimizer then "
            f"starts fresh).", "no-optimizer")
    if saved != this:
        raise CheckpointError(
            f"checkpoint {info['path']} holds {saved}-optimizer state but this job uses the {this} "
            f"optimizer. Fix: set dist_opt={saved == 'distributed'} to match, or load_optimizer=False "
            f"to load the model only (the optimizer then starts fresh).", "layout")
