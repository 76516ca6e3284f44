"""The module tree of what a job asked of Megatron (helpers/views/megatron_calls.py) can leave out
the shapes an exercise asks later, and only those."""
from types import SimpleNamespace

from helpers.views import megatron_calls

MODULES = [{"name": "decoder.layers.0.mlp.linear_fc1", "class": "ColumnParallelLinear",
            "module": "megatron.core.tensor_parallel.layers", "params": {"weight": [160, 64]}},
           {"name": "decoder.layers.0.mlp.linear_fc2", "class": "RowParallelLinear",
            "module": "megatron.core.tensor_parallel.layers", "params": {"weight": [64, 80]}},
           {"name": "decoder.layers.1.mlp.linear_fc1", "class": "ColumnParallelLinear",
            "module": "megatron.core.tensor_parallel.layers", "params": {"weight": [160, 64]}}]


def test_a_hidden_module_is_listed_without_its_shapes():
    run = SimpleNamespace(megatron={"modules": {"0": MODULES}})
    rows = megatron_calls.module_rows(run, hide=("linear_fc1",))
    assert [r["name"] for r in rows] == ["decoder.layers.0.mlp.linear_fc1", "decoder.layers.0.mlp.linear_fc2"]
    assert "160" not in megatron_calls.shapes(rows[0]) and megatron_calls.shapes(rows[1]) == "weight (64, 80)"
    assert megatron_calls.shapes(megatron_calls.module_rows(run)[0]) == "weight (160, 64)"
