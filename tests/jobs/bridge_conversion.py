"""Megatron-Bridge's own checkpoint conversion on CPU, each call in a fresh process (what
tests/jobs/test_bridge_checkpoints.py compares the kit's checkpoints and exports with):

    export_ckpt(CHECKPOINTS, HF_SOURCE, OUT)   AutoBridge.from_hf_pretrained(HF_SOURCE).export_ckpt(CHECKPOINTS, OUT):
                                               a Megatron checkpoint (the kit's, Bridge's) as a Hugging Face folder
    import_ckpt(HF_SOURCE, OUT)                AutoBridge.import_ckpt(HF_SOURCE, OUT): a Hugging Face folder as a
                                               Megatron-Bridge checkpoint (weights only) a kit job loads (load_dir=)

    python tests/jobs/bridge_conversion.py export CHECKPOINTS HF_SOURCE OUT
    python tests/jobs/bridge_conversion.py import HF_SOURCE OUT

Without Transformer Engine (what lets it run on CPU), as the kit's own HF path does: Bridge is
imported with the kit's stand-ins (helpers/runtime/hf/te_standin.py), and Megatron-Core's CUDA calls
go to the CPU (helpers/runtime/compat/cpu.py). export_ckpt runs as it is: it rebuilds the model
from the checkpoint's run_config.yaml, which names the layer spec the job ran on. import_ckpt builds
the model from the HF folder's provider, whose layer spec is Transformer Engine's and whose fused
kernels need TE or a GPU: here the provider takes Megatron's local layer spec and the plain paths
(`cpu_bridge`), which hold the same tensors and save them under the same names (TE's); the rest is
Bridge's import_ckpt. A process per call: Bridge's conversion starts a one-rank gloo process group of
its own, and the stand-ins and CPU redirections stay out of the caller."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.job import paths

# Provider fields Megatron's local modules need on CPU: the fused kernels off (build.job_fields makes
# the same choices for the kit's CPU jobs) and Megatron-Core's local implementation.
CPU_FIELDS = dict(gradient_accumulation_fusion=False, bias_activation_fusion=False, bias_dropout_fusion=False,
                  masked_softmax_fusion=False, apply_rope_fusion=False, persist_layer_norm=False,
                  cross_entropy_loss_fusion=False, moe_grouped_gemm=False, moe_permute_fusion=False,
                  transformer_impl="local")


def export_ckpt(checkpoints, hf_source, out, timeout_s: float = 600) -> Path:
    """Bridge's export of the latest checkpoint under `checkpoints` as an HF folder `out` (the config,
    tokenizer and file layout of `hf_source`)."""
    _run(["export", str(checkpoints), str(hf_source), str(out)], timeout_s)
    return Path(out)


def import_ckpt(hf_source, out, timeout_s: float = 600) -> Path:
    """Bridge's import of the HF folder `hf_source` as a Megatron-Bridge checkpoint in `out`."""
    _run(["import", str(hf_source), str(out)], timeout_s)
    return Path(out)


def _run(args: list[str], timeout_s: float) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(paths.REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"Megatron-Bridge's {args[0]}_ckpt failed (exit {done.returncode}):\n"
                           f"{done.stderr[-4000:]}")


def cpu_bridge(auto_bridge):
    """AutoBridge whose providers build Megatron's local modules with the plain (unfused) paths."""
    from megatron.bridge.models.gpt_provider import default_layer_spec, local_layer_spec

    class CPUBridge(auto_bridge):
        def to_megatron_provider(self, *args, **kwargs):
            provider = super().to_megatron_provider(*args, **kwargs)
            if getattr(provider, "transformer_layer_spec", None) is default_layer_spec:  # a family's own spec stays
                provider.transformer_layer_spec = local_layer_spec
            for name, value in CPU_FIELDS.items():
                if hasattr(provider, name):
                    setattr(provider, name, value)
            return provider
    return CPUBridge


def main(argv: list[str]) -> None:
    import megatron.core  # noqa: F401  (before Bridge: the TE stand-in relies on it)

    from helpers.runtime.compat import cpu as cpu_compat
    from helpers.runtime.hf import te_standin

    cpu_compat.activate()
    with te_standin.training_config_imports():
        from megatron.bridge import AutoBridge
        from megatron.bridge.training import model_load_save  # noqa: F401  (Bridge's conversion imports it)
    with te_standin.modelopt_standin():
        if argv[0] == "export":
            checkpoints, hf_source, out = argv[1:]
            AutoBridge.from_hf_pretrained(hf_source).export_ckpt(checkpoints, out, show_progress=False)
        elif argv[0] == "import":
            hf_source, out = argv[1:]
            with model_load_save.temporary_distributed_context("gloo"):  # import_ckpt expects a process group
                cpu_bridge(AutoBridge).import_ckpt(hf_source, out)
        else:
            raise SystemExit(f"usage: python tests/jobs/bridge_conversion.py export CHECKPOINTS HF_SOURCE OUT | "
                             f"import HF_SOURCE OUT (not {argv[0]!r})")


if __name__ == "__main__":
    main(sys.argv[1:])
