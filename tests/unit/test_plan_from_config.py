"""Planning from config.json alone (helpers/job/hf_model.py `read_config`, `describe`): the advisor
and the memory planner take a Hugging Face folder holding only config.json, or the config.json file
itself, and describe the model exactly as they do the same folder with its weights (and, for a
Llama-3-8B-shaped config, as the llama3-8b preset); running a job still needs the weights, and is
refused by name without them. What cannot be planned gets one error naming the problem and a fix.
No processes."""
import dataclasses
import json

import pytest

from helpers import launch
from helpers.advisor import cli
from helpers.job import hf_model
from helpers.job.layout import Layout
from helpers.job.models import preset
from helpers.job.spec import JobSpec
from helpers.launch import from_megatron, tiny_hf
from helpers.memory import plan_memory
from helpers.memory.training import Training

NAME = "Meta-Llama-3-8B"
SMALL = ["--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "4096", "--global-batch", "16", "--max-micro-batch", "1",
         "--json"]


def llama3_8b_config() -> dict:
    """Meta-Llama-3-8B's shape, as transformers' own config class writes it."""
    import transformers

    return transformers.LlamaConfig(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336,
                                    num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                    max_position_embeddings=8192, rope_theta=500000.0,
                                    architectures=["LlamaForCausalLM"]).to_dict()


@pytest.fixture
def config_only(tmp_path):
    """A folder holding config.json and nothing else: what an engineer has before the download."""
    import transformers

    folder = tmp_path / "plain" / NAME
    folder.mkdir(parents=True)
    transformers.LlamaConfig(**llama3_8b_config()).to_json_file(folder / "config.json")
    assert [f.name for f in folder.iterdir()] == ["config.json"]
    return folder


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_advisor_plans_from_a_config_only_folder_and_from_its_config_json(capsys, config_only):
    rc, out, err = run_cli(capsys, "--model", str(config_only), "--gpus", "8", "--gpu", "h100-80gb", "--json")
    assert (rc, err) == (0, "")
    rows = json.loads(out)
    accepted = [r for r in rows if not r["refused"]]
    assert accepted and any(r["fits"] for r in accepted)
    assert all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == 8 and r["step_s"] > 0 for r in accepted)
    # the folder, its config.json and the preset of the same shape: the same layouts, numbers and refusals
    answers = {}
    for model in (str(config_only), str(config_only / "config.json"), "llama3-8b"):
        rc, out, err = run_cli(capsys, "--model", model, *SMALL)
        assert (rc, err) == (0, ""), model
        answers[model] = json.loads(out)
    first, *others = answers.values()
    assert first and all(other == first for other in others)


def test_the_description_equals_the_folder_with_weights_and_the_preset(config_only, tmp_path):
    weighted = tiny_hf.config_only(tmp_path / "weighted" / NAME, llama3_8b_config())
    assert hf_model.read(weighted).problems == ()  # a folder a job could run from
    plain = hf_model.describe(config_only)
    assert plain == hf_model.describe(weighted)
    assert (plain.name, plain.num_layers, plain.hidden_size, plain.num_attention_heads, plain.num_query_groups,
            plain.ffn_hidden_size, plain.vocab_size, plain.activation) == (NAME, 32, 4096, 32, 8, 14336, 128256,
                                                                           "swiglu")
    from_file = hf_model.describe(config_only / "config.json")
    assert from_file.name == NAME and "config.json" in from_file.source
    assert dataclasses.replace(from_file, source=plain.source) == plain
    known = preset("llama3-8b")
    assert dataclasses.replace(plain, name=known.name, source=known.source, built_from_hf=False) == known


def test_the_memory_planner_reads_a_config_only_folder(config_only):
    spec = JobSpec(hf_model=str(config_only), nproc=64, tp=8, pp=4, sp=True, seq_len=4096, global_batch=64)
    lay = Layout(nproc=8, tp=2, pp=4, sp=True, seq_len=4096, micro_batch=1, global_batch=16)
    planned = plan_memory(spec.model_preset(), lay, Training())
    assert planned.reserved_bytes == plan_memory(preset("llama3-8b"), lay, Training()).reserved_bytes > 0
    text = from_megatron.plan_text(spec, "h100-80gb")  # python -m helpers --hf-model DIR --plan-on GPU
    assert text.startswith("memory plan on 64 x NVIDIA H100") and "GiB per GPU of 80 GiB" in text


def test_running_a_job_still_needs_the_weights(config_only, tmp_path):
    def refused(hf) -> launch.InvalidJob:
        with pytest.raises(launch.InvalidJob) as err:
            launch.run(hf_model=str(hf), out=str(tmp_path / "runs"), device="cpu", progress=False)
        assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing started
        return err.value

    no_weights = refused(config_only)
    assert "hf_model_no_weights" in {v.name for v in no_weights.violations}
    assert f"[hf_model_no_weights] hf_model folder {str(config_only)!r} has no *.safetensors weights" in str(
        no_weights)
    assert "[hf_model_not_a_folder]" in str(refused(config_only / "config.json"))  # a job imports a folder


def write(folder, text: str):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(text)
    return folder


@pytest.mark.parametrize("case, expected", [
    ("nowhere", ["neither a preset", "nor an existing folder or file"]),
    ("empty folder", ["[hf_model_no_config]", "has no config.json", "hf download REPO config.json"]),
    ("not JSON", ["[hf_model_config_unreadable]", "cannot be read as JSON"]),
    ("not JSON, the file given", ["[hf_model_config_unreadable]", "cannot be read as JSON"]),
    ("a JSON list", ["[hf_model_config_unreadable]", "holds a JSON list"]),
    ("unknown architecture", ["[hf_architecture_not_built]", "MyOwnForCausalLM", "LlamaForCausalLM"]),
    ("refused architecture", ["[hf_missing_linear_attention]", "Qwen3NextForCausalLM"]),
    ("a value missing", ["[hf_config_missing_value]", "'num_attention_heads'", "LlamaForCausalLM"]),
])
def test_what_cannot_be_planned_gets_one_clear_error(capsys, tmp_path, case, expected):
    config = llama3_8b_config()
    model = {
        "nowhere": lambda: tmp_path / "nowhere",
        "empty folder": lambda: (tmp_path / "empty").mkdir() or tmp_path / "empty",
        "not JSON": lambda: write(tmp_path / "m", '{"hidden_size": 4096,'),
        "not JSON, the file given": lambda: write(tmp_path / "m", "<html>rate limited</html>") / "config.json",
        "a JSON list": lambda: write(tmp_path / "m", json.dumps([config])),
        "unknown architecture": lambda: write(tmp_path / "m", json.dumps({**config,
                                                                          "architectures": ["MyOwnForCausalLM"]})),
        "refused architecture": lambda: write(tmp_path / "m", json.dumps({**config, "model_type": "qwen3_next",
                                                                          "architectures": ["Qwen3NextForCausalLM"]})),
        "a value missing": lambda: write(tmp_path / "m", json.dumps({k: v for k, v in config.items()
                                                                     if k != "num_attention_heads"})),
    }[case]()
    rc, out, err = run_cli(capsys, "--model", str(model), *SMALL)
    assert (rc, out) == (2, "")
    assert err.startswith("error: ") and "Traceback" not in err
    assert all(e in err for e in expected), err
    if case != "nowhere":
        assert "Fix: " in err
