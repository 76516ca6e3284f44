"""The memory planner reads every supported family from its config.json (helpers/job/hf_model.py
`describe`): the parameters it plans for one rank of each family's tiny model equal the parameters
transformers builds from the same config (on the meta device: no weights). That live jobs hold the
planned static bytes byte for byte at their layouts: tests/jobs/test_hf_import.py and test_hybrid.py."""
import pytest

from helpers.job import architectures, families
from helpers.job.layout import Layout
from helpers.job.spec import JobSpec
from helpers.launch import tiny_hf
from helpers.memory.static import static_memory
from helpers.memory.training import Training


def test_every_supported_architecture_has_a_tiny_family():
    assert {a for f in families.FAMILIES if f.tiny for a in f.architectures} == set(architectures.SUPPORTED)


def transformers_params(config) -> int:
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", sorted(tiny_hf.FAMILIES))
def test_planned_parameters_equal_transformers(family, tmp_path):
    config = tiny_hf.hf_config(family)
    folder = tiny_hf.config_only(tmp_path / family, {**config.to_dict(), "architectures": config.architectures
                                                     or [transformers_class(config)]})
    spec = JobSpec(hf_model=str(folder), device="cpu")
    planned = static_memory(spec.model_preset(), Layout.of(spec), Training.of(spec)).params
    assert planned == transformers_params(config), family


def transformers_class(config) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]
