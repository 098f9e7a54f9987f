"""Issue 36 item 13: the Chinese README.zh.md and docs/zh/migrating.md stay in step with the English ones:
the same commands, flags and keys."""

from __future__ import annotations

import re
from pathlib import Path

from msopt.cli.main import build_parser
from msopt.config import read_toml
from tests.config.test_original_config import ORIGINAL_FLAGS, ORIGINAL_SETTINGS, _keys, original

ROOT = Path(__file__).parents[2]


def _read(*parts: str) -> str:
    return ROOT.joinpath(*parts).read_text(encoding="utf-8")


def _subcommands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return set(sub.choices)


def _commands(text: str) -> set[str]:
    known = _subcommands()
    return {m for m in re.findall(r"msopt ([a-z][a-z-]*)", text) if m in known}


def _flags(text: str) -> set[str]:
    return set(re.findall(r"`(--?[a-zA-Z][\w-]*)", text))


def _present(words: set[str] | tuple[str, ...], doc: str) -> list[str]:
    return sorted(w for w in words if not re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", doc))


def test_zh_migrating_names_the_same_commands_and_flags() -> None:
    en, zh = _read("docs", "migrating.md"), _read("docs", "zh", "migrating.md")
    assert _commands(zh) == _commands(en) and {"optimize", "optimizer", "validate", "calibrate"} <= _commands(en)
    assert _flags(zh) == _flags(en)


def test_zh_migrating_takes_every_key_and_flag_of_the_original() -> None:
    zh = _read("docs", "zh", "migrating.md")
    assert _present(ORIGINAL_FLAGS, zh) == [] and _present(ORIGINAL_SETTINGS, zh) == []


def test_zh_migrating_takes_every_key_of_the_originals_file() -> None:
    zh = _read("docs", "zh", "migrating.md")
    keys = {k.split(".")[-1] for k in _keys(read_toml(original()))}  # skips where ../shared/original is absent
    assert len(keys) > 30 and _present(keys, zh) == []


def test_readme_zh_commands_and_keys_are_the_english_ones() -> None:
    zh = _read("README.zh.md")
    english = _read("README.md") + "".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))
    assert _commands(zh) <= _commands(english) and {"optimize", "validate", "preflight"} <= _commands(zh)
    blocks = re.findall(r"```bash\n(.*?)```", zh, re.S)
    lines = [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip()]
    assert lines and all(ln in english for ln in lines), [ln for ln in lines if ln not in english]
    keys = set(re.findall(r"`([a-z_][a-z0-9_]*)`", zh)) | set(re.findall(r"`\[([a-z_.]+)\]`", zh))
    assert keys and _present(keys, english) == []
    for path in re.findall(r"\]\(([^)#]+)\)", zh):
        assert (ROOT / path).exists(), path
