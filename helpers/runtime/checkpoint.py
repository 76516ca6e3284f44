"""Checkpoints through Megatron's `dist_checkpointing` (strategy torch_dist).

The *seed checkpoint* is the kit's way to give every layout the same starting weights: a
world-size-1 job builds the model once and saves it; every layout loads it and
`dist_checkpointing` cuts out the shard each rank owns (TP slices, PP stages, EP experts)."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import torch
from megatron.core import dist_checkpointing

from helpers.runtime.build import unwrap

MARKER = "kit_complete"  # written last: a folder without it is an interrupted save


def save_model(chunks: list[torch.nn.Module], path: Path) -> None:
    """Save the model alone (one chunk: used at world size 1 for the seed checkpoint)."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    assert len(chunks) == 1, "seed checkpoints are written at world size 1 without VPP"
    dist_checkpointing.save({"model0": unwrap(chunks[0]).sharded_state_dict()}, str(tmp))
    (tmp / MARKER).write_text("ok\n")
    if path.exists():  # another job finished the same seed checkpoint first: keep theirs
        shutil.rmtree(tmp)
    else:
        tmp.rename(path)


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
# Layout on disk and the completeness rules: helpers/checkpoints.py (shared with the runner).

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


def _layout(spec) -> dict:
    return {"world_size": spec.world_size, "tp": spec.tp, "pp": spec.pp, "vpp": spec.vpp, "cp": spec.cp,
            "ep": spec.ep, "etp": spec.expert_tp, "dp": spec.dp, "sp": spec.sp, "dist_opt": spec.dist_opt,
            "first_stage_layers": spec.first_stage_layers, "last_stage_layers": spec.last_stage_layers}


def _rng_object(rank: int, world: int, state):
    """Every rank's RNG states as one ShardedObject entry per global rank (restored only when the
    layout is unchanged: in another layout a rank's stream has no single predecessor)."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    return ShardedObject("kit.rng_state", state, (world,), (rank,), replica_id=0)


def _rng_state() -> dict:
    import random
    from megatron.core import tensor_parallel
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict) -> None:
    import random
    from megatron.core import tensor_parallel
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _ensure_optimizer_state(opt) -> None:
    """Without apex/TE the distributed optimizer wraps torch's Adam, which has no state (no `step`)
    before its first step, and DistributedOptimizer.state_dict() asserts on it. Megatron's own
    remedy: one step with zero gradients to allocate the state, which the load then overwrites."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    for o in getattr(opt, "chained_optimizers", [opt]):
        if isinstance(o, DistributedOptimizer) and not o.optimizer.state:
            o._init_optimizer_states_with_dummy_values()


@contextlib.contextmanager
def _keep_torch_adam_step():
    """Megatron-Core 0.19.2, distributed optimizer on torch's Adam (no apex/TE), fully_reshardable:
    load_state_dict first restores Adam's `step` (a tensor in the state) from the saved param
    groups, then copies every state tensor from the checkpoint, where `step` is not one -> KeyError.
    During the load, each parameter's source tensors get its own, already restored step."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    original = DistributedOptimizer._set_main_param_and_optimizer_states

    def with_step(self, model_param, tensors):
        group, order = self.model_param_group_index_map[model_param]
        step = self.optimizer.state[self.optimizer.param_groups[group]["params"][order]].get("step")
        if isinstance(step, torch.Tensor) and "step" not in tensors:
            tensors = {**tensors, "step": step.clone()}
        return original(self, model_param, tensors)

    DistributedOptimizer._set_main_param_and_optimizer_states = with_step
    try:
        yield
    finally:
        DistributedOptimizer._set_main_param_and_optimizer_states = original


def _unshare_adam_steps(opt) -> None:
    """Megatron-Core 0.19.2's distributed optimizer, on torch's Adam, restores `step` as ONE tensor
    shared by every parameter's state; torch's Adam increments each parameter's `step` in place, so
    the shared counter advanced once per parameter per iteration and the second update after a
    resume used wrong bias corrections. Give each parameter its own copy."""
    for o in getattr(opt, "chained_optimizers", [opt]):
        for state in o.optimizer.state.values():
            if isinstance(state.get("step"), torch.Tensor):
                state["step"] = state["step"].clone()


def _state_dict(model: list, opt, spec, with_optimizer: bool, is_loading: bool) -> dict:
    """The sharded state dict Megatron saves/loads: {"model0": ..., "model1": ..., "optimizer": ...}."""
    md = _sharding_metadata(spec)
    state = {f"model{i}": unwrap(m).sharded_state_dict(metadata=md) for i, m in enumerate(model)}
    if with_optimizer and opt is not None:
        if is_loading:
            _ensure_optimizer_state(opt)
        state["optimizer"] = opt.sharded_state_dict(state, is_loading=is_loading, metadata=md)
    return state


def save(root: Path, iteration: int, model: list, opt, spec, model_desc, beat, extra: dict) -> Path:
    """Save a training checkpoint (collective: every rank calls). `latest` moves to it only after
    every rank has finished writing, so a crash mid-save leaves the previous checkpoint current."""
    import torch.distributed as dist
    from helpers import checkpoints
    from helpers.runtime import faults, rundir

    rank = dist.get_rank()
    root = Path(root)
    path = root / checkpoints.iter_name(iteration)
    beat(f"checkpoint save: preparing {path.name}", iteration)
    if rank == 0:
        if path.exists() and checkpoints.latest(root) != path:  # left by a save that crashed
            shutil.rmtree(path)
        path.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    path.mkdir(parents=True, exist_ok=True)  # node-local save_dir: each node needs its own folder
    faults.at_checkpoint("save", iteration, rank)
    beat(f"checkpoint save: writing {path.name}", iteration)
    state = _state_dict(model, opt, spec, with_optimizer=True, is_loading=False)
    state["iteration"] = iteration
    state["rng_state"] = _rng_object(rank, dist.get_world_size(), _rng_state())
    # verify_integrity: rank 0 writes integrity.json (SHA-256 of every file) after all ranks wrote.
    dist_checkpointing.save(state, str(path), verify_integrity=True)
    beat(f"checkpoint save: waiting for every rank ({path.name})", iteration)
    dist.barrier()
    if rank == 0:
        rundir.write_json(path / checkpoints.KIT_FILE, {
            "iteration": iteration, "layout": _layout(spec), "model": model_desc.to_dict(),
            "optimizer": "distributed" if spec.dist_opt else "local",
            "optimizer_format": "fully_reshardable" if spec.dist_opt else "model-space",
            "lr_scheduler": None,  # the kit trains with a constant lr; nothing to save
            "data_position": {"next_iteration": iteration, "samples_consumed": iteration * spec.global_batch_size,
                              "source": "synthetic, indexed by iteration"},
            "seed": spec.seed, "global_batch": spec.global_batch_size, "seq_len": spec.seq_len,
            **extra})
        tmp = root / f".{checkpoints.TRACKER}.tmp{os.getpid()}"
        tmp.write_text(path.name + "\n")
        os.replace(tmp, root / checkpoints.TRACKER)  # atomic: readers see the old or the new name
    dist.barrier()
    beat(f"checkpoint saved: {path.name}", iteration)
    return path


def load(path: Path, model: list, opt, spec, model_desc, beat, load_optimizer: bool = True) -> dict:
    """Load a training checkpoint into this layout (collective). Returns its kit record.
    Resharding (TP/PP/VPP/EP/DP changes) is dist_checkpointing's: each rank asks for its slices."""
    import torch.distributed as dist
    from helpers import checkpoints
    from helpers.runtime import faults

    info = checkpoints.verify(path, model_desc.to_dict())
    ckpt = Path(info["path"])
    rank = dist.get_rank()
    faults.at_checkpoint("load", info["iteration"], rank)
    beat(f"checkpoint load: reading {ckpt.name}", info["iteration"])
    with_opt = load_optimizer and opt is not None
    checkpoints.check_optimizer(info, spec.dist_opt, with_opt)
    same_layout = info["layout"] == _layout(spec)
    request = _state_dict(model, opt, spec, with_optimizer=with_opt, is_loading=True)
    if same_layout:
        request["rng_state"] = _rng_object(rank, dist.get_world_size(), None)
    state = dist_checkpointing.load(request, str(ckpt))
    for i, m in enumerate(model):
        unwrap(m).load_state_dict(state[f"model{i}"], strict=True)
    if with_opt:
        with _keep_torch_adam_step():
            opt.load_state_dict(state["optimizer"])
        _unshare_adam_steps(opt)
    if same_layout:
        _set_rng_state(state["rng_state"])
    beat(f"checkpoint loaded: {ckpt.name}", info["iteration"])
    return {**info, "rng_restored": same_layout, "optimizer_loaded": with_opt}


# ---- the calls train.py makes --------------------------------------------------------------------

def save_root(spec, run_dir: Path) -> Path:
    return Path(os.path.expandvars(spec.save_dir)) if spec.save_dir else Path(run_dir) / "checkpoints"


def load_paths(spec) -> list[Path]:
    dirs = spec.load_dir if isinstance(spec.load_dir, list) else [spec.load_dir] if spec.load_dir else []
    return [Path(os.path.expandvars(str(d))) for d in dirs]


def resume(spec, run_dir: Path, model: list, opt, model_desc, beat) -> int:
    """Load spec.load_dir (if set, and not eval_only) and return the iteration to continue from."""
    import torch.distributed as dist
    from helpers.runtime import rundir

    if not spec.load_dir or spec.eval_only:
        return 0
    info = load(load_paths(spec)[0], model, opt, spec, model_desc, beat, spec.load_optimizer)
    if dist.get_rank() == 0:
        rundir.write_json(Path(run_dir) / "resumed.json", info)
    return info["iteration"]


def maybe_save(spec, run_dir: Path, iteration: int, model: list, opt, model_desc, beat, device) -> None:
    """Save every spec.save_interval iterations and after the last one."""
    from helpers.runtime.evaluate import eval_loss

    if not spec.save_interval or (iteration % spec.save_interval and iteration != spec.iters):
        return
    loss = eval_loss(model, spec, device, model_desc.vocab_size)  # the saved model's, for reshard checks
    save(save_root(spec, run_dir), iteration, model, opt, spec, model_desc, beat, {"eval_loss": loss})


def evaluate_only(spec, run_dir: Path, model: list, model_desc, beat, device) -> None:
    """eval_only jobs: load each checkpoint of spec.load_dir into this layout and record its
    evaluation loss next to the loss the saving job measured (eval.json)."""
    import torch.distributed as dist
    from helpers.runtime import rundir
    from helpers.runtime.evaluate import eval_loss

    out = []
    for path in load_paths(spec):
        info = load(path, model, None, spec, model_desc, beat, load_optimizer=False)
        beat("evaluating", info["iteration"])
        out.append({"checkpoint": info["path"], "iteration": info["iteration"], "saved_layout": info["layout"],
                    "saved_eval_loss": info.get("eval_loss"),
                    "eval_loss": eval_loss(model, spec, device, model_desc.vocab_size)})
    if dist.get_rank() == 0:
        rundir.write_json(Path(run_dir) / "eval.json", out)
