"""Property tests: any position, in or out of bounds, NaN and inf included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msopt.errors import DecodeError
from msopt.space import DecodeContext

from .helpers import space_of, tern

SPACE = space_of(
    dict(name="tp", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4, 8]),
    dict(name="pp", min=1, max=6, dtype="int"),
    tern(24, max_value=12),
    dict(name="mbs", min=10, max=1000, dtype="int"),
    dict(name="pre", min=0.1, max=0.7, dtype="ratio", dtype_param="mbs"),
    dict(name="sel", min=0, max=1, dtype="bool"),
    dict(name="util", min=0.7, max=0.95, dtype="float"),
    dict(name="delay", min=0, max=1000, dtype="range", dtype_param=10),
    dict(name="share", min=0, max=0, dtype="share", dtype_param="delay"),
    dict(name="tok", min=0, max=0, dtype="ternary_times", dtype_param={"target_names": ["mbs", "tp"]}),
    dict(name="big", min=1, max=100000, dtype="int"),
    dict(name="q", min=0, max=0, dtype="ternary_factories",
         dtype_param={"target_names": ["big", "pp"], "product": 720, "max_value": 720}),
)

coord = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-2, 2000))
positions = st.lists(coord, min_size=SPACE.ndim, max_size=SPACE.ndim)
contexts = st.one_of(st.none(), st.builds(lambda n, i, k: DecodeContext(i % n, n, k),
                                          st.integers(1, 50), st.integers(0, 1000), st.integers(0, 100)))


def _check_bounds(values):
    assert values["tp"] in (1, 2, 4, 8)
    assert 1 <= values["pp"] <= 6
    assert 10 <= values["mbs"] <= 1000
    assert int(0.1 * values["mbs"]) <= values["pre"] <= int(0.7 * values["mbs"])
    assert isinstance(values["sel"], bool)
    assert 0.7 <= values["util"] <= 0.95
    assert 0 <= values["delay"] <= 1000 and values["delay"] % 10 == 0
    assert 1 <= values["dp"] <= 12
    assert 1 <= values["big"] <= 100000


@settings(max_examples=400, deadline=None)
@given(positions, contexts)
def test_decode_never_crashes_and_respects_bounds(pos, ctx):
    try:
        d = SPACE.decode(np.array(pos), ctx)
    except DecodeError as exc:
        assert exc.values  # the particle's own values travel with the error
        return
    v = d.values
    _check_bounds(v)
    assert v["tp"] * v["pp"] * v["dp"] == 24
    assert v["big"] * v["pp"] * v["q"] == 720
    low, high = SPACE.bounds
    assert np.all(np.isfinite(d.position)) and np.all(d.position >= low) and np.all(d.position <= high)
    again = SPACE.decode(d.position, ctx)
    assert again.values == v


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 6), st.integers(10, 1000), st.booleans(),
       st.integers(0, 100), st.sampled_from([1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16, 18, 20, 24, 30]))
def test_encode_decode_round_trip(tp, pp, mbs, sel, delay10, big):
    if 24 % (tp * pp) or 24 // (tp * pp) > 12 or 720 % (big * pp):
        return
    values = {"tp": tp, "pp": pp, "dp": 24 // (tp * pp), "mbs": mbs, "pre": mbs // 4,
              "sel": sel, "util": 0.8, "delay": delay10 * 10, "share": 1000 - delay10 * 10, "tok": mbs * tp,
              "big": big, "q": 720 // (big * pp)}
    if not 0.1 * mbs <= values["pre"] + 0.5 <= 0.7 * mbs + 0.5:
        return
    d = SPACE.decode(SPACE.encode(values))
    assert d.values == values


def test_steps_are_one_candidate_or_a_tenth_of_the_range():
    low, high = SPACE.bounds
    width = dict(zip(SPACE.names, high - low))
    steps = dict(zip(SPACE.names, SPACE.steps))
    assert steps["tp"] == width["tp"] / 4 and steps["sel"] == width["sel"] / 2   # a candidate
    assert steps["pp"] == width["pp"] / 6                                         # int 1..6
    for many in ("mbs", "util", "delay", "big"):                                  # a tenth
        assert steps[many] == pytest.approx(width[many] / 10)
    small = space_of(dict(name="tp", min=0, max=1, dtype="enum", dtype_param=[1, 2, 4, 8]),
                     dict(name="seqs", min=16, max=512, dtype="range", dtype_param=16))
    step = small.steps[0]
    start = small.encode({"tp": 1, "seqs": 16})
    for k, tp in enumerate((1, 2, 4, 8)):      # stepping one candidate goes to the next value
        assert small.decode(start + [k * step, 0.0]).values["tp"] == tp
