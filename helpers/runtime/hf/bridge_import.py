"""Megatron-Bridge's AutoBridge with only the model bridges a job needs.

`import megatron.bridge` runs two package `__init__`s (`megatron.bridge`, `megatron.bridge.models`)
that import every model bridge Bridge ships, diffusion, Gemma, Bailing, speech and vision models
included (~270 modules): 8.7 s in every rank of an HF job on the 2-core machine, where the job
needs AutoBridge and the bridge of its own architecture (~2.4 s, mostly transformers). A bridge
registers itself when its module is imported (`MegatronModelBridge.register_bridge`), so importing
that one module registers it exactly as the full import does.

For an architecture whose registering module helpers/job/architectures.py finds in Bridge's
sources, the two packages are entered bare (the package object with its `__path__`, its `__init__`
not run), then AutoBridge and that bridge module are imported as usual. Any other architecture gets
the full import. Call it inside te_standin's stand-in, as
`te_standin.import_auto_bridge(architectures)` does."""
from __future__ import annotations

import importlib
import importlib.util
import sys

from helpers.job import architectures as registry

PACKAGES = ("megatron.bridge", "megatron.bridge.models")  # their __init__ imports every bridge
BARE = "__kit_bare_package__"


def _enter_bare(name: str) -> None:
    spec = importlib.util.find_spec(name)  # the parent is already in sys.modules: nothing runs
    module = importlib.util.module_from_spec(spec)
    setattr(module, BARE, True)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)


def _is_bare(name: str) -> bool:
    return getattr(sys.modules.get(name), BARE, False)


def auto_bridge(architectures=(), core_only: bool = False):
    """AutoBridge, with the bridge of every architecture in `architectures` registered (all of
    Bridge's when one has no registering module or none is given). `core_only`: AutoBridge with no
    model bridge registered yet (the packages entered bare): what every rank of an HF job needs
    first, imported once per job before its ranks are forked (runtime/rank_imports_hf.py); a
    later call with the job's architectures adds their bridges."""
    if core_only:
        return _bare_auto_bridge()
    modules = [registry.bridge_module(a) for a in architectures]
    if "megatron.bridge" in sys.modules and not _is_bare("megatron.bridge"):  # the full import ran
        from megatron.bridge import AutoBridge
        return AutoBridge
    if not modules or None in modules:
        run_bare_packages()
        from megatron.bridge import AutoBridge
        return AutoBridge
    AutoBridge = _bare_auto_bridge()
    for module in modules:
        importlib.import_module(module)
    return AutoBridge


def run_bare_packages() -> None:
    """Forget the packages an earlier call entered bare, so that the next import of either runs its own
    `__init__`: what the full import needs, and whatever imports names from them (Bridge's training
    config imports `GPTModelProvider` from `megatron.bridge.models`). Their submodules stay imported."""
    for name in reversed(PACKAGES):
        if _is_bare(name):
            del sys.modules[name]


def _bare_auto_bridge():
    """AutoBridge alone, the two packages entered bare (their `__init__`s not run)."""
    for name in PACKAGES:
        if name not in sys.modules:
            _enter_bare(name)
    from megatron.bridge.models.conversion.auto_bridge import AutoBridge
    return AutoBridge
