"""A Hugging Face import request: the folder itself (helpers/job/hf_model.py `problems`), its
tensors' shapes against the model its config.json describes (helpers/job/hf_shapes.py) and what
goes with it: export_hf needs hf_model and the tokenizer in its folder; an eval_only export writes
one checkpoint; model_overrides change presets, not an imported config. Category "hf"."""
from __future__ import annotations

from helpers.job import hf_model, hf_shapes
from helpers.job.violation import Found, Violation


def check(spec, folder: hf_model.Folder | None = None) -> list[Violation]:
    """`folder`: spec.hf_model as hf_model.read found it (None: read it here)."""
    v = Found("hf")
    if spec.export_hf and not spec.hf_model:
        v.add("export_needs_hf_model", "export_hf writes an imported model back to Hugging Face format: it needs "
              "hf_model", "set hf_model to the folder the model was imported from, or drop export_hf")
    if not spec.hf_model:
        return v
    if spec.model_overrides:
        v.add("hf_model_no_overrides", "model_overrides change a preset; an hf_model's architecture comes from its "
              "config.json", "edit and re-save the HF model instead, or drop model_overrides")
    folder = folder or hf_model.read(spec.hf_model)
    if folder.problems:
        return v + list(folder.problems)
    v += hf_shapes.problems(folder)
    if spec.export_hf and spec.eval_only and len(spec.load_paths()) != 1:
        v.add("export_one_checkpoint", "export_hf with eval_only writes one checkpoint back to Hugging Face format, "
              f"but load_dir names {len(spec.load_paths())}", "give exactly one load_dir")
    if spec.export_hf and not hf_model.has_tokenizer(spec.hf_model):
        v.add("export_needs_tokenizer", f"export_hf needs the tokenizer in the hf_model folder {spec.hf_model} "
              "(Megatron-Bridge writes it into the export)", "save one there with tokenizer.save_pretrained(folder)")
    return v
