"""What rank 0 of a job does with an HF folder, for tests/jobs/test_hf_shapes.py to hold the check
before start to: Megatron-Bridge opened on the folder, the kit's model built on CPU at TP=1 with
real tensors, and the weights loaded by helpers/runtime/hf/weights.load, which raises on any
parameter Bridge has no tensor for, any shape Bridge cannot load, and any parameter left unwritten.

    python -m tests.jobs.hf_load   # stdin: a JSON list of folders; stdout: one answer per folder,
                                   # "loaded" or the error rank 0 would stop with

Megatron-Core, Bridge and transformers are imported once; each folder is loaded in a forked child
(helpers/job/forked.py) with a gloo world of its own, as a fresh rank would."""
from __future__ import annotations

import json
import os
import sys


def load(folder: str) -> str:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from helpers.job import families, hf_model
    from helpers.job.spec import attention_of
    from helpers.runtime import build
    from helpers.runtime.compat import cpu as cpu_compat
    from helpers.runtime.hf import config as hf_config
    from helpers.runtime.hf import shape_check, weights

    cpu_compat.activate()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    ps.initialize_model_parallel()
    model_parallel_cuda_manual_seed(0)
    read = hf_model.read(folder)
    assert not read.problems, read.problems
    sinks = families.of_model_type(read.config.get("model_type")).attention_sinks
    spec = shape_check.folder_spec(folder, attention_of("auto", "local", sinks))  # the spec the check builds for
    bridge = hf_config.open_bridge(read.record())
    provider = hf_config.provider_config(bridge, spec, on_cpu=True, bf16=False)
    chunks = build.model_chunks(provider, hf_model.describe(folder, read.config), spec)
    try:
        weights.load(bridge, chunks)
    except Exception as e:  # noqa: BLE001  (the error rank 0 stops with is the answer)
        return f"{type(e).__name__}: {e}"
    return "loaded"


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # what the loads print goes to stderr
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    from helpers.job import forked
    from helpers.runtime.compat import cpu as cpu_compat

    cpu_compat.import_megatron_eagerly()
    import megatron.core  # noqa: F401

    from helpers.runtime import build  # noqa: F401
    from helpers.runtime.hf import config, te_standin  # noqa: F401
    te_standin.import_auto_bridge(core_only=True)
    # What Bridge's loading asks nvidia-modelopt on every rank (is each module one of its dynamic
    # modules?), imported once here rather than in every child
    from modelopt.torch.opt.dynamic import DynamicModule  # noqa: F401
    found = [forked.call(load, folder) for folder in json.loads(sys.stdin.read())]
    answers.write(json.dumps([f if isinstance(f, str) else f["error"] for f in found]) + "\n")
    answers.flush()


if __name__ == "__main__":
    main()
