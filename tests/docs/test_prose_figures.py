"""Figures the docs' prose quotes from a shown output block are checked against it.

A paragraph that quotes figures of the output shown above it says which, in a comment
the site does not render, right after it:

    <!-- figures: 155 = preemptions[1]; 1.19x = steady throughput req/s[1] / steady
    throughput req/s[2] -->

Each claim (text as the prose writes it) must appear in the paragraph, and its number
must be the expression over the nearest output block above (``ROW[k]``: row ``ROW``'s
k-th cell, 1 for the first after the label), rounded as the prose rounds it. The shown
blocks are themselves checked against what the commands print (test_examples.py), so a
figure that goes stale in a run goes stale here too, and the test says where.
"""

from __future__ import annotations

import re

import pytest

from tests.docs.examples import ROOT, doc_pages, examples

COMMENT = re.compile(r"<!-- figures: (.*?) -->", re.S)
REFERENCE = re.compile(r"([A-Za-z][^\[\]]*?)\[(\d+)\]")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def claims() -> list[tuple[str, int, str, str]]:
    """(page, line, claim, expression) of every figures comment."""
    found = []
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        for match in COMMENT.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            for item in match[1].split(";"):
                claim, _, expression = (" ".join(item.split())).partition("=")
                found.append((str(page.relative_to(ROOT)), line, claim.strip(), expression))
    return found


def table(output: str) -> dict[str, list[str]]:
    """An output block's rows: the label, then the cells (two or more spaces apart)."""
    rows = {}
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) > 1:
            rows.setdefault(cells[0], cells[1:])
    return rows


def number(text: str) -> tuple[float, int]:
    """The first number of ``text`` and its decimals."""
    found = NUMBER.search(text)
    assert found, f"no number in {text!r}"
    digits = found[0].replace(",", "")
    return float(digits), len(digits.partition(".")[2])


def evaluate(expression: str, rows: dict[str, list[str]]) -> float:
    def cell(match: re.Match) -> str:
        label, index = match[1].strip(), int(match[2])
        assert label in rows, f"no row {label!r} in the output above"
        return repr(number(rows[label][index - 1])[0])

    arithmetic = REFERENCE.sub(cell, expression)
    assert re.fullmatch(r"[\d.eE+\-*/() ]+", arithmetic), arithmetic
    return float(eval(arithmetic))  # digits and operators only (checked above)


CLAIMS = claims()


def test_the_docs_quote_figures_through_the_checked_comment():
    assert len(CLAIMS) >= 10  # the mechanism is in use, not only defined


@pytest.mark.parametrize(("page", "line", "claim", "expression"), CLAIMS)
def test_a_quoted_figure_is_the_one_shown_above(page, line, claim, expression):
    text = (ROOT / page).read_text(encoding="utf-8")
    lines = text.splitlines()
    start = line - 1
    while start > 0 and lines[start - 1].strip():
        start -= 1  # the paragraph the comment follows
    paragraph = " ".join(lines[start : line - 1] + [lines[line - 1].split("<!--")[0]])
    assert claim in " ".join(paragraph.split()), f"{page}:{line}: {claim!r} is not in the prose"
    shown = [e for e in examples(ROOT / page) if e.line < line and e.output]
    assert shown, f"{page}:{line}: no output block above"
    value = evaluate(expression, table(shown[-1].output))
    quoted, decimals = number(claim)
    assert round(value, decimals) == pytest.approx(quoted), (
        f"{page}:{line}: the prose says {claim!r}; the output above gives {value:.6g}"
    )
