"""site/build.py, the lessons as web pages: what a reader must not see is taken out of an executed
lesson before it is rendered (papermill's injected answers, the outputs of exercise checks, widgets
that need a live kernel), the pictures a page must show are counted for the browser check, and
without executed lessons the build stops and says how to make them. The rendering and the browser
check run with `make site` and `make site-check` (site/README.md)."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("site_build", ROOT / "site" / "build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)

PNG = {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}, "metadata": {}}
WIDGET = {"output_type": "display_data", "data": {build.WIDGET: {"model_id": "x"}, "text/plain": "VBox()"},
          "metadata": {}}


def code(source, outputs=(), tags=()):
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": source, "outputs": list(outputs),
            "execution_count": 1}


def executed_lesson():
    return {"metadata": {"widgets": {"state": {}}}, "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": "# 03 · A lesson\n\n**Assumes:** nothing.\n"},
        code("answer = None  # your number", tags=["parameters"]),
        code("# Parameters\nanswer = 54\n", tags=["injected-parameters"]),
        code("plot()", [PNG]),
        code("if exercises.check_answer(answer, 54):\n    plot()",
             [{"output_type": "stream", "name": "stdout", "text": "correct: 54\n"}, PNG]),
        code("progress()", [WIDGET]),
    ]}


def test_a_reader_sees_no_answer_and_no_dead_widget(tmp_path):
    nb = build.for_readers(executed_lesson(), tmp_path, "03_a_lesson.html")
    sources = ["".join(c["source"]) for c in nb["cells"]]
    assert not any("answer = 54" in s for s in sources)  # the injected cell is gone
    check = next(c for c in nb["cells"] if "exercises.check_" in "".join(c["source"]))
    assert [o.get("text") for o in check["outputs"]] == ["(your answer is checked here when you run the lesson)\n"]
    widget = nb["cells"][-1]["outputs"]
    assert [o.get("text") for o in widget] == ["(an interactive widget: run the lesson in JupyterLab to use it)\n"]
    assert "widgets" not in nb["metadata"]
    assert build.pictures(nb) == 1  # the plain plot; the check's picture would give the answer away


def test_the_layout_lab_page_shows_its_screenshots(tmp_path):
    nb = build.for_readers(executed_lesson(), tmp_path, "10_layout_lab.html")
    assert build.pictures(nb) == 1 + len(build.LAYOUT_LAB_SHOTS)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(name for name, _ in build.LAYOUT_LAB_SHOTS)


def test_without_executed_lessons_the_build_says_how_to_make_them(tmp_path):
    with pytest.raises(SystemExit, match="make test"):
        build.build(tmp_path, tmp_path / "html")
