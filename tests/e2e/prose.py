"""How long the sentences and table cells of a Markdown page are, in words (tests/e2e/test_prose.py)."""

from __future__ import annotations

import re

#: A sentence ends at . ! or ? (a closing quote or parenthesis may follow) before a blank, except after an
#: abbreviation that goes on (e.g., i.e., vs., cf.).
_SPLIT = re.compile(r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)(?<!\bcf\.)(?<=[.!?])[)\"']?\s+(?=\S)")


def _plain(text: str) -> str:
    """Inline code spans as one word each, links as their text, emphasis marks dropped."""
    text = re.sub(r"`[^`\n]*`", "CODE", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return text.replace("**", "")


def blocks(text: str) -> tuple[list[str], list[str]]:
    """``(prose units, table cells)`` of a Markdown page: a unit is a paragraph, a list item or a heading; code
    blocks and HTML comments are left out."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    units: list[str] = []
    cells: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            units.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|"):
            flush()
            row = re.sub(r"\\\|", "/", stripped).strip("|")
            cells += [c.strip() for c in row.split("|") if not re.fullmatch(r"\s*:?-+:?\s*", c)]
        elif not stripped:
            flush()
        elif stripped.startswith("#") or re.match(r"([-*+]|\d+\.)\s", stripped):
            flush()
            current.append(re.sub(r"^([-*+#]+|\d+\.)\s*", "", stripped))
        else:
            current.append(stripped)
    flush()
    return units, cells


def sentences(text: str) -> list[str]:
    """Every sentence of the page's prose (paragraphs, list items and headings; not code, not tables)."""
    out: list[str] = []
    for unit in blocks(text)[0]:
        out += [s for s in _SPLIT.split(_plain(unit)) if s.strip()]
    return out


def words(text: str) -> int:
    """Words of a sentence or a cell (an inline code span is one)."""
    return len(_plain(text).split())
