"""The architecture table (helpers/job/architectures.py): every text-only causal LM the installed
Megatron-Bridge registers has exactly one outcome, `--list-architectures` prints the table and the
docs page is that table with each row's checks (tests/hf_families.py), every refused architecture's
folder is refused before start with its missing pieces named, and every supported one names a test
that exists. (That the source scan equals Bridge's live registry: tests/unit/test_hf_model.py, in
the subprocess that imports all of Bridge.)"""
import ast
import fnmatch
import re
from pathlib import Path

import pytest

from helpers import launch
from helpers.job import architectures, families, hf_model
from helpers.launch import cli, tiny_hf
from tests import hf_families

ROOT = Path(__file__).resolve().parents[2]
DENSE = {"model_type": "x", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 512, "hidden_act": "silu",
         "max_position_embeddings": 256}


def folder(path: Path, config: dict) -> str:
    return str(tiny_hf.config_only(path, config))


def test_every_text_architecture_bridge_registers_has_exactly_one_outcome():
    text = set(architectures.text_architectures())
    assert len(text) >= 30  # Bridge 0.6.2 registers 36; a scan that found few would be broken
    assert not set(architectures.SUPPORTED) & set(architectures.REFUSED)
    assert text - set(architectures.SUPPORTED) - set(architectures.REFUSED) == set(), "classify the new ones"
    assert set(architectures.SUPPORTED) | set(architectures.REFUSED) <= text, "stale entries"
    assert {r.outcome for r in architectures.table()} == {"supported", "refused"}
    for arch, refused in architectures.REFUSED.items():
        assert refused.pieces and all(p in architectures.PIECES for p in refused.pieces), arch


def test_vision_and_audio_models_are_not_in_the_table():
    registered = {r.architecture for r in architectures.bridge_registrations()}
    assert {"Qwen3VLForConditionalGeneration", "Gemma3ForConditionalGeneration"} <= registered
    assert "Qwen3VLForConditionalGeneration" not in {r.architecture for r in architectures.table()}


def test_the_command_line_prints_the_table_and_the_docs_page_adds_the_checks(capsys):
    cli.main(["--list-architectures"])
    printed = capsys.readouterr().out
    assert printed == architectures.markdown()
    page = hf_families.docs_page()
    assert (ROOT / "docs" / "architectures.md").read_text() == page, \
        "regenerate: python -m tests.hf_families > docs/architectures.md"
    # the page's rows are the printed ones, each with its two columns of checks added
    printed_rows = [line for line in printed.splitlines() if line.startswith("| `")]
    page_rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(printed_rows) == len(page_rows) == len(architectures.table())
    assert all(ours.startswith(theirs[:-1]) for theirs, ours in zip(printed_rows, page_rows))


def test_every_family_record_is_one_answer():
    """helpers/job/families.py: no architecture, model type or tiny model in two records; a supported
    family has a tiny model of its own model type, its row, and checks in tests/hf_families.py that
    name the tests its tiny models are checked in; a refused one has only pieces the architecture
    table knows."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    records = families.FAMILIES
    for key in ("architectures", "model_types"):
        listed = [x for f in records for x in getattr(f, key)]
        assert len(listed) == len(set(listed)), key
    assert len(families.TINY) == sum(len(f.tiny) for f in records)
    for f in records:
        assert all(r.piece in architectures.PIECES for r in f.config_refusals), f.name
        if not f.supported:
            assert all(p in architectures.PIECES for p in f.missing) and not f.tiny, f.name
            continue
        checked = hf_families.CHECKED[f.name]
        assert f.tiny and f.exercises and checked.layouts and checked.tests, f.name
        assert set(checked.parity) | set(checked.trained) <= {tiny.name for tiny in f.tiny}, f.name
        patterns = re.findall(re.escape(hf_families.HF_IMPORT_TEST) + r"\[([^]]+)\]", checked.tests)
        for tiny in f.tiny:
            model_type = getattr(transformers, tiny.config_class).model_type
            assert model_type in f.model_types and MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type] in f.architectures
            assert tiny.name not in checked.parity or any(fnmatch.fnmatch(f"{tiny.name}-tp1", p) for p in patterns), \
                tiny.name
            assert tiny.name not in checked.trained or f"{hf_families.TRAIN_TEST}[{tiny.name}]" in checked.tests, \
                tiny.name
    assert set(hf_families.CHECKED) == {f.name for f in records if f.supported}


def _defined_tests(path: Path) -> set[str]:
    return {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}


def test_every_named_test_exists():
    for row in architectures.table():
        for test in hf_families.row_checks(row)[1].split(", "):
            file, _, rest = test.partition("::")
            assert rest.split("[")[0] in _defined_tests(ROOT / file), row


@pytest.mark.parametrize("arch", sorted(architectures.REFUSED))
def test_refused_before_start(arch, tmp_path):
    found = hf_model.problems(folder(tmp_path / arch, {**DENSE, "architectures": [arch]}))
    pieces = [architectures.PIECES[p] for p in architectures.REFUSED[arch].pieces]
    assert [v.name for v in found] == [f"hf_missing_{p.name}" for p in pieces]
    for v, piece in zip(found, pieces):
        assert arch in v.message and architectures.REFUSED[arch].family in v.message and piece.what in v.message
        assert v.fix == piece.fix


def test_a_refused_folder_starts_no_process(tmp_path):
    hf = folder(tmp_path / "next", {**DENSE, "architectures": ["Qwen3NextForCausalLM"]})
    with pytest.raises(launch.InvalidJob, match=r"hf_missing_linear_attention.*gated delta-net"):
        launch.run(hf_model=hf, out=str(tmp_path / "runs"), device="cpu", progress=False)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_multi_token_prediction_layers_are_refused_by_name(tmp_path):
    config = {**DENSE, "architectures": ["DeepseekV2ForCausalLM"], "num_nextn_predict_layers": 1}
    assert [v.name for v in hf_model.problems(folder(tmp_path / "mtp", config))] == [
        "hf_missing_multi_token_prediction"]
    assert hf_model.problems(folder(tmp_path / "none", {**config, "num_nextn_predict_layers": 0})) == []


def test_hunyuan_v3_without_first_k_dense_replace_is_refused_by_name(tmp_path):
    """Bridge 0.6.2's bridge reads a field transformers 5.12.1's config does not write."""
    config = {**DENSE, "architectures": ["HYV3ForCausalLM"], "mlp_layer_types": ["dense", "sparse"]}
    found = hf_model.problems(folder(tmp_path / "hy", config))
    assert [v.name for v in found] == ["hf_missing_first_k_dense_replace"] and "mlp_layer_types" in found[0].fix
    assert hf_model.problems(folder(tmp_path / "hy1", {**config, "first_k_dense_replace": 1})) == []


def test_a_vision_model_and_an_unknown_one_are_told_apart(tmp_path):
    vl = hf_model.problems(folder(tmp_path / "vl", {**DENSE, "architectures": ["Qwen3VLForConditionalGeneration"]}))
    unknown = hf_model.problems(folder(tmp_path / "u", {**DENSE, "architectures": ["NoSuchForCausalLM"]}))
    assert [v.name for v in vl] == [v.name for v in unknown] == ["hf_architecture_not_built"]
    assert "vision/audio" in vl[0].message and "not one Megatron-Bridge maps" in unknown[0].message


def test_gemma3_outside_bridge_s_layer_pattern_is_refused_by_name(tmp_path):
    """Megatron-Bridge 0.6.2 builds every Gemma 3 with five sliding-window layers to one full one
    (its provider's interleaved_attn_pattern), whatever config.json's layer_types say."""
    bridge_s = ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 2
    config = {**DENSE, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
              "num_hidden_layers": 8, "layer_types": bridge_s}
    assert hf_model.problems(folder(tmp_path / "ok", config)) == []
    other = ["sliding_attention", "full_attention"] * 4  # Gemma 2's alternation
    found = hf_model.problems(folder(tmp_path / "alt", {**config, "layer_types": other}))
    assert [v.name for v in found] == ["hf_missing_layer_pattern"] and "five sliding-window" in found[0].message
    embedding = hf_model.problems(folder(tmp_path / "bi", {**config, "use_bidirectional_attention": True}))
    assert [v.name for v in embedding] == ["hf_missing_bidirectional_attention"]
