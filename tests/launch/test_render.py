"""msopt.launch.render's argv helpers."""

from __future__ import annotations

from msopt.launch.render import drop_flags


def test_drop_flags_removes_both_spellings_and_says_where_the_last_stood() -> None:
    argv = ["serve", "--dp-size", "2", "--tp-size=4", "--port", "80", "--enable-dp-attention"]
    out, at = drop_flags(argv, ("--dp-size", "--enable-dp-attention"), bare=("--enable-dp-attention",))
    assert out == ["serve", "--tp-size=4", "--port", "80"]
    assert at == 4  # --enable-dp-attention stood after --port 80
    out, at = drop_flags(argv, ("--tp-size",))
    assert out == ["serve", "--dp-size", "2", "--port", "80", "--enable-dp-attention"] and at == 3


def test_drop_flags_without_the_flags_keeps_argv() -> None:
    assert drop_flags(["a", "--b", "1"], ("--c",)) == (["a", "--b", "1"], None)


def test_a_flag_not_declared_bare_takes_the_next_item_as_its_value() -> None:
    assert drop_flags(["--headless", "--x", "1"], ("--headless",))[0] == ["1"]
    assert drop_flags(["--headless", "--x", "1"], ("--headless",), bare=("--headless",))[0] == ["--x", "1"]
