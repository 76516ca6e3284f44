"""Where a lesson shows an exercise's answer before the learner tried it. An exercise is the first
code cell that calls `exercises.check_<name>(param, ...)`; its answer is the right one the notebook
suite passes for `param` (tests/notebooks/test_notebooks.py ANSWERS). The answer is searched for in
the forms a learner would recognise it by, chosen per type:

- a string of Megatron-LM flags ("--sequence-parallel"): each `--flag`, as a whole word;
- a formula (a string that is a Python expression with an operator, e.g. "(n - 1) / n * (...)"):
  the whole expression and each of its divisions that names a variable ("(n-1)/n"), spaces left out
  and − read as -, × and · as *;
- an integer of four digits or more: the number, also with thousands separators;
- a list of integers (a group of ranks, a list of groups): its literal, spaces left out;
- a single letter or word that the question offers as a choice ("A", "alltoall"): skipped, since the
  question names every choice; lists of such letters, and dicts of such names (10's refusing rules,
  chosen from the rules the question lists), likewise;
- a whole command line (20's `megatron_command`): skipped, since the lesson must give the job's
  model flags itself, and several commands pass;
- a written layout (11's `my_layout`, a dict of sizes): skipped, since several layouts pass and the
  lesson names every size it is made of;
- a decision of the run the lessons build from 03 on (a check in DECISIONS: flags for 4 processes,
  a memory budget, a bubble target): skipped, since its flags are the ones the lessons before it
  taught, several answers pass, and the check grades what the job did, not the words;
- integers below 1000, floats, booleans (and lists of them): skipped: such values are every
  lesson's sizes, counts and ranks, and often a given of the question itself (15's answer, the rows
  of a fused SwiGLU input split over TP=2, equals the model's FFN width, which the question tells the
  learner to read); a fraction prints in many forms (0.2, 20%, 1/5). A search would find them where
  they do not answer anything.

What gives the skipped answers away (a ranking, a table of endings, a formula for a fraction) is
printed under `exercises.shown(...)` after the check; test_exercise_order.py checks those cells."""
from __future__ import annotations

import ast
import re

WORD_FLAG = "(?<![\\w-]){}(?![\\w-])"
NUMBER = "(?<![\\w.,]){}(?![\\w]|[.,]\\d)"


def squeeze(text: str) -> str:
    """Text as the formula and list forms are searched: no whitespace, one spelling per operator."""
    return re.sub(r"\s+", "", text.replace("−", "-").replace("×", "*").replace("·", "*"))


def forms(answer) -> list[tuple[str, re.Pattern]]:
    """(label, pattern) for each recognisable form of `answer`; a pattern marked by a label starting
    with "squeezed:" is searched in `squeeze(text)`. [] when the type is skipped (module docstring)."""
    if isinstance(answer, bool) or isinstance(answer, float) or answer is None:
        return []
    if isinstance(answer, int):
        if answer < 1000:
            return []
        spelled = {str(answer), f"{answer:,}"}
        return [(s, re.compile(NUMBER.format(re.escape(s)))) for s in sorted(spelled)]
    if isinstance(answer, str):
        words = answer.split()
        if words and words[0].startswith("--"):
            flags = [w for w in words if w.startswith("--")]
            return [(f, re.compile(WORD_FLAG.format(re.escape(f)))) for f in flags]
        if len(words) > 1 and not words[0].startswith("--") and any(w.startswith("--") for w in words):
            return []  # a whole command line
        try:
            tree = ast.parse(answer, mode="eval").body
        except SyntaxError:
            return []
        if not isinstance(tree, ast.BinOp):
            return []  # a single name or letter: one of the choices the question offers
        parts = [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)
                          and any(isinstance(x, ast.Name) for x in ast.walk(n))]
        shown = dict.fromkeys(squeeze(ast.unparse(p)) for p in parts)
        return [(f"squeezed:{s}", re.compile(re.escape(s))) for s in shown]
    if isinstance(answer, list):
        if answer and all(isinstance(a, list) or (isinstance(a, int) and not isinstance(a, bool)) for a in answer):
            literal = squeeze(repr(answer))
            return [(f"squeezed:{literal}", re.compile(f"(?<![\\d,]){re.escape(literal)}(?![\\d,])"))]
        return []  # letters: the choices the question offers
    return []  # a dict of names (10's refusing rules) or of sizes (11's layout): see the module docstring


DECISIONS = {"check_run_on_more_gpus", "check_recompute_budget", "check_bubble_target"}


def check_calls(source: str, checks=None) -> list[str]:
    """The parameters a code cell's `exercises.check_<name>(param, ...)` calls are given, in order
    (only those of the checks named in `checks`, when given)."""
    if "check_" not in source:
        return []
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    params = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr.startswith("check_") and getattr(node.func.value, "id", None) == "exercises":
            assert node.args and isinstance(node.args[0], ast.Name), \
                f"{node.func.attr}'s first argument must be the parameter holding the answer"
            if checks is None or node.func.attr in checks:
                params.append(node.args[0].id)
    return params


def decisions(cells: list[dict]) -> set[str]:
    """The parameters of the lesson's decisions (DECISIONS), whose answers are not searched."""
    return {p for cell in cells if cell["cell_type"] == "code" for p in check_calls(_source(cell), DECISIONS)}


def exercise_cells(cells: list[dict]) -> dict[str, int]:
    """{parameter: index of the first cell that checks it}."""
    found = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            for param in check_calls(_source(cell)):
                found.setdefault(param, i)
    return found


def _source(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def output_text(cell: dict) -> str:
    """What a code cell's stored outputs show as text (images left out: base64 holds any digits)."""
    parts = []
    for o in cell.get("outputs", []):
        text = o.get("text")
        if text is not None:
            parts.append(text if isinstance(text, str) else "".join(text))
        for mime, value in o.get("data", {}).items():
            if mime.startswith("text/"):
                parts.append(value if isinstance(value, str) else "".join(value))
    return "\n".join(parts)


def _hits(text: str, patterns: list[tuple[str, re.Pattern]]) -> list[str]:
    squeezed = None
    found = []
    for label, pattern in patterns:
        if label.startswith("squeezed:"):
            squeezed = squeeze(text) if squeezed is None else squeezed
            if pattern.search(squeezed):
                found.append(label.split(":", 1)[1])
        elif pattern.search(text):
            found.append(label)
    return found


def shown_before_asked(cells: list[dict], lesson_answers: dict) -> list[str]:
    """Where a lesson shows an exercise's answer before its check: "param: cell i source|output: form"
    for each cell before the check whose source or stored outputs hold a form of the answer, and for
    the check cell's own source (its hint); the check cell's outputs are the verdict, given after the
    attempt, and are not searched, nor is the cell papermill adds to an executed copy with the
    parameters it was given."""
    at = exercise_cells(cells)
    missing = sorted(set(lesson_answers) - set(at))
    assert not missing, f"answers with no check cell: {missing}"
    found = []
    skipped = decisions(cells)
    for param, k in at.items():
        if param in skipped:
            continue
        patterns = forms(lesson_answers[param])
        for i, cell in enumerate(cells[:k + 1]):
            if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
                continue  # papermill's copy of the parameters a run was given: the answers themselves
            found += [f"{param}: cell {i} source: {f}" for f in _hits(_source(cell), patterns)]
            if i < k:
                found += [f"{param}: cell {i} output: {f}" for f in _hits(output_text(cell), patterns)]
    return found


def named_in_source(cells: list[dict], lesson_answers: dict) -> list[str]:
    """Where any cell's source, before or after the check, holds a form of an answer: a learner reads
    every cell's source whether it ran or not, so the answer is printed from the run (under
    `exercises.shown`), never written into a cell."""
    skipped = decisions(cells)
    return [f"{param}: cell {i}: {f}" for param in lesson_answers if param not in skipped
            for i, cell in enumerate(cells) for f in _hits(_source(cell), forms(lesson_answers[param]))]
