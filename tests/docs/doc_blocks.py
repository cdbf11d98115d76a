"""The code blocks of README.md and docs/*.md, and how each is tested.

Every fenced block is run or checked by ``tests/docs/test_docs.py``; an HTML comment right before
a block (invisible on GitHub) says how, when the language alone does not::

    <!-- test: file=mymodel.py -->          the block is that file of the page's project
    <!-- test: output -->                   the block is the output of the command before it
    <!-- test: slow -->                     the page's scenario runs under ``pytest -m slow``
    <!-- test: requires=gpu -->             needs a machine this test run lacks (skipped, reason given)
    <!-- test: checked-by=NAME -->          a named test checks it (C++ compiled against the headers...)
    <!-- test: id=NAME -->                  other tests find the block by its id
    <!-- test: append=mymodel.toml -->      the block is added to the end of that file
    <!-- test: scenario=NAME -->            starts a new scenario: a fresh copy, the next blocks run there

Languages: ``sh`` (each line a command, run in the page's project), ``python`` (run), ``toml``
(a manifest: with ``file=`` written there, else validated against the manifest's model and
JSON Schema), ``text`` (with ``output``: its lines must appear in the command's output, in order;
``*`` matches anything), ``yaml`` (parsed), ``cpp`` (``checked-by``). A page's blocks run in order,
in one copy of the repository (its tracked files), with ``.venv`` linked in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
LANGUAGES = ("sh", "python", "toml", "text", "yaml", "cpp")
_FENCE = re.compile(r"^```([\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*test:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The fence's line number (1-based)."""
    language: str
    text: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def slow(self) -> bool:
        return "slow" in self.directives

    @property
    def scenario(self) -> str | None:
        return self.directives.get("scenario")

    def commands(self) -> list[str]:
        """An ``sh`` block's commands: its lines, a trailing backslash joining the next."""
        commands, pending = [], ""
        for raw in self.text.splitlines():
            line = raw.rstrip()
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if line and not line.startswith("#"):
                commands.append(line)
        return commands


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, with the directives of the comment just before each."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start = index
        end = next((j for j in range(index + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        if end is None:
            raise ValueError(f"{page}:{start + 1}: a code block is never closed")
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        directive = _DIRECTIVE.match(lines[before]) if before >= 0 else None
        found.append(Block(page, start + 1, match[1], "\n".join(lines[start + 1:end]) + "\n",
                           _parse(directive[1]) if directive else {}))
        index = end + 1
    return found


def _parse(text: str) -> dict[str, str]:
    directives = {}
    for word in text.split(";"):
        word = word.strip()
        if word:
            key, _, value = word.partition("=")
            directives[key.strip()] = value.strip()
    return directives


def scenarios() -> dict[str, list[Block]]:
    """Each page's blocks, split where a block starts a scenario: ``README.md`` or ``docs/x.md#name`` -> blocks."""
    found: dict[str, list[Block]] = {}
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        for block in blocks(page):
            if block.scenario:
                name = f"{page.relative_to(ROOT)}#{block.scenario}"
            found.setdefault(name, []).append(block)
    return found


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


def block_by_id(name: str) -> Block:
    [found] = [b for b in all_blocks() if b.directives.get("id") == name]
    return found


def output_matches(expected: str, actual: str) -> bool:
    """True if every line of ``expected`` appears in ``actual``, in order (``*``: any text)."""
    lines = [line.rstrip() for line in actual.splitlines()]
    position = 0
    for want in (line.rstrip() for line in expected.splitlines() if line.strip()):
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("*")))
        while position < len(lines) and not pattern.fullmatch(lines[position]):
            position += 1
        if position == len(lines):
            return False
        position += 1
    return True
