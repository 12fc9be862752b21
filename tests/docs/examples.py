"""The shell commands the documentation shows: every fenced or indented code block of
README.md and docs/ read as a shell session, backslash continuations joined, comments
and shown output left out. A line is a command when it starts with a program a reader
runs from the checkout (``.venv/bin/...``, ``make``, ``for``, a variable assignment)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: What a command line starts with (after an optional ``$ `` prompt).
COMMAND = re.compile(
    r"^(\$ )?(\.venv/bin/|make |for |sc=|HYPOTHESIS_PROFILE=|git worktree |"
    r"/usr/bin/time |until |pagesim [a-z][a-z-]*( |$))"
)

#: Code blocks in these languages are files or synopses, not shell sessions.
NOT_SHELL = ("yaml", "json", "python", "text")


@dataclass(frozen=True)
class Example:
    page: str  # the file, relative to the checkout
    line: int  # where the command starts (1-based)
    command: str  # continuations joined, the prompt and a trailing comment removed
    output: str  # the block's lines that follow it up to the next command (may be empty)


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples(page: Path) -> list[Example]:
    """Every command of ``page``'s code blocks, in order. A block's last command with no
    output after it takes its output from the next block when that block holds no
    command and follows within a short sentence (``make run`` ... "prints:" ...)."""
    found: list[Example] = []
    blocks = list(_blocks(page.read_text(encoding="utf-8").splitlines()))
    for k, (start, block) in enumerate(blocks):
        commands = _commands(page, start, block)
        if commands and not commands[-1].output and k + 1 < len(blocks):
            next_start, next_block = blocks[k + 1]
            near = next_start - (start + len(block)) <= 7
            if near and not _commands(page, next_start, next_block):
                last = commands[-1]
                commands[-1] = Example(
                    last.page, last.line, last.command, "\n".join(next_block).strip("\n")
                )
        found += commands
    return found


def _blocks(lines: list[str]):
    """(first line number, lines) of each fenced block and each 4-space indented block."""
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith("```"):
            indent = len(line) - len(stripped)
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            if stripped[3:].strip() not in NOT_SHELL:
                yield i + 2, [x[indent:] for x in lines[i + 1 : j]]
            i = j + 1
        elif line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            yield i + 1, [x[4:] for x in lines[i:j]]
            i = j
        else:
            i += 1


def _commands(page: Path, start: int, block: list[str]) -> list[Example]:
    found: list[Example] = []
    i = 0
    while i < len(block):
        line = block[i]
        if not COMMAND.match(line):
            i += 1
            continue
        first = i
        parts = [_uncommented(line.removeprefix("$ "))]
        while i + 1 < len(block) and (parts[-1].endswith("\\") or _open(parts)):
            i += 1
            if parts[-1].endswith("\\"):
                parts[-1] = parts[-1][:-1].rstrip() + " " + _uncommented(block[i].strip())
            else:
                parts.append(_uncommented(block[i].strip()))
        i += 1
        output = []
        while i < len(block) and not COMMAND.match(block[i]):
            output.append(block[i])
            i += 1
        command = "\n".join(p.strip() for p in parts)
        rel = str(page.relative_to(ROOT))
        found.append(Example(rel, start + first, command, "\n".join(output).strip("\n")))
    return found


def _uncommented(line: str) -> str:
    """``line`` without a trailing ``# comment`` (one outside quotes)."""
    return re.sub(r"\s+#[^'\"]*$", "", line).rstrip()


def _open(parts: list[str]) -> bool:
    """Whether a shell loop begun in ``parts`` is still open (more ``do`` than ``done``),
    or the lines end in a variable assignment that the next line uses."""
    words = " ".join(parts).replace(";", " ; ").split()
    return words.count("do") > words.count("done") or bool(re.match(r"^\w+=\S+$", parts[-1]))


def all_examples() -> list[Example]:
    return [example for page in doc_pages() for example in examples(page)]
