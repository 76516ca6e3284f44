"""What the kit changes in Megatron-Bridge 0.6.2's mapping registry (HF tensor <-> Megatron
parameter), for the bridge opened on one folder. Bridge rebuilds the registry (`mapping_registry()`)
for every load and export, so `edited` wraps that call; both directions see the same edits.

`folder_names` replaces: renaming tensors in the user's checkpoint by hand. Where a folder spells a
tensor another known way (helpers/job/hf_names.py ALIASES: transformers' own NemotronH
`save_pretrained` writes `backbone.embedding.weight`, Bridge says `backbone.embeddings.weight`),
the registry gets the folder's spelling: the import reads it and the export writes it back.

`local_experts` replaces: grouped-GEMM experts (TEGroupedMLP), which some bridges map alone
(GLM-4.5 names only `mlp.experts.linear_fc1.weight<N>`). The kit builds Megatron's SequentialMLP
(`mlp.experts.local_experts.<N>.linear_fc1.weight`), so each grouped expert mapping gets its
SequentialMLP twin, with the same HF tensors and the same conversion, where the bridge has none.

`register_kit_modules`: Bridge chooses how to split a weight over TP by its module's class name;
the kit's full-width q/k norms (helpers/runtime/layers/full_width_qk_norm.py) keep the whole weight
on every rank (replicated); its biased experts' down projection (layers/biased_experts.py) is
Megatron's row-parallel linear."""
from __future__ import annotations

import copy

GROUPED, LOCAL = ".experts.linear_fc", ".experts.local_experts.*.linear_fc"


KIT_MODULES = {"FullWidthQNorm": "replicated", "FullWidthKNorm": "replicated",
               "RowParallelLinearForBiasedExperts": "row", "RowParallelLinearWithPostNorm": "row",
               "ZeroCenteredRMSNorm": "replicated"}  # class name -> Bridge's TP split


def register_kit_modules() -> None:
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    for name, split in KIT_MODULES.items():
        AutoMapping.register_module_type(name, split)


def folder_names(renames: dict[str, str]):
    """An edit: Bridge's name -> the folder's, for plain (wildcard-free) HF names."""
    def edit(registry):
        for mapping in registry.mappings:
            if isinstance(mapping.hf_param, str) and mapping.hf_param in renames:
                mapping.hf_param = renames[mapping.hf_param]
        return registry
    return edit


def local_experts(registry):
    """An edit: a SequentialMLP mapping for every grouped-expert mapping that lacks one."""
    from megatron.bridge.models.conversion.mapping_registry import MegatronMappingRegistry

    names = {m.megatron_param for m in registry.mappings}
    added = []
    for mapping in registry.mappings:
        param = mapping.megatron_param
        if GROUPED in param and param.endswith("weight*"):
            twin = param.replace(GROUPED, LOCAL)[:-1]  # ...experts.local_experts.*.linear_fc1.weight
            if twin not in names:
                local = copy.copy(mapping)
                local.megatron_param = twin
                local._broadcast_obj_cache, local._tensor_spec_output_cache = {}, {}
                added.append(local)
    return MegatronMappingRegistry(*registry.mappings, *added) if added else registry


def edited(bridge, edits: list):
    """`bridge` (an AutoBridge) whose model bridge builds its registry through `edits`."""
    if not edits:
        return bridge

    class Edited(type(bridge)):
        @property
        def _model_bridge(self):
            model_bridge = super()._model_bridge
            build = model_bridge.mapping_registry

            def registry():
                built = build()
                for edit in edits:
                    built = edit(built)
                return built
            model_bridge.mapping_registry = registry
            return model_bridge

    bridge.__class__ = Edited
    return bridge
