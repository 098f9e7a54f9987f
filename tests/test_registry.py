"""msopt.registry.Registry's builtin entries: written as entry points are, loaded on the first lookup."""

from __future__ import annotations

import pytest

from msopt.errors import RegistryError
from msopt.registry import Registry


def test_builtin_entries_load_on_the_first_lookup_and_keep_their_names():
    reg: Registry[object] = Registry("thing", builtin={"joined": "os.path:join", "sep": "os:sep"})
    assert reg._items == {}                     # nothing is imported until a lookup
    import os

    assert reg.get("joined") is os.path.join and reg.get("sep") == os.sep
    assert reg.names() == ["joined", "sep"]
    with pytest.raises(RegistryError, match="did you mean 'sep'"):
        reg.get("sepp")


def test_a_builtin_name_cannot_be_registered_again():
    reg: Registry[object] = Registry("thing", builtin={"sep": "os:sep"})
    with pytest.raises(RegistryError, match="'sep' is already registered"):
        reg.register("sep", "/")
