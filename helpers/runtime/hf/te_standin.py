"""Import Megatron-Bridge on a machine without Transformer Engine, while Megatron-Core keeps seeing
*no* TE. Replaces: installing transformer-engine (CUDA-only) just to satisfy an import.

Why a stand-in is needed: `from megatron.bridge import AutoBridge` runs
`import transformer_engine.pytorch as te` unconditionally (peft/lora_layers.py, which reads
`te.ops.Sequential` in annotations at class-definition time). Nothing the kit calls uses TE.

How it stays harmless (measured for megatron-bridge 0.6.2 / megatron-core 0.19.2):
  * `megatron.core` must already be imported, and the Megatron-Core modules that probe TE at import
    time are imported *before* the stand-in exists (PREIMPORT), so their HAVE_TE flags are False;
    `get_te_version()` is called once, caching its no-TE answer 0.0.0.
  * the stand-in is two empty packages (`__path__ = []`): every
    `from transformer_engine.pytorch.<sub> import X` still raises ImportError, so Bridge's own
    try/except probes fall back exactly as without TE.
  * it lives in `sys.modules` only while Bridge is imported; later lazy probes (Bridge's
    `can_enable_gradient_accumulation_fusion`) see no TE. Bridge modules that cached HAVE_TE=True
    during the import only choose TE layer specs, which the kit never uses (helpers/runtime/build.py builds its own).
  * with a real TE installed it does nothing.
Which of Bridge's modules are imported at all: bridge_import.py (the job's architecture only).

`modelopt_standin()` does the same for the one name `save_hf_pretrained` imports from nvidia-modelopt
(`modelopt.torch.quantization.utils.is_quantized`), around the export call only.

`training_config_imports()` is for importing Bridge's training config (and a recipe built on it,
helpers/runtime/hf/recipe_check.py): the TE stand-in as above, and one for `megatron.energon`
(megatron-energon, Bridge's multimodal data loader, whose own imports pull a storage client and
some ten more packages): training/config.py imports it through its data builders, and a GPT
recipe never builds one. Its three names refuse to be called."""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types

from helpers.job.rules.environment import te_installed

# Megatron-Core (and megatron.training, which Bridge imports) modules whose import-time TE probe must
# run before the stand-in is registered. Found by recording which module first asks for a TE name
# during the Bridge import; hybrid_layer_specs even calls is_te_min_version() at import.
PREIMPORT = (
    "megatron.core.utils",
    "megatron.core.fp8_utils",
    "megatron.core.fp4_utils",
    "megatron.core.extensions.transformer_engine",
    "megatron.core.tensor_parallel",
    "megatron.core.transformer.attention",
    "megatron.core.transformer.mlp",
    "megatron.core.transformer.moe.experts",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.models.gpt.experimental_attention_variant_module_specs",
    "megatron.core.optimizer",
    "megatron.core.dist_checkpointing.strategies.torch",
    "megatron.core.dist_checkpointing.exchange_utils",
    "megatron.core.ssm.mamba_context_parallel",
    "megatron.core.models.hybrid.hybrid_layer_specs",
    "megatron.training",
)
TE_NAMES = ("transformer_engine", "transformer_engine.pytorch")
MODELOPT_NAMES = ("modelopt", "modelopt.torch", "modelopt.torch.quantization", "modelopt.torch.quantization.utils")


class Unavailable:
    """Placeholder for a TE class: usable in annotations and isinstance, refuses construction."""

    package = "Transformer Engine"

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{self.package} is not installed (the kit's import stand-in holds its name)")


def _package(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package with no findable submodules
    module.__kit_standin__ = True
    return module


def _te_modules() -> dict[str, types.ModuleType]:
    te, pytorch = _package("transformer_engine"), _package("transformer_engine.pytorch")
    te.__version__ = "0.0.0"  # what megatron.core.utils.get_te_version() reports without TE
    pytorch.ops = types.SimpleNamespace(Sequential=Unavailable)
    pytorch.Linear = type("Linear", (Unavailable,), {})
    pytorch.LayerNormLinear = type("LayerNormLinear", (Unavailable,), {})
    te.pytorch = pytorch
    return {"transformer_engine": te, "transformer_engine.pytorch": pytorch}


@contextlib.contextmanager
def _registered(modules: dict[str, types.ModuleType]):
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name in modules:
            if getattr(sys.modules.get(name), "__kit_standin__", False):
                del sys.modules[name]


def import_auto_bridge(architectures=(), core_only: bool = False):
    """`megatron.bridge.AutoBridge`, imported with the TE stand-in when TE is absent; with the bridges
    of `architectures` only, where bridge_import.py knows their modules (else all of Bridge), or
    with none yet (`core_only`, bridge_import.auto_bridge)."""
    from helpers.job import import_phase

    if "megatron.core" not in sys.modules:
        raise RuntimeError("import megatron.core before Megatron-Bridge (the TE stand-in relies on it)")
    with import_phase.without_gc(), import_phase.without_modelopt():  # ~2-9 s of imports (bridge_import.py)
        return _auto_bridge(architectures, core_only)


def _auto_bridge(architectures, core_only=False):
    import logging

    from helpers.runtime.hf import bridge_import

    if te_installed():
        return bridge_import.auto_bridge(architectures, core_only)
    for name in PREIMPORT:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    from megatron.core import utils
    utils.get_te_version()  # cache the no-TE version before the stand-in answers
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)  # Bridge logs a traceback at INFO for each TE name it probes
    try:
        with _registered(_te_modules()):  # (again for a second architecture: every step is idempotent)
            return bridge_import.auto_bridge(architectures, core_only)
    finally:
        logging.disable(previous)


ENERGON_NAMES = ("WorkerConfig", "get_savable_loader", "get_train_dataset")  # what Bridge imports from it


@contextlib.contextmanager
def training_config_imports():
    """While importing `megatron.bridge.training.config` (or a recipe) without TE or megatron-energon."""
    import logging

    if "megatron.core" not in sys.modules:
        raise RuntimeError("import megatron.core before Megatron-Bridge (the TE stand-in relies on it)")
    from helpers.runtime.hf import bridge_import

    bridge_import.run_bare_packages()  # an earlier AutoBridge import in this process may have left them bare
    modules = {}
    if not te_installed():
        for name in PREIMPORT:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        from megatron.core import utils
        utils.get_te_version()
        modules.update(_te_modules())
    if importlib.util.find_spec("megatron.energon") is None:
        energon = _package("megatron.energon")
        for name in ENERGON_NAMES:
            setattr(energon, name, type(name, (Unavailable,), {"package": "megatron-energon"}))
        modules["megatron.energon"] = energon
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        with _registered(modules):
            yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def modelopt_standin():
    """Around `save_hf_pretrained` only: `is_quantized` (always False: the kit never quantises), also
    where nvidia-modelopt is installed (Bridge's checkpoint conversion needs it: pyproject.toml), since
    importing it takes 5-10 s on every rank of an export for an answer the kit knows. Where it is
    imported already (Bridge's training checkpointing imports it), the real one answers."""
    if "modelopt" in sys.modules:
        yield
        return
    modules = {name: _package(name) for name in MODELOPT_NAMES}
    modules["modelopt.torch.quantization.utils"].is_quantized = lambda module: False
    with _registered(modules):
        yield
