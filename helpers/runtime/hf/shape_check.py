"""The checking process behind helpers/job/hf_shapes.py: every parameter of the model the worker
builds for an HF folder, against the shape Megatron-Bridge's own conversion makes of the folder's
tensors, without reading any tensor data.

As a job's rank does (helpers/runtime/train.py `model_provider`): Bridge opened on the folder
(config.open_bridge), its provider with the kit's fields (config.provider_config, here at TP=1 on
the local backend), the kit's model chunks (build.model_chunks), here on the meta device, and
Bridge's conversion plan for them (`build_conversion_tasks`, the plan `load_hf_weights` follows).
Then each planned parameter's HF tensors, as meta tensors of the header's dtype and shape, go
through the bridge's `maybe_modify_loaded_hf_weight` and the mapping's `hf_to_megatron`, the two
calls `load_hf_weights` makes: a 1:1 mapping passes the tensor on, a QKV or gate/up mapping
concatenates its tensors, an expert mapping picks its expert's slice. What comes out must have the
parameter's shape, which `load_hf_weights` checks on rank 0 after start. A conversion that raises
on the header's shapes (a reshape that does not fit) is a mismatch too; one that cannot run on
meta tensors is skipped and counted. Parameters with no planned tensor are listed, as
weights.load refuses them.

The process imports Megatron-Core, Bridge and transformers once, then answers requests, one JSON
line each on stdin (a list of folders: `record` as model.json holds it, `model` its description,
`attention` the rules' choice for it, `tensors` = name -> [dtype, shape]),
with one JSON line on stdout (a list of answers: {"compared", "mismatches", "skipped",
"unplanned"}, or {"error"}); each folder is checked in a forked child (helpers/job/forked.py), so
nothing one bridge or provider sets reaches the next. It ends at the end of its input, or after
IDLE_S seconds without a request.

    python -m helpers.runtime.hf.shape_check"""
from __future__ import annotations

import contextlib
import json
import os
import select
import sys

IDLE_S = 300.0  # a notebook's next job within five minutes finds the imports made
# safetensors' dtype names -> torch's (a dtype torch lacks: the tensors that use it are skipped)
DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
          "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
          "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}


class MetaState:
    """The folder's tensors as Bridge's loader looks them up (a Mapping): a meta tensor of the
    header's dtype and shape per name, made when asked for."""

    def __init__(self, tensors: dict):
        self.tensors = tensors

    def __getitem__(self, name):
        import torch

        dtype, shape = self.tensors[name]
        torch_dtype = getattr(torch, DTYPES.get(dtype, ""), None)
        if torch_dtype is None:
            raise NotImplementedError(f"{name} has dtype {dtype}, which torch has no type for")
        return torch.empty(shape, dtype=torch_dtype, device="meta")

    def __contains__(self, name):
        return name in self.tensors

    def __iter__(self):
        return iter(self.tensors)

    def __len__(self):
        return len(self.tensors)

    def keys(self):
        return self.tensors.keys()

    def get(self, name, default=None):
        return self[name] if name in self.tensors else default


def not_comparable(error: BaseException) -> bool:
    """A conversion that failed for the meta device (an operation that needs values), not for the
    shapes it was given: skipped, never a mismatch."""
    return isinstance(error, (NotImplementedError, KeyError, TypeError, AttributeError)) or "meta" in str(error).lower()


def folder_spec(path: str, attention: str):
    """The job the check builds for: one CPU process in fp32 on the local backend (TP=1), with the
    attention the rules picked for the folder's family (helpers/job/hf_shapes.py)."""
    from helpers.job.spec import JobSpec

    return JobSpec(hf_model=path, device="cpu", precision="fp32", backend="local", nproc=1, attention=attention)


def meta_chunks(item: dict):
    """(the bridge opened on the folder, the kit's model chunks for it on the meta device)."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from helpers.job import models
    from helpers.runtime import build
    from helpers.runtime.compat import cpu as cpu_compat
    from helpers.runtime.hf import config as hf_config

    cpu_compat.activate()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # no port: a store in memory
    ps.initialize_model_parallel()
    model_parallel_cuda_manual_seed(0)
    spec = folder_spec(item["record"]["path"], item["attention"])
    bridge = hf_config.open_bridge(item["record"])
    provider = hf_config.provider_config(bridge, spec, on_cpu=True, bf16=False)
    provider.perform_initialization = False  # shapes only: no initial values computed
    with torch.device("meta"):
        chunks = build.model_chunks(provider, models.from_dict(item["model"]), spec)
    return bridge, chunks


def compare(item: dict) -> dict:
    """In a forked child: the folder's planned parameters against the shapes Bridge makes of its tensors."""
    from helpers.job.import_phase import without_modelopt

    bridge, chunks = meta_chunks(item)
    state = MetaState({name: (dtype, tuple(shape)) for name, (dtype, shape) in item["tensors"].items()})
    mismatches, skipped, planned, compared = [], [], set(), 0
    # Bridge asks nvidia-modelopt whether each module is one of its dynamic modules (5-8 s of imports
    # for an answer that is no in the kit): absent, Bridge's own probe answers no.
    with without_modelopt():
        model_bridge = bridge._model_bridge  # the one object load_hf_weights calls, its registry edited
        tasks = [t for t in model_bridge.build_conversion_tasks(bridge.hf_pretrained, chunks)
                 if t is not None and t.megatron_module is not None]
        for task in tasks:
            planned.add(task.param_name)
            mapping = task.mapping
            record = {"param": task.param_name, "pattern": mapping.megatron_param, "kind": type(mapping).__name__,
                      "hf": hf_tensors(mapping, state), "expected": list(task.param_weight.shape)}
            try:
                converted = mapping.hf_to_megatron(model_bridge.maybe_modify_loaded_hf_weight(mapping.hf_param, state),
                                                   task.megatron_module)
            except Exception as e:  # noqa: BLE001  (Bridge's own error is the finding)
                if not_comparable(e):
                    skipped.append({**record, "reason": f"{type(e).__name__}: {e}"})
                else:
                    mismatches.append({**record, "got": None, "error": f"{type(e).__name__}: {e}"})
                continue
            if converted is None:
                skipped.append({**record, "reason": "no tensor for this rank"})
                continue
            compared += 1
            if tuple(converted.shape) != tuple(task.param_weight.shape):
                mismatches.append({**record, "got": list(converted.shape), "error": None})
        local = {name for chunk in chunks for name, _ in chunk.named_parameters()
                 if not (name == "output_layer.weight" and chunk.share_embeddings_and_output_weights)}
        registry = model_bridge.mapping_registry()
        unplanned = [{"param": name, "hf": hf_tensors(registry.megatron_to_hf_lookup(name), state)}
                     for name in sorted(local - planned)]
    return {"compared": compared, "mismatches": mismatches, "skipped": skipped, "unplanned": unplanned}


def hf_tensors(mapping, state: MetaState) -> list:
    """[role, HF name, its shape or None when the folder has no such tensor] of each tensor a
    mapping reads (role None for a 1:1 mapping); none for no mapping."""
    if mapping is None:
        return []
    names = {None: mapping.hf_param} if isinstance(mapping.hf_param, str) else dict(mapping.hf_param)
    return [[role, name, list(state.tensors[name][1]) if name in state else None] for role, name in names.items()]


def answer(items: list[dict]) -> list[dict]:
    from helpers.job import forked
    from helpers.runtime.hf import te_standin

    answers = []
    for item in items:
        # the architecture's bridge imported here once, so every later child finds it (a failure here
        # is met again in the child, which answers with it)
        with contextlib.suppress(Exception):
            te_standin.import_auto_bridge(item["record"]["architectures"] or ())
        answers.append(json.loads(json.dumps(forked.call(compare, item), default=str)))
    return answers


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")
    from helpers.job import import_phase
    from helpers.runtime.compat import cpu as cpu_compat

    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the answer channel: what the checks print goes to stderr
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with import_phase.without_gc():
        cpu_compat.import_megatron_eagerly()  # as a CPU rank imports it: no torch.compile
        import megatron.core  # noqa: F401

        from helpers.runtime import build  # noqa: F401
        from helpers.runtime.hf import config, te_standin  # noqa: F401
        te_standin.import_auto_bridge(core_only=True)
    while select.select([sys.stdin], [], [], IDLE_S)[0]:
        line = sys.stdin.readline()
        if not line:
            return
        answers.write(json.dumps(answer(json.loads(line))) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
