"""report.json (the smoke-test report card the workers write) as plain text: what the command
line prints after a run. The HTML card for notebooks is helpers/views/report_card.py."""
from __future__ import annotations

import json

MARK = {"pass": "PASS", "fail": "FAIL", "skipped": "skipped"}


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
