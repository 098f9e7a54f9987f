"""Every dtype: bounds, decode, encode, round trips and load-time validation."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from msopt.errors import ConfigError, RegistryError
from msopt.registry import Registry
from msopt.space import DTYPES

from .helpers import PP, TP, space_of, tern

#: One valid field list per registered dtype, with the values to round-trip.
EXAMPLES = {
    "int": ([dict(name="x", min=3, max=9, dtype="int")], [{"x": 3}, {"x": 6}, {"x": 9}]),
    "float": ([dict(name="x", min=0.1, max=0.9, dtype="float")], [{"x": 0.1}, {"x": 0.37}, {"x": 0.9}]),
    "bool": ([dict(name="x", min=0, max=1, dtype="bool")], [{"x": True}, {"x": False}]),
    "enum": ([dict(name="x", min=0, max=1, dtype="enum", dtype_param=["a", "b; touch pwned", "$(id)"])],
             [{"x": "a"}, {"x": "b; touch pwned"}, {"x": "$(id)"}]),
    "range": ([dict(name="x", min=0, max=1000, dtype="range", dtype_param=10)], [{"x": 0}, {"x": 990}, {"x": 1000}]),
    "ratio": ([dict(name="m", min=10, max=1000, dtype="int"),
               dict(name="x", min=0.1, max=0.7, dtype="ratio", dtype_param="m")],
              [{"m": 10, "x": 1}, {"m": 999, "x": 300}, {"m": 1000, "x": 700}, {"m": 37, "x": 25}]),
    "share": ([dict(name="m", min=10, max=100, dtype="int"),
               dict(name="x", min=0, max=0, dtype="share", dtype_param="m")], [{"m": 10, "x": 100}, {"m": 60, "x": 50}]),
    "factories": ([dict(name="m", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4]),
                   dict(name="x", min=0, max=0, dtype="factories",
                        dtype_param={"target_name": "m", "product": 8, "dtype": "int"})],
                  [{"m": 1, "x": 8}, {"m": 4, "x": 2}]),
    "times": ([dict(name="m", min=1, max=5, dtype="int"),
               dict(name="x", min=0, max=0, dtype="times",
                    dtype_param={"target_name": "m", "product": 3, "dtype": "int"})], [{"m": 1, "x": 3}, {"m": 5, "x": 15}]),
    "ternary_factories": ([TP, PP, tern(16)], [{"tp": 8, "pp": 2, "dp": 1}, {"tp": 1, "pp": 4, "dp": 4}]),
    "ternary_times": ([dict(name="a", min=1, max=4, dtype="int"), dict(name="b", min=1, max=3, dtype="int"),
                       dict(name="x", min=0, max=0, dtype="ternary_times",
                            dtype_param={"target_names": ["a", "b"], "product": 2})],
                      [{"a": 1, "b": 1, "x": 2}, {"a": 4, "b": 3, "x": 24}]),
}


def test_every_registered_dtype_has_an_example():
    assert set(EXAMPLES) == set(DTYPES.names())


@pytest.mark.parametrize("dtype", sorted(EXAMPLES))
def test_round_trip(dtype):
    fields, cases = EXAMPLES[dtype]
    space = space_of(*fields)
    for values in cases:
        pos = space.encode(values)
        assert space.decode(pos).values == values
        low, high = space.bounds
        assert np.all(pos >= low) and np.all(pos <= high)


@pytest.mark.parametrize("dtype", sorted(EXAMPLES))
def test_decode_in_bounds_everywhere(dtype):
    fields, _ = EXAMPLES[dtype]
    space = space_of(*fields)
    low, high = space.bounds
    for x in np.linspace(low - 1, high + 1, 41):
        d = space.decode(x)
        again = space.decode(d.position)
        assert again.values == d.values


def test_int_equal_shares_and_clamped():
    space = space_of(dict(name="x", min=1, max=4, dtype="int"))
    low, high = space.bounds
    assert (low[0], high[0]) == (0.5, 4.5)
    xs = np.linspace(low[0], high[0], 4001)[:-1]
    counts = {v: 0 for v in range(1, 5)}
    for x in xs:
        counts[space.decode([x]).values["x"]] += 1
    assert max(counts.values()) - min(counts.values()) <= 2  # each integer owns a quarter
    assert space.decode([1e9]).values["x"] == 4 and space.decode([-1e9]).values["x"] == 1
    assert space.decode([float("nan")]).values["x"] in range(1, 5)


def test_encoding_never_changes_the_declaration():
    space = space_of(dict(name="x", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4]))
    before = space.field_type("x").decl.dtype_param.copy()
    assert space.decode(space.encode({"x": 3})).values["x"] in (2, 4)  # nearest, not inserted
    with pytest.raises(ConfigError):
        space_of(dict(name="s", min=0, max=1, dtype="enum", dtype_param=["a"] * 1 + ["b"])).encode({"s": "zzz"})
    assert space.field_type("x").decl.dtype_param == before and space.dimensions[0].candidates == (1, 2, 4)


def test_derived_order_independent_of_declaration():
    fields = [
        dict(name="c", min=0, max=0, dtype="times", dtype_param={"target_name": "b", "product": 2, "dtype": "int"}),
        dict(name="b", min=0, max=0, dtype="share", dtype_param="a"),
        dict(name="a", min=1, max=9, dtype="int"),
    ]
    d = space_of(*fields).decode([3])
    assert d.values == {"c": 14, "b": 7, "a": 3}


def test_share_takes_no_dimension():
    space = space_of(dict(name="a", min=1, max=9, dtype="int"), dict(name="b", min=0, max=5, dtype="share", dtype_param="a"))
    assert space.names == ("a",) and space.derived == ("b",)


def test_constant_and_min_equals_max_take_no_dimension():
    space = space_of(dict(name="a", min=1, max=9, dtype="int", constant=4), dict(name="b", min=3, max=3, dtype="int"),
                     dict(name="c", min=0, max=1, dtype="float"))
    assert space.names == ("c",)
    assert space.decode([0.5]).values == {"a": 4, "b": 3, "c": 0.5}


def test_ratio_follows_a_repaired_source():
    space = space_of(TP, PP, tern(8, priority_policy="fixed", priority=["pp", "tp"]),
                     dict(name="r", min=0.5, max=1.0, dtype="ratio", dtype_param="tp"))
    pos = space.encode({"tp": 8, "pp": 4, "r": 8})
    d = space.decode(pos)
    assert d.values["tp"] == 2 and d.values["r"] == int(pos[2] * 2)


@pytest.mark.parametrize("fields, needle", [
    ([dict(name="a", min=0, max=0, dtype="share", dtype_param="b"),
      dict(name="b", min=0, max=0, dtype="share", dtype_param="a")], "cycle"),
    ([dict(name="a", min=1, max=2, dtype="int"), dict(name="b", min=0, max=0, dtype="share", dtype_param="A")],
     "did you mean 'a'"),
    ([TP, PP, tern(8, target_names=["tp", "pp", "x"])], "exactly two"),
    ([dict(name="a", min=5, max=1, dtype="int")], "min (5) > max (1)"),
    ([dict(name="a", min=0, max=1, dtype="enum", dtype_param=[])], "non-empty list"),
    ([dict(name="a", min=0, max=1, dtype="integer")], "unknown dtype 'integer'"),
    ([dict(name="a", min=0, max=1, dtype="share", dtype_param="a")], "itself"),
    ([dict(name="a", min=0, max=1, dtype="int"), dict(name="a", min=0, max=1, dtype="int")], "twice"),
    ([dict(name="a", min=0, max=1, dtype="range", dtype_param=0)], "positive step"),
    ([dict(name="a", min=0, max=1, dtype="int", value=7.5)], "not an integer"),
    ([dict(name="a", min=0, max=1, dtype="enum", dtype_param=[1, 2], value=3)], "not one of"),
    ([dict(name="a", min=0, max=float("nan"), dtype="int")], "finite"),
    ([dict(name="a", min=0, max=1e300, dtype="float")], "absurdly large"),
    ([dict(name="a", min=0, max=1, dtype="int", colour=1)], "unknown key 'colour'"),
    ([TP, PP, tern(8, priority_policy="random")], "priority_policy"),
])
def test_load_time_errors_name_file_field_and_fix(fields, needle):
    with pytest.raises(ConfigError) as exc:
        space_of(*fields)
    msg = str(exc.value)
    assert needle in msg and "t.toml" in msg and ";" in msg


def test_cycle_through_three_fields():
    with pytest.raises(ConfigError, match="cycle"):
        space_of(dict(name="a", min=0, max=0, dtype="times", dtype_param={"target_name": "c"}),
                 dict(name="b", min=0, max=0, dtype="times", dtype_param={"target_name": "a"}),
                 dict(name="c", min=0, max=0, dtype="times", dtype_param={"target_name": "b"}))


def test_registry_duplicate_and_unknown():
    reg: Registry[int] = Registry("thing")
    reg.register("a", 1)
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("a", 2)
    with pytest.raises(RegistryError, match="did you mean 'a'.*valid: a"):
        reg.get("A")
    with pytest.raises(RegistryError):
        DTYPES.register("int", object)


def test_dtype_plugin_through_entry_point(tmp_path):
    (tmp_path / "logint_plugin.py").write_text(textwrap.dedent('''
        import math
        from msopt.space.dtypes import IntType

        class LogInt(IntType):
            """An int searched on a log2 scale."""
            def bounds(self):
                return (math.log2(self.lo), math.log2(self.hi))
            def decode(self, x):
                return max(self.lo, min(self.hi, round(2 ** x)))
            def encode(self, value, values):
                return math.log2(value)
    '''))
    dist = tmp_path / "logint_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: logint-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[msopt.dtypes]\nlog_int = logint_plugin:LogInt\n")
    code = ("from msopt.space import SearchSpace, parse_field\n"
            "s = SearchSpace([parse_field(dict(name='n', min=1, max=1024, dtype='log_int'), "
            "source='p', section='vllm', index=0)])\n"
            "print(s.bounds[1][0], s.decode([5.0]).values['n'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, check=True)
    assert out.stdout.split() == ["10.0", "32"]
