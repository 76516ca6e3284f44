"""The smoke-test report card on the notebook side: read a run's report.json and show its eight
checks as a table (HTML in a notebook, plain text elsewhere). The checks and their evidence are
written by the workers (helpers/runtime/report.py)."""
from __future__ import annotations

import html
import json

from helpers.results import RunDir

MARK = {"pass": "PASS", "fail": "FAIL", "skipped": "skipped"}
COLOR = {"pass": "#1a7f37", "fail": "#cf222e", "skipped": "#6e7781"}


def load(run) -> dict:
    """The report of a RunDir (or a run directory path); a clear error when there is none."""
    run = run if isinstance(run, RunDir) else RunDir(run)
    report = run.report
    if report is None:
        raise FileNotFoundError(f"{run.path} has no report.json (the job did not reach its process groups)")
    return report


def evidence_text(evidence, limit: int = 240) -> str:
    """One line of evidence: strings as they are, dicts as compact key: value pairs."""
    if isinstance(evidence, str):
        text = evidence
    elif isinstance(evidence, dict):
        parts = []
        for k, v in evidence.items():
            if isinstance(v, dict) and len(json.dumps(v)) > 60:
                v = "{" + ", ".join(f"{a}: {_short(b)}" for a, b in list(v.items())[:4]) + (
                    ", ..." if len(v) > 4 else "") + "}"
            parts.append(f"{k}: {_short(v)}")
        text = "; ".join(parts)
    else:
        text = json.dumps(evidence)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, str) and len(v) > 20 and all(c in "0123456789abcdef" for c in v):
        return v[:10] + "..."  # a hash
    if isinstance(v, dict):
        return "{" + ", ".join(f"{a}: {_short(b)}" for a, b in v.items()) + "}"
    return str(v)


def rows(report: dict) -> list[tuple[str, str, str]]:
    return [(c["title"], c["status"], evidence_text(c["evidence"])) for c in report["checks"]]


def text(report: dict) -> str:
    width = max(len(t) for t, _, _ in rows(report))
    head = f"report card: layout {report['layout']}, data {report['data']} -> " \
           f"{'PASSED' if report['passed'] else 'FAILED'} {report['summary']}"
    return "\n".join([head] + [f"  {t:<{width}}  {MARK[s]:<7}  {e}" for t, s, e in rows(report)])


def to_html(report: dict) -> str:
    cells = "".join(
        f"<tr><td style='text-align:left'>{html.escape(t)}</td>"
        f"<td style='color:{COLOR[s]};font-weight:bold'>{MARK[s]}</td>"
        f"<td style='text-align:left;font-family:monospace;font-size:85%'>{html.escape(e)}</td></tr>"
        for t, s, e in rows(report))
    verdict = "PASSED" if report["passed"] else "FAILED"
    return (f"<p><b>Smoke-test report card</b>: layout <code>{html.escape(report['layout'])}</code>, "
            f"data <code>{html.escape(report['data'])}</code>: <b>{verdict}</b> {report['summary']}</p>"
            f"<table><tr><th>check</th><th>status</th><th>evidence</th></tr>{cells}</table>")


def show(run) -> dict:
    """Display the card (HTML in Jupyter, text otherwise) and return the report."""
    report = load(run)
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
        if get_ipython() is not None:
            display(HTML(to_html(report)))
            return report
    except ImportError:
        pass
    print(text(report))
    return report
