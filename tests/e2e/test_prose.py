"""Docs a newcomer reads in one sitting (issue 50 item 6): no README sentence or table cell over 40 words, no
sentence in docs/ over 60, and the README's Python blocks run as printed."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.e2e import prose, readme

DOCS = readme.REPO / "docs"
README_LIMIT = 40
DOCS_LIMIT = 60
#: Pages of docs/ not yet cut to DOCS_LIMIT, with how many of their sentences are still longer: the count may only
#: fall (a page that reaches 0 leaves this table). Much of benchmarks*.md is written by the bench scripts' templates.
NOT_YET: dict[str, int] = {}


def long_sentences(text: str, limit: int) -> list[str]:
    return [s for s in prose.sentences(text) if prose.words(s) > limit]


def test_readme_sentences_and_cells_are_short():
    text = readme.README.read_text(encoding="utf-8")
    assert long_sentences(text, README_LIMIT) == []
    assert [c for c in prose.blocks(text)[1] if prose.words(c) > README_LIMIT] == []


def test_docs_sentences_are_at_most_60_words():
    found = {p.name: long_sentences(p.read_text(encoding="utf-8"), DOCS_LIMIT) for p in sorted(DOCS.glob("*.md"))}
    over = {name: len(s) for name, s in found.items() if len(s) > NOT_YET.get(name, 0)}
    assert over == {}, "\n".join(s for name in over for s in found[name])
    done = [name for name in NOT_YET if not found.get(name)]
    assert done == [], f"{done}: no sentence over {DOCS_LIMIT} words any more; take them out of NOT_YET"


def test_the_limits_can_fail():
    """The counting sees a long sentence in a paragraph and in a list item, a long cell, and ends a sentence
    where a lower-case one starts (msopt) but not after e.g."""
    long = " ".join(["word"] * 41) + "."
    text = f"# T\n\nShort one. {long} Next.\n\n- item, e.g. this; {long}\n\n| a | b |\n|---|---|\n| {long} | x |\n"
    assert [prose.words(s) for s in long_sentences(text, README_LIMIT)] == [41, 44]
    assert [prose.words(c) for c in prose.blocks(text)[1]] == [1, 1, 41, 1]
    assert prose.sentences("A `code. span` is one word. msopt starts.") == ["A CODE is one word.", "msopt starts."]
    assert prose.sentences("```bash\n" + long + "\n```\n") == []


@pytest.mark.slow
def test_readme_python_blocks_run(tmp_path, monkeypatch):
    """The README's ```python blocks, in order, in one namespace, from a directory holding the repository's
    configs/ (the run directory lands there)."""
    blocks = re.findall(r"```python\n(.*?)```", readme.README.read_text(encoding="utf-8"), flags=re.S)
    assert any("msopt.optimize(" in b for b in blocks)
    os.symlink(readme.REPO / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    result = namespace["result"]
    assert Path(result.run_dir).parent == tmp_path / "msopt_runs"  # type: ignore[attr-defined]
    assert (Path(result.run_dir) / "report.html").is_file()  # type: ignore[attr-defined]
