"""The seed document's test-design table: ternary relations, priority and repair."""

from __future__ import annotations

import pytest

from msopt.errors import ConfigError, DecodeError
from msopt.space import DecodeContext, resolve_priority

from .helpers import PP, TP, space_of, tern


def const(name, value, dtype="int"):
    return dict(name=name, min=0, max=0, dtype=dtype, constant=value)


def test_ternary_factories_basic():  # UT-三元除法基本推导
    space = space_of(const("tp", 2), const("pp", 4), tern(16))
    d = space.decode([])
    assert d.values["dp"] == 2 and isinstance(d.values["dp"], int)


def test_ternary_factories_float():  # UT-三元除法浮点推导
    space = space_of(const("tp", 2), const("pp", 2), tern(10.0, dtype="float"))
    assert space.decode([]).values["dp"] == 2.5


@pytest.mark.parametrize("zero", ["tp", "pp"])
def test_ternary_factories_zero_source_keeps_declared(zero):  # UT-三元除法依赖为零
    fields = [const("tp", 0 if zero == "tp" else 2), const("pp", 0 if zero == "pp" else 2)]
    dp = tern(8)
    dp["value"] = 7
    d = space_of(*fields, dp).decode([])
    assert d.values["dp"] == 7
    assert any("zero" in w for w in d.warnings)


def test_ternary_factories_nan_source_keeps_declared():
    fields = [const("tp", 2, "float"), dict(name="pp", min=0, max=0, dtype="float", constant=float("nan"))]
    with pytest.raises(ConfigError):  # a NaN constant is refused at load
        space_of(*fields, tern(8, dtype="float"))


def test_ternary_times_basic():  # UT-三元乘法基本推导
    space = space_of(const("seq_len", 512), const("batch", 4),
                     dict(name="total_tokens", min=0, max=0, dtype="ternary_times",
                          dtype_param={"target_names": ["seq_len", "batch"], "product": 1, "dtype": "int"}))
    assert space.decode([]).values["total_tokens"] == 2048


def test_missing_target_is_config_error_with_suggestion():  # UT-依赖字段缺失, corrected: at load
    dp = tern(8)
    dp["dtype_param"]["target_names"] = ["TP", "pp"]
    with pytest.raises(ConfigError) as exc:
        space_of(TP, PP, dp)
    msg = str(exc.value)
    assert "t.toml" in msg and "'dp'" in msg and "did you mean 'tp'" in msg


def test_fixed_priority():  # UT-fixed 优先级解析
    assert resolve_priority(["tp", "pp"], "fixed", ["pp", "tp"]) == ("pp", "tp")


@pytest.mark.parametrize("bad", [None, ["pp"], ["pp", "xx"], ["tp", "tp"], []])
def test_fixed_invalid_priority_falls_back(bad):  # UT-fixed 非法优先级降级
    assert resolve_priority(["tp", "pp"], "fixed", bad) == ("tp", "pp")


@pytest.mark.parametrize("i", range(5))
def test_balanced_first_half(i):  # UT-balanced 前半粒子
    assert resolve_priority(["tp", "pp"], "balanced", None, DecodeContext(i, 10, 0)) == ("tp", "pp")


@pytest.mark.parametrize("i", range(5, 10))
def test_balanced_second_half(i):  # UT-balanced 后半粒子
    assert resolve_priority(["tp", "pp"], "balanced", None, DecodeContext(i, 10, 0)) == ("pp", "tp")


def test_balanced_odd_iteration_swaps_and_no_context_keeps_order():
    assert resolve_priority(["tp", "pp"], "balanced", None, DecodeContext(0, 10, 1)) == ("pp", "tp")
    assert resolve_priority(["tp", "pp"], "balanced", None, DecodeContext(9, 10, 3)) == ("tp", "pp")
    assert resolve_priority(["tp", "pp"], "balanced", None, None) == ("tp", "pp")


def test_odd_swarm_size_midpoint():
    # n = 5: particles 0, 1, 2 (< 2.5) keep target_names[0]
    assert resolve_priority(["a", "b"], "balanced", None, DecodeContext(2, 5, 0)) == ("a", "b")
    assert resolve_priority(["a", "b"], "balanced", None, DecodeContext(3, 5, 0)) == ("b", "a")


def _position(space, tp, pp):
    return space.encode({"tp": tp, "pp": pp})


def test_repair_keeps_high_priority_field():  # UT-优先级修复保留高优字段
    space = space_of(TP, PP, tern(8, priority_policy="fixed", priority=["tp", "pp"], max_value=8))
    d = space.decode(_position(space, 8, 4))  # 8 * 4 = 32 does not divide 8
    assert d.values["tp"] == 8 and d.values["pp"] == 1 and d.values["dp"] == 1
    assert d.repaired
    assert space.decode(d.position).values == d.values


def test_repair_pp_priority_moves_tp():
    space = space_of(TP, PP, tern(8, priority_policy="fixed", priority=["pp", "tp"]))
    d = space.decode(_position(space, 8, 4))
    assert d.values["pp"] == 4 and d.values["tp"] == 2 and d.values["dp"] == 1


def test_repair_nearest_first_ties_to_smaller():
    # tp 3 is not a candidate; keep pp = 2, product 8 -> tp in {1, 2, 4}; nearest to 8 is 4
    space = space_of(dict(name="tp", min=1, max=8, dtype="int", value=8), PP,
                     tern(8, priority_policy="fixed", priority=["pp", "tp"]))
    d = space.decode(space.encode({"tp": 3, "pp": 2}))
    # 3 -> candidates by distance: 3 (invalid), 2 and 4 tie -> 2 wins (smaller)
    assert (d.values["tp"], d.values["pp"], d.values["dp"]) == (2, 2, 2)


def test_stage_two_moves_both_fields():
    # keep tp = 8 impossible with max_value 2 and product 4: stage 2 moves tp
    space = space_of(TP, PP, tern(4, priority_policy="fixed", priority=["tp", "pp"]))
    d = space.decode(_position(space, 8, 1))
    t, p, v = d.values["tp"], d.values["pp"], d.values["dp"]
    assert t * p * v == 4 and t == 4  # nearest tp to 8 that works


def test_repair_failure_int_raises_decode_error_with_values():  # ABN-int 非整除不可修复
    space = space_of(dict(name="tp", min=1, max=1000, dtype="int"),
                     dict(name="pp", min=0, max=0, dtype="int", constant=2),
                     dict(name="x", min=0, max=0, dtype="ternary_factories",
                          dtype_param={"target_names": ["tp", "pp"], "product": 12}))
    d = space.decode(space.encode({"tp": 3}))
    assert d.values["x"] == 2
    with pytest.raises(DecodeError) as exc:
        space.decode(space.encode({"tp": 5}))
    assert exc.value.values["tp"] == 5 and "x" in str(exc.value)


def test_finite_candidates_always_repair():
    # with both sources enumerable, stage 2 reaches every valid pair
    space = space_of(dict(name="tp", min=0, max=1, dtype="enum", dtype_param=[3, 5]),
                     dict(name="pp", min=0, max=0, dtype="int", constant=2),
                     dict(name="x", min=0, max=0, dtype="ternary_factories",
                          dtype_param={"target_names": ["tp", "pp"], "product": 12}))
    d = space.decode(space.encode({"tp": 5}))
    assert (d.values["tp"], d.values["x"]) == (3, 2) and d.repaired


def test_unrepairable_everywhere_is_config_error():  # UT-修复失败降级, caught at load
    with pytest.raises(ConfigError, match="no pair"):
        space_of(dict(name="tp", min=0, max=1, dtype="enum", dtype_param=[3, 5]), PP, tern(7))


def test_float_repair_failure_clamps():
    space = space_of(dict(name="a", min=1, max=4, dtype="float"), dict(name="b", min=0, max=0, dtype="float", constant=1.0),
                     dict(name="r", min=0, max=0, dtype="ternary_factories",
                          dtype_param={"target_names": ["a", "b"], "product": 10.0, "dtype": "float",
                                       "max_value": 5.0}))
    d = space.decode([1.0])
    assert d.values["r"] == 5.0 and any("clamped" in w for w in d.warnings)


def test_large_int_range_not_enumerated():  # ABN-大范围 int 字段不可枚举
    space = space_of(dict(name="tp", min=1, max=1000, dtype="int"), PP,
                     tern(8, priority_policy="fixed", priority=["pp", "tp"]))
    # tp = 3 cannot be changed (1000 values > 256), pp alone cannot make 8 / (3 * pp) an int
    with pytest.raises(DecodeError):
        space.decode(space.encode({"tp": 3, "pp": 1}))
    d = space.decode(space.encode({"tp": 2, "pp": 4}))
    assert d.values["dp"] == 1


def test_context_changes_repair_direction():  # IT-map_param 上下文传递
    space = space_of(TP, PP, tern(8))
    x = _position(space, 8, 4)
    first = space.decode(x, DecodeContext(0, 4, 0)).values
    second = space.decode(x, DecodeContext(3, 4, 0)).values
    assert first["tp"] == 8 and first["pp"] == 1
    assert second["pp"] == 4 and second["tp"] == 2
    for v in (first, second):
        assert v["tp"] * v["pp"] * v["dp"] == 8


def test_written_back_position_decodes_without_repair():  # IT-PSO 粒子位置回写 (space side)
    space = space_of(TP, PP, tern(8))
    d = space.decode(_position(space, 8, 4), DecodeContext(0, 2, 0))
    again = space.decode(d.position, DecodeContext(0, 2, 0))
    assert again.values == d.values and not again.repaired


def test_zero_in_enum_source_is_reported_not_crash():
    space = space_of(dict(name="tp", min=0, max=1, dtype="enum", dtype_param=[0, 2]), PP, tern(8, dtype="int") | {"value": 1})
    d = space.decode(space.encode({"tp": 0, "pp": 1}))
    assert d.values["dp"] == 1 and d.warnings


def test_ternary_needs_two_targets():
    with pytest.raises(ConfigError, match="exactly two"):
        space_of(TP, PP, tern(8, target_names=["tp"]))


def test_product_zero_is_config_error():
    with pytest.raises(ConfigError, match="product is 0"):
        space_of(TP, PP, tern(0))


def test_ternary_times_missing_source_keeps_declared():
    space = space_of(dict(name="a", min=0, max=0, dtype="int", constant=0),
                     dict(name="b", min=0, max=0, dtype="factories",
                          dtype_param={"target_name": "a", "product": 8, "dtype": "int"}),
                     dict(name="c", min=0, max=0, dtype="int", constant=3),
                     dict(name="t", min=0, max=0, dtype="ternary_times", value=5,
                          dtype_param={"target_names": ["b", "c"], "dtype": "int"}))
    d = space.decode([])
    assert d.values["b"] is None and d.values["t"] == 5
    assert len(d.warnings) == 2
