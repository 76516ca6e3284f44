"""Saving and loading through Megatron's `dist_checkpointing` (strategy torch_dist): the seed
checkpoint (model only, world size 1) and training checkpoints (every model chunk, the optimizer,
every rank's RNG state, the kit's record, and what Megatron-LM and Megatron-Bridge keep beside the
tensors: the common state's `args`, run_config.yaml, train_state.pt, their trackers). Resharding into
another layout is dist_checkpointing's: each rank asks for its own slices. Files on disk and
completeness rules: helpers/job/checkpoint_dir.py.

The *seed checkpoint* is the kit's way to give every layout the same starting weights: a
world-size-1 job builds the model once and saves it; every layout loads it and
`dist_checkpointing` cuts out the shard each rank owns (TP slices, PP stages, EP experts)."""
from __future__ import annotations

import hashlib
import os
import queue
import random
import shutil
from io import BytesIO
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, tensor_parallel

from helpers.job import checkpoint_dir
from helpers.rundir.writer import write_json
from helpers.runtime.build import unwrap
from helpers.runtime.compat import megatron_0_19

MARKER = checkpoint_dir.SEED_MARKER  # written last: a folder without it is an interrupted save

# Callbacks called as callback(event, iteration, rank) midway through a training checkpoint:
# event "save" once the folder exists and before any shard is written, "load" before any file is
# read. What interrupts a checkpoint on purpose registers here (runtime/measure/faults.py).
MIDWAY: list = []


def _midway(event: str, iteration: int, rank: int) -> None:
    for callback in MIDWAY:
        callback(event, iteration, rank)


def _write_results_in_process() -> None:
    """Megatron's torch_dist writer hands each rank's write results back through a queue it makes
    on first use: a multiprocessing Manager queue in the 'spawn' context, i.e. a server process
    that starts a fresh interpreter (~3.7 s before the first save of every saving rank on the
    2-core machine, the same again for the resource tracker). That queue exists for asynchronous
    saves, whose writer runs in another process. The kit saves synchronously
    (`dist_checkpointing.save`): the writer runs in this process and puts its results into the
    queue just before this process takes them out (`execute_sync`, then `retrieve_write_results`),
    so an in-process queue carries the same results with no extra process."""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if filesystem_async._results_queue is None:
        filesystem_async._results_queue = queue.Queue()


def save_model(chunks: list[torch.nn.Module], path: Path) -> None:
    """Save the model alone (one chunk: used at world size 1 for the seed checkpoint)."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    assert len(chunks) == 1, "seed checkpoints are written at world size 1 without VPP"
    _write_results_in_process()
    dist_checkpointing.save({"model0": unwrap(chunks[0]).sharded_state_dict()}, str(tmp))
    (tmp / MARKER).write_text("ok\n")
    try:
        tmp.rename(path)
    except OSError:  # another job finished the same seed checkpoint first (rename onto a full folder fails): keep theirs
        shutil.rmtree(tmp)


def load_model(chunks: list[torch.nn.Module], path: Path) -> None:
    """Load model weights into every chunk this rank holds; resharding does the splitting.
    All chunks load in one call (sharded keys carry global layer and expert numbers, so the
    saved single-chunk model and several virtual-stage chunks name the same tensors), because
    dist_checkpointing checks that each load covers every saved tensor once."""
    path = Path(path)
    if not (path / MARKER).exists():
        raise FileNotFoundError(f"checkpoint {path} is missing or incomplete (no {MARKER} file)")
    modules = [unwrap(c) for c in chunks]
    request = {f"model{i}": m.sharded_state_dict() for i, m in enumerate(modules)}
    state = dist_checkpointing.load(request, str(path))
    for i, m in enumerate(modules):
        m.load_state_dict(state[f"model{i}"], strict=True)


# ---- training checkpoints: save, resume, reshard ----------------------------------------------

def _sharding_metadata(spec) -> dict:
    """What Megatron's sharded_state_dict methods read. The distributed optimizer is saved in its
    `fully_reshardable` format: optimizer state in model-parameter shapes, so it loads into any
    TP/PP/DP layout (its default `dp_reshardable` format would only reshard along DP)."""
    from megatron.core import parallel_state as ps

    md = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True,
          "dp_cp_group": ps.get_data_parallel_group(with_context_parallel=True)}
    if spec.dist_opt:
        md["distrib_optim_sharding_type"] = "fully_reshardable"
    return md


def _rng_object(rank: int, world: int, state):
    """Every rank's RNG states as one ShardedObject entry per global rank (restored only when the
    layout is unchanged: in another layout a rank's stream has no single predecessor)."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    return ShardedObject("kit.rng_state", state, (world,), (rank,), replica_id=0)


def _rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _state_dict(model: list, opt, spec, with_optimizer: bool, is_loading: bool) -> dict:
    """The sharded state dict Megatron saves/loads: {"model0": ..., "model1": ..., "optimizer": ...}."""
    md = _sharding_metadata(spec)
    state = {f"model{i}": unwrap(m).sharded_state_dict(metadata=md) for i, m in enumerate(model)}
    if with_optimizer and opt is not None:
        if is_loading:
            megatron_0_19.ensure_optimizer_state(opt)
        state["optimizer"] = opt.sharded_state_dict(state, is_loading=is_loading, metadata=md)
    return state


def _megatron_common_state(worker, iteration: int) -> dict:
    """What Megatron-LM keeps in a checkpoint's common state besides the tensors (generate_state_dict
    in megatron/training/checkpointing.py): its `args`, the format version and the iteration."""
    from helpers.runtime import build
    from helpers.runtime.checkpoint import megatron_args

    spec, model = worker.spec, worker.model_desc
    options = build.gpt_model_options(worker.config, model, spec.seq_len)
    return {"args": megatron_args.namespace(spec, worker.config, model, options, iteration),
            "checkpoint_version": 3.0, "iteration": iteration,
            "num_floating_point_operations_so_far": megatron_args.floating_point_operations(spec, model, iteration)}


def _bridge_files(worker, root: Path, iteration: int) -> dict[str, bytes]:
    """run_config.yaml and train_state.pt as Megatron-Bridge writes them (bridge_files.py)."""
    import yaml

    from helpers.runtime import build
    from helpers.runtime.checkpoint import bridge_files

    spec, model, config = worker.spec, worker.model_desc, worker.config
    run = bridge_files.run_config(spec, config, model, build.gpt_model_options(config, model, spec.seq_len),
                                  build.optimizer_config(config, spec), build.ddp_config(spec), root)
    state = BytesIO()
    torch.save(bridge_files.train_state(spec, model, iteration), state)
    return {checkpoint_dir.RUN_CONFIG: yaml.safe_dump(run, sort_keys=False).encode(),
            checkpoint_dir.TRAIN_STATE: state.getvalue()}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save(worker, root: Path, iteration: int, extra: dict) -> Path:
    """Save the worker's model chunks and optimizer as a training checkpoint (collective: every rank
    calls), laid out as Megatron-LM and Megatron-Bridge save theirs (helpers/job/checkpoint_dir.py).
    The trackers move to it only after every rank has finished writing, so a crash mid-save leaves
    the previous checkpoint current."""
    model, opt, spec, model_desc, beat = worker.model, worker.opt, worker.spec, worker.model_desc, worker.beat

    rank = dist.get_rank()
    root = Path(root)
    path = root / checkpoint_dir.iter_name(iteration)
    beat(f"checkpoint save: preparing {path.name}", iteration)
    if rank == 0:
        if path.exists() and checkpoint_dir.latest(root) != path:  # left by a save that crashed
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    path.mkdir(parents=True, exist_ok=True)  # node-local save_dir: each node needs its own folder
    _midway("save", iteration, rank)
    beat(f"checkpoint save: writing {path.name}", iteration)
    state = _state_dict(model, opt, spec, with_optimizer=True, is_loading=False)
    state.update(_megatron_common_state(worker, iteration))
    state["rng_state"] = _rng_object(rank, dist.get_world_size(), _rng_state())
    # verify_integrity: rank 0 writes integrity.json (SHA-256 of every file) after all ranks wrote.
    # content_metadata: how the optimizer state is laid out, which Megatron-LM's and Bridge's loaders
    # read back (load_content_metadata) before they ask for it.
    _write_results_in_process()
    dist_checkpointing.save(state, str(path), verify_integrity=True,
                            content_metadata={k: v for k, v in _sharding_metadata(spec).items() if k != "dp_cp_group"})
    beat(f"checkpoint save: waiting for every rank ({path.name})", iteration)
    dist.barrier()
    if int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size())) != dist.get_world_size():
        # multi-node: each node records the files it holds (a node-local folder holds only its
        # ranks' shards; checkpoint_dir.consolidate checks these manifests when it gathers them)
        if int(os.environ.get("LOCAL_RANK", 0)) == 0:
            checkpoint_dir.node_manifest(path, int(os.environ.get("GROUP_RANK", 0)))
        dist.barrier()
    if rank == 0:
        bridge = _bridge_files(worker, root, iteration)  # Megatron-Bridge's: name -> bytes
        write_json(path / checkpoint_dir.KIT_FILE, {
            "iteration": iteration, "layout": spec.layout_record(), "model": model_desc.to_dict(),
            "optimizer": "distributed" if spec.dist_opt else "local",
            "optimizer_format": "fully_reshardable" if spec.dist_opt else "model-space",
            "lr_scheduler": None,  # the kit trains with a constant lr; nothing to save
            "data_position": {"next_iteration": iteration, "samples_consumed": iteration * spec.global_batch_size,
                              "source": "synthetic, indexed by iteration"},
            "seed": spec.seed, "global_batch": spec.global_batch_size, "seq_len": spec.seq_len,
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in bridge.items()},  # checked by verify
            **extra})
        for name, data in bridge.items():  # after the kit's record: a folder with them and without it is not the kit's
            _write_atomic(path / name, data)
        _write_atomic(root / checkpoint_dir.BRIDGE_TRACKER, bridge[checkpoint_dir.TRAIN_STATE])
        checkpoint_dir.write_tracker(root, iteration)  # last, atomic: readers see the old or the new iteration
    dist.barrier()
    beat(f"checkpoint saved: {path.name}", iteration)
    return path


def load(worker, path: Path, load_optimizer: bool = True) -> dict:
    """Load a training checkpoint into the worker's model (and, with `load_optimizer`, its optimizer)
    in this layout (collective). Returns its kit record. Resharding (TP/PP/VPP/EP/DP changes) is
    dist_checkpointing's: each rank asks for its slices."""
    model, opt, spec, model_desc, beat = worker.model, worker.opt, worker.spec, worker.model_desc, worker.beat

    info = checkpoint_dir.verify(path, model_desc.to_dict())
    ckpt = Path(info["path"])
    rank = dist.get_rank()
    _midway("load", info["iteration"], rank)
    beat(f"checkpoint load: reading {ckpt.name}", info["iteration"])
    with_opt = load_optimizer and opt is not None
    checkpoint_dir.check_optimizer(info, spec.dist_opt, with_opt)
    same_layout = info["layout"] == spec.layout_record()
    request = _state_dict(model, opt, spec, with_optimizer=with_opt, is_loading=True)
    if same_layout:
        request["rng_state"] = _rng_object(rank, dist.get_world_size(), None)
    state = dist_checkpointing.load(request, str(ckpt))
    for i, m in enumerate(model):
        unwrap(m).load_state_dict(state[f"model{i}"], strict=True)
    if with_opt:
        with megatron_0_19.keep_torch_adam_step():
            opt.load_state_dict(state["optimizer"])
        megatron_0_19.unshare_adam_steps(opt)
    if same_layout:
        _set_rng_state(state["rng_state"])
    beat(f"checkpoint loaded: {ckpt.name}", info["iteration"])
    return {**info, "rng_restored": same_layout, "optimizer_loaded": with_opt}


