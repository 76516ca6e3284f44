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
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, tensor_parallel
from megatron.core.utils import unwrap_model

from helpers.job import checkpoint_dir
from helpers.rundir.writer import write_json
from helpers.runtime.compat import megatron_0_19

if TYPE_CHECKING:
    from helpers.runtime.worker import Rank, Trainee

MARKER = checkpoint_dir.SEED_MARKER  # written last: a folder without it is an interrupted save
KIT_RNG = "kit.rng_state"  # every rank's generators (Megatron-LM's own `rng_state` holds DP rank 0's per (PP, TP))

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
    dist_checkpointing.save({"model0": unwrap_model(chunks[0]).sharded_state_dict()}, str(tmp))
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
    modules = unwrap_model(chunks)
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
    return ShardedObject(KIT_RNG, state, (world,), (rank,), replica_id=0)


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


def _state_dict(model: list, opt, spec, with_optimizer: bool, is_loading: bool, saved_metadata: dict | None = None) -> dict:
    """The sharded state dict Megatron saves/loads: {"model0": ..., "model1": ..., "optimizer": ...}.
    Loading, `saved_metadata` is the checkpoint's own content metadata (how its optimizer state is
    laid out: the kit's, Megatron-LM's or Bridge's choice), which the request must follow."""
    md = _sharding_metadata(spec)
    if saved_metadata:
        md = {**saved_metadata, "dp_cp_group": md["dp_cp_group"]}
    state = {f"model{i}": m.sharded_state_dict(metadata=md) for i, m in enumerate(unwrap_model(model))}
    if with_optimizer and opt is not None:
        if is_loading:
            megatron_0_19.ensure_optimizer_state(opt)
        state["optimizer"] = opt.sharded_state_dict(state, is_loading=is_loading, metadata=md)
    return state


def _megatron_common_state(rank: Rank, model_desc, iteration: int, scheduler_state: dict | None) -> tuple[dict, dict]:
    """What Megatron-LM keeps in a checkpoint's common state besides the tensors (megatron_args.py),
    and the kit record's note on its `args`."""
    from helpers.rundir import names
    from helpers.runtime.checkpoint import megatron_args

    spec = rank.spec
    args = megatron_args.parsed(Path(rank.run_dir) / names.MEGATRON_LM_SCRIPT, spec.world_size)
    state = megatron_args.common_state(args, spec, model_desc, iteration, scheduler_state,
                                       on_gpu=rank.device.type == "cuda")
    return state, megatron_args.saved_args_summary(args)


def _bridge_files(rank: Rank, trainee: Trainee, root: Path, iteration: int) -> dict[str, bytes]:
    """run_config.yaml and train_state.pt as Megatron-Bridge writes them (bridge_files.py), with
    the tokenizer megatron-lm.sh names (the run's megatron.json read by megatron_lm.py's rule)."""
    import json

    import yaml

    from helpers.rundir import megatron_lm, names
    from helpers.runtime import build
    from helpers.runtime.checkpoint import bridge_files

    spec, model, config = rank.spec, trainee.model_desc, trainee.config
    calls = json.loads((Path(rank.run_dir) / names.MEGATRON).read_text())
    tokenizer = megatron_lm.tokenizer_arguments(calls, spec)[0]
    run = bridge_files.run_config(spec, config, model, build.gpt_model_options(config, model, spec.seq_len),
                                  build.optimizer_config(config, spec), build.ddp_config(spec), root, tokenizer)
    state = BytesIO()
    torch.save(bridge_files.train_state(spec, model, iteration), state)
    return {checkpoint_dir.RUN_CONFIG: yaml.safe_dump(run, sort_keys=False).encode(),
            checkpoint_dir.TRAIN_STATE: state.getvalue()}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save(rank: Rank, trainee: Trainee, root: Path, iteration: int, extra: dict,
         scheduler_state: dict | None = None) -> Path:
    """Save the trainee's model chunks and optimizer as a training checkpoint (collective: every rank
    calls), laid out as Megatron-LM and Megatron-Bridge save theirs (helpers/job/checkpoint_dir.py),
    with what Megatron-LM's resume reads (megatron_args.py; `scheduler_state`: the learning-rate
    scheduler's state_dict()).
    The trackers move to it only after every rank has finished writing, so a crash mid-save leaves
    the previous checkpoint current."""
    model, opt, spec, model_desc, beat = trainee.model, trainee.optimizer, rank.spec, trainee.model_desc, rank.beat

    global_rank = dist.get_rank()
    root = Path(root)
    path = root / checkpoint_dir.iter_name(iteration)
    beat(f"checkpoint save: preparing {path.name}", iteration)
    if global_rank == 0:
        if path.exists() and checkpoint_dir.latest(root) != path:  # left by a save that crashed
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    path.mkdir(parents=True, exist_ok=True)  # node-local save_dir: each node needs its own folder
    _midway("save", iteration, global_rank)
    beat(f"checkpoint save: writing {path.name}", iteration)
    common, args_note = _megatron_common_state(rank, model_desc, iteration, scheduler_state)
    state = _state_dict(model, opt, spec, with_optimizer=True, is_loading=False)
    state.update(common)
    state[KIT_RNG] = _rng_object(global_rank, dist.get_world_size(), _rng_state())
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
    if global_rank == 0:
        bridge = _bridge_files(rank, trainee, root, iteration)  # Megatron-Bridge's: name -> bytes
        write_json(path / checkpoint_dir.KIT_FILE, {
            "iteration": iteration, "layout": spec.layout_record(), "model": model_desc.to_dict(),
            "optimizer": "distributed" if spec.dist_opt else "local",
            "optimizer_format": "fully_reshardable" if spec.dist_opt else "model-space",
            "lr_scheduler": scheduler_state,  # also Megatron-LM's opt_param_scheduler in the common state
            "data_position": {"next_iteration": iteration, "samples_consumed": iteration * spec.global_batch_size,
                              "source": "synthetic, indexed by iteration"},
            "seed": spec.seed, "global_batch": spec.global_batch_size, "seq_len": spec.seq_len,
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in bridge.items()},  # checked by verify
            **args_note, **extra})
        for name, data in bridge.items():  # after the kit's record: a folder with them and without it is not the kit's
            _write_atomic(path / name, data)
        _write_atomic(root / checkpoint_dir.BRIDGE_TRACKER, bridge[checkpoint_dir.TRAIN_STATE])
        checkpoint_dir.write_tracker(root, iteration)  # last, atomic: readers see the old or the new iteration
    dist.barrier()
    beat(f"checkpoint saved: {path.name}", iteration)
    return path


def _what_megatron_saved(info: dict, common: dict, spec, model_desc) -> dict:
    """A checkpoint Megatron-LM (or Bridge) wrote: its iteration, optimizer kind and scheduler from
    its common state, its model's shape checked against this job's (as Megatron-LM's own
    check_checkpoint_args does), and its position in the data checked against this job's global
    batch (the kit addresses samples by iteration x global batch)."""
    from helpers.errors import CheckpointError

    args = common.get("args")
    info = {**info, "iteration": int(common.get("iteration", info["iteration"]))}
    if args is None:
        return info
    mine = {"num_layers": model_desc.num_layers, "hidden_size": model_desc.hidden_size,
            "num_attention_heads": model_desc.num_attention_heads}
    diff = [f"{k}: saved {getattr(args, k, None)!r}, this job {v!r}" for k, v in mine.items()
            if getattr(args, k, v) != v]
    if diff:
        raise CheckpointError(f"checkpoint {info['path']} holds a different model than this job: {'; '.join(diff)}. "
                              f"Fix: give the job the model that checkpoint was made from, or start without "
                              f"load_dir.", "model")
    consumed = getattr(args, "consumed_train_samples", None)
    if consumed is not None and consumed != info["iteration"] * spec.global_batch_size:
        raise CheckpointError(
            f"checkpoint {info['path']} consumed {consumed} training samples by iteration {info['iteration']} "
            f"(global batch {getattr(args, 'global_batch_size', '?')}); this job's global batch is "
            f"{spec.global_batch_size}, so it would resume at sample {info['iteration'] * spec.global_batch_size}. "
            f"Fix: resume with the global batch the checkpoint was trained with.", "layout")
    if info.get("optimizer") == "unknown":
        info["optimizer"] = None if getattr(args, "no_save_optim", False) else (
            "distributed" if getattr(args, "use_distributed_optimizer", False) else "local")
    return info


def load(path: Path, model: list, spec, model_desc, beat, optimizer=None) -> dict:
    """Load a training checkpoint into `model`'s chunks (and, given an `optimizer`, its state too) in
    this layout (collective); `model_desc` is the job's model the checkpoint must hold, `beat` the
    heartbeat told of progress. Returns its record (the kit's, or one made from the
    common state of a checkpoint Megatron-LM or Bridge wrote), with the scheduler state it saved.
    Resharding (TP/PP/VPP/EP/DP changes) is dist_checkpointing's: each rank asks for its slices."""
    info = checkpoint_dir.verify(path, model_desc.to_dict())
    ckpt = Path(info["path"])
    common = dist_checkpointing.load_common_state_dict(str(ckpt))
    if info.get("written_by"):  # not the kit's
        info = _what_megatron_saved(info, common, spec, model_desc)
    rank = dist.get_rank()
    _midway("load", info["iteration"], rank)
    beat(f"checkpoint load: reading {ckpt.name}", info["iteration"])
    with_opt = optimizer is not None
    checkpoint_dir.check_optimizer(info, spec.dist_opt, with_opt)
    same_layout = info["layout"] == spec.layout_record()
    request = _state_dict(model, optimizer, spec, with_optimizer=with_opt, is_loading=True,
                          saved_metadata=dist_checkpointing.load_content_metadata(preloaded_state_dict=common))
    if same_layout:
        request[KIT_RNG] = _rng_object(rank, dist.get_world_size(), None)
    state = dist_checkpointing.load(request, str(ckpt))
    for i, m in enumerate(unwrap_model(model)):
        m.load_state_dict(state[f"model{i}"], strict=True)
    if with_opt:
        # no_grad: the distributed optimizer's dp_reshardable format (Megatron-LM's default) copies into
        # its main parameters in place; in fp32 those are the model's own leaf parameters
        with megatron_0_19.keep_torch_adam_step(), torch.no_grad():
            optimizer.load_state_dict(state["optimizer"])
        megatron_0_19.unshare_adam_steps(optimizer)
    if same_layout:
        _set_rng_state(state[KIT_RNG])
    beat(f"checkpoint loaded: {ckpt.name}", info["iteration"])
    return {**info, "rng_restored": same_layout, "optimizer_loaded": with_opt,
            "opt_param_scheduler": common.get("opt_param_scheduler")}
