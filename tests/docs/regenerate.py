"""Rewrite the outputs the docs show from the commands that print them:

    .venv/bin/python -m tests.docs.regenerate [PAGE ...]

runs every documented command as tests/docs/test_examples.py does (in one scratch
folder, in order) and, for each whose rule checks its output, replaces each shown line
by the printed line with the same label (the text before the first run of two spaces;
a table's header by its first word), so trimmed tables stay trimmed. A shown line with
no printed counterpart is left for the test to report. Never type a figure by hand."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from tests.docs import test_examples as t
from tests.docs.examples import ROOT


def label(line: str) -> str:
    return re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]


def regenerate(pages: set[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in (
            "scenarios",
            "validation",
            "tests",
            "bench",
            "backend",
            "sim",
            "policies",
            ".venv",
            "Makefile",
            "pyproject.toml",
        ):
            (work / name).symlink_to(ROOT / name)
        t._stand_ins(work)
        servers: list[subprocess.Popen] = []
        changes: dict[str, list[tuple[str, str]]] = {}
        try:
            for example in t.EXAMPLES:
                rule = t.rule_of(example)
                if rule is None or rule.kind in ("elsewhere", "nightly"):
                    continue
                printed = t.run_example(example, rule, work, servers)
                if rule.output and example.output and (not pages or example.page in pages):
                    changes.setdefault(example.page, []).append((example.output, printed))
        finally:
            t.stop(servers)
    for page, pairs in changes.items():
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        for shown, printed in pairs:
            text = _rewritten(text, shown, _matched(shown, printed), page)
        path.write_text(text, encoding="utf-8")
        print(f"rewrote {len(pairs)} output(s) in {page}")


def _rewritten(text: str, shown: str, new: str, page: str) -> str:
    """``text`` with the shown output replaced by ``new``, at the indentation the page
    gives it (a block inside a list item is indented). Exits naming the page when the
    shown output cannot be found: an output left as it was would fail the docs test."""
    if shown in text:
        return text.replace(shown, new, 1)
    first = shown.splitlines()[0]
    found = re.search(r"^( +)" + re.escape(first) + r"$", text, re.M)
    for blank_lines in (None, lambda line: True):  # blank lines bare, or indented too
        indented = found and textwrap.indent(shown, found[1], blank_lines)
        if indented and indented in text:
            return text.replace(indented, textwrap.indent(new, found[1], blank_lines), 1)
    sys.exit(f"{page}: cannot find a shown output to rewrite (it starts {first!r})")


def _matched(shown: str, printed: str) -> str:
    """``shown`` with each line replaced by the printed line of its label; the printed
    output whole when most shown lines have no label of their own (an example, a log)."""
    labels = [label(line) for line in shown.splitlines() if line.strip()]
    printed_labels = {label(line) for line in printed.splitlines()}
    if sum(key in printed_labels for key in labels) < len(labels) / 2:
        return printed.strip("\n")
    by_label = {}
    for line in printed.splitlines():
        by_label.setdefault(label(line), line.rstrip())
    out = []
    for line in shown.splitlines():
        key = label(line)
        out.append(by_label.get(key, line) if line.strip() and not key.startswith("(") else line)
    return "\n".join(out)


if __name__ == "__main__":
    regenerate(set(sys.argv[1:]))
