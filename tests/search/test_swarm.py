from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msopt.errors import ConfigError, RegistryError
from msopt.search.swarm import SCHEDULES, Swarm, SwarmOptions

LOW = np.array([-5.0, 0.0, 10.0])
HIGH = np.array([5.0, 1.0, 20.0])


def sphere(x: np.ndarray) -> np.ndarray:
    return np.sum(x**2, axis=1)


def options(**kw) -> SwarmOptions:
    base = dict(n_particles=6, iters=10, seed=7)
    base.update(kw)
    return SwarmOptions(**base)


# ---- shapes, bounds, basics ------------------------------------------------------------------


def test_ask_tell_shapes_and_counters():
    swarm = Swarm(LOW, HIGH, options())
    x = swarm.ask()
    assert x.shape == (6, 3)
    assert swarm.iteration == 0 and swarm.evaluations == 0
    swarm.tell(sphere(x))
    assert swarm.ask().shape == (6, 3)
    assert swarm.iteration == 1 and swarm.evaluations == 6
    assert swarm.personal_best_positions.shape == (6, 3)
    assert swarm.personal_best_fitness.shape == (6,)
    assert swarm.best_position.shape == (3,)
    assert swarm.best_fitness == pytest.approx(sphere(x).min())


def test_ask_returns_a_copy():
    swarm = Swarm(LOW, HIGH, options())
    x = swarm.ask()
    x[:] = 1e9
    assert np.all(swarm.ask() <= HIGH)


def test_initial_positions_in_bounds_and_particle_zero_at_init_position():
    init = np.array([1.0, 0.25, 12.0])
    swarm = Swarm(LOW, HIGH, options(n_particles=20), init_positions=[init])
    x = swarm.ask()
    assert np.array_equal(x[0], init)
    assert np.all((x >= LOW) & (x <= HIGH))
    assert np.all(np.abs(swarm.velocities) <= 0.5 * (HIGH - LOW))


def test_init_position_outside_bounds_or_nan_is_made_valid():
    swarm = Swarm(LOW, HIGH, options(), init_positions=[[99.0, float("nan"), -np.inf]])
    x0 = swarm.ask()[0]
    assert x0[0] == 5.0 and x0[2] == 10.0
    assert 0.0 <= x0[1] <= 1.0


def test_wrong_shapes_raise():
    swarm = Swarm(LOW, HIGH, options())
    with pytest.raises(ValueError):
        swarm.tell(np.zeros(5))
    with pytest.raises(ValueError):
        swarm.tell(np.zeros(6), np.zeros((6, 2)))
    with pytest.raises(ValueError):
        Swarm([0.0, 1.0], [1.0], options())
    with pytest.raises(ValueError):
        Swarm([1.0], [0.0], options())
    with pytest.raises(IndexError):
        swarm.ask_one(6)


fitness_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0]),
)
position_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-100, max_value=100),
)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    clamp=st.sampled_from([0.5, 3.0, 25.0, 1e308]),
    w=st.sampled_from([0.0, 0.7, 5.0]),
    c=st.sampled_from([0.0, 2.0, 50.0]),
)
def test_positions_always_within_bounds(data, clamp, w, c):
    n, d = 4, 3
    low = np.array([-1.0, 2.0, 3.0])
    high = np.array([1.0, 2.0, 300.0])  # the middle dimension is fixed
    swarm = Swarm(low, high, options(n_particles=n, velocity_clamp=clamp, w=w, c1=c, c2=c))
    for _ in range(4):
        x = swarm.ask()
        assert np.all((x >= low) & (x <= high))
        assert np.all(x[:, 1] == 2.0)
        fitness = data.draw(st.lists(fitness_values, min_size=n, max_size=n))
        positions = None
        if data.draw(st.booleans()):
            flat = data.draw(st.lists(position_values, min_size=n * d, max_size=n * d))
            positions = np.array(flat).reshape(n, d)
        swarm.tell(np.array(fitness), positions)
        i = data.draw(st.integers(0, n - 1))
        pos = None
        if data.draw(st.booleans()):
            pos = np.array(data.draw(st.lists(position_values, min_size=d, max_size=d)))
        swarm.tell_one(i, data.draw(fitness_values), pos)
    for arr in (swarm.ask(), swarm.personal_best_positions):
        assert np.all(np.isfinite(arr))
        assert np.all((arr >= low) & (arr <= high))
    with np.errstate(over="ignore"):
        assert np.all(np.abs(swarm.velocities) <= clamp * (high - low) + 1e-12)
    assert not np.any(np.isnan(swarm.personal_best_fitness))


def test_reflection_handles_multiple_bounces():
    swarm = Swarm([0.0], [10.0], options(n_particles=1))
    x = np.array([[12.5], [-3.0], [35.0], [-25.0], [25.0], [10.0], [0.0], [7.0]])
    v = np.ones_like(x)
    folded, vel = swarm._reflect(x, v)
    np.testing.assert_allclose(folded[:, 0], [7.5, 3.0, 5.0, 5.0, 5.0, 10.0, 0.0, 7.0])
    # an odd number of bounces reverses the velocity; an even one or none keeps it
    assert vel[:, 0].tolist() == [-1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0]


def test_zero_width_dimension_stays_fixed():
    low, high = np.array([0.0, 3.0, -1.0]), np.array([1.0, 3.0, 1.0])
    swarm = Swarm(low, high, options(), init_positions=[[0.5, 3.0, 0.0]])
    for _ in range(10):
        x = swarm.ask()
        assert np.all(x[:, 1] == 3.0)
        swarm.tell(sphere(x), x + 1.0)
    assert np.all(swarm.velocities[:, 1] == 0.0)
    assert swarm.best_position[1] == 3.0


def test_zero_dimensions():
    swarm = Swarm([], [], options())
    assert swarm.ask().shape == (6, 0)
    swarm.tell(np.ones(6))
    assert swarm.best_fitness == 1.0


# ---- fitness handling and write-back ---------------------------------------------------------


def test_nan_and_inf_fitness_are_failures():
    swarm = Swarm(LOW, HIGH, options())
    swarm.tell(np.full(6, np.nan))
    assert swarm.best_position is None
    assert swarm.best_fitness == math.inf
    assert np.all(swarm.personal_best_fitness == math.inf)
    fitness = np.array([np.inf, -np.inf, np.nan, 3.0, np.inf, 4.0])
    swarm.tell(fitness)
    assert swarm.best_fitness == 3.0
    assert swarm.personal_best_fitness.tolist() == [math.inf] * 3 + [3.0, math.inf, 4.0]


def test_write_back_replaces_positions_before_bests():
    swarm = Swarm(LOW, HIGH, options())
    asked = swarm.ask()
    repaired = asked.copy()
    repaired[2] = [1.0, 0.5, 15.0]
    fitness = np.full(6, 10.0)
    fitness[2] = 1.0
    swarm.tell(fitness, repaired)
    assert np.array_equal(swarm.personal_best_positions[2], repaired[2])
    assert not np.array_equal(swarm.personal_best_positions[2], asked[2])
    assert np.array_equal(swarm.best_position, repaired[2])
    assert np.array_equal(swarm.personal_best_positions, repaired)


def test_write_back_out_of_bounds_and_nan_are_clipped_or_kept():
    swarm = Swarm(LOW, HIGH, options())
    asked = swarm.ask()
    repaired = asked.copy()
    repaired[0] = [np.nan, np.inf, -1e9]
    swarm.tell(np.arange(6.0), repaired)
    assert swarm.personal_best_positions[0].tolist() == [asked[0, 0], 1.0, 10.0]


def test_tell_one_write_back():
    swarm = Swarm(LOW, HIGH, options())
    swarm.tell_one(3, 0.5, [2.0, 0.75, 11.0])
    assert swarm.personal_best_positions[3].tolist() == [2.0, 0.75, 11.0]
    assert swarm.best_position.tolist() == [2.0, 0.75, 11.0]
    assert swarm.best_fitness == 0.5


def test_personal_best_only_improves():
    swarm = Swarm(LOW, HIGH, options())
    swarm.tell(np.full(6, 5.0))
    first = swarm.personal_best_positions
    swarm.tell(np.full(6, 6.0))
    assert np.array_equal(swarm.personal_best_positions, first)
    assert np.all(swarm.personal_best_fitness == 5.0)


# ---- the update equation and the coefficient schedules --------------------------------------


def test_velocity_update_matches_equation():
    opts = options(
        n_particles=5, iters=8, w=0.9, c1=2.0, c2=1.5, velocity_clamp=100.0,
        strategy={"w": "lin_variation", "c1": "nonlin_mod", "c2": "exp_decay"},
        end_values={"c2": 0.5},
    )
    low, high = np.full(4, -100.0), np.full(4, 100.0)
    swarm = Swarm(low, high, opts)
    x = swarm.ask() * 0.1  # write back points well inside so no reflection happens
    swarm.tell(sphere(x), x)
    swarm.tell(sphere(swarm.ask()))  # one move at t = 1 with pbest != x
    x = swarm.ask()
    v = swarm.velocities
    rng = np.random.default_rng()
    rng.bit_generator.state = swarm.to_state()["rng"]
    r1, r2 = rng.random(x.shape), rng.random(x.shape)
    pbest, gbest = swarm.personal_best_positions, swarm.best_position
    t, T = 2, 8
    w = 0.4 + (0.9 - 0.4) * (T - t) / T
    c1 = 1.6 + (2.0 - 1.6) * (T - t) ** 1.2 / T**1.2
    c2 = (1.5 - 0.5 - 0.2) * math.exp(1 / (1 + 7 * t / T))
    expected_v = w * v + c1 * r1 * (pbest - x) + c2 * r2 * (gbest - x)
    swarm.tell(sphere(x))
    np.testing.assert_allclose(swarm.velocities, expected_v, rtol=1e-12)
    np.testing.assert_allclose(swarm.ask(), x + expected_v, rtol=1e-12)


def _inertia_ratios(strategy: str, iters: int = 6, **kw) -> list[np.ndarray]:
    """Run a swarm with c1 = c2 = 0, so each move scales the speed by exactly w(t)."""
    opts = options(
        n_particles=4, iters=iters, w=0.9, c1=0.0, c2=0.0, strategy={"w": strategy}, **kw
    )
    swarm = Swarm(np.zeros(3), np.full(3, 1000.0), opts)
    ratios = []
    for _ in range(iters):
        before = np.abs(swarm.velocities)
        swarm.tell(np.ones(4))
        ratios.append(np.abs(swarm.velocities) / before)
    return ratios


def test_constant_schedule_does_not_change_w():
    for ratio in _inertia_ratios("constant"):
        np.testing.assert_allclose(ratio, 0.9)


@pytest.mark.parametrize(
    "name, formula",
    [
        ("lin_variation", lambda t, T: 0.4 + (0.9 - 0.4) * (T - t) / T),
        ("nonlin_mod", lambda t, T: 0.4 + (0.9 - 0.4) * (T - t) ** 1.2 / T**1.2),
        ("exp_decay", lambda t, T: (0.9 - 0.4 - 0.2) * math.exp(1 / (1 + 7 * t / T))),
    ],
)
def test_schedules_are_applied_per_iteration(name, formula):
    ratios = _inertia_ratios(name)
    for t, ratio in enumerate(ratios):
        np.testing.assert_allclose(ratio, formula(t, 6), rtol=1e-9)
    assert ratios[0][0, 0] > ratios[-1][0, 0]


def test_random_schedule_varies_within_its_range():
    ratios = _inertia_ratios("random", iters=12, end_values={"w": 0.5})
    values = [r[0, 0] for r in ratios]
    for r, value in zip(ratios, values):
        np.testing.assert_allclose(r, value)  # one draw per sync move, shared by the swarm
    assert all(0.5 <= v <= 0.9 for v in values)
    assert len(set(np.round(values, 12))) > 1


def test_schedule_defaults_follow_pyswarms():
    rng = np.random.default_rng(0)
    linear = {"w": "lin_variation", "c1": "lin_variation", "c2": "lin_variation"}
    opts = options(iters=10, w=0.9, c1=2.0, c2=1.5, strategy=linear)
    assert opts.end("w") == 0.4
    assert opts.end("c1") == pytest.approx(1.6)
    assert opts.end("c2") == 1.5
    assert opts.coefficient("w", 0, rng) == pytest.approx(0.9)
    assert opts.coefficient("w", 10, rng) == pytest.approx(0.4)
    assert opts.coefficient("w", 99, rng) == pytest.approx(0.4)  # clamped past iters
    assert opts.coefficient("c1", 5, rng) == pytest.approx(1.8)
    rand = options(w=0.3, strategy={"w": "random"})
    assert rand.end("w") == pytest.approx(1.3)
    assert options().coefficient("w", 3, rng) == options().w


def test_schedule_registry():
    assert SCHEDULES.names() == ["constant", "exp_decay", "lin_variation", "nonlin_mod", "random"]
    with pytest.raises(RegistryError):
        SCHEDULES.register("constant", SCHEDULES.get("constant"))


# ---- options validation ---------------------------------------------------------------------


def test_from_settings_reads_options_strategy_and_end_values():
    opts = SwarmOptions.from_settings(
        {"c1": 2, "c2": 2, "w": 1.8},
        {"w": "lin_variation", "c1": "nonlin_mod", "w_end": 0.5},
        n_particles=10,
        iters=5,
        seed=3,
    )
    assert (opts.c1, opts.c2, opts.w, opts.seed) == (2.0, 2.0, 1.8, 3)
    assert dict(opts.strategy) == {"w": "lin_variation", "c1": "nonlin_mod", "c2": "constant"}
    assert opts.end("w") == 0.5
    restored = SwarmOptions.from_dict(json.loads(json.dumps(opts.to_dict())))
    assert restored == opts and hash(restored) == hash(opts)


@pytest.mark.parametrize(
    "pso_options, pso_strategy, message",
    [
        ({"c1": "x"}, {}, "[pso_options] c1 must be a number >= 0, got 'x'; e.g. c1 = 1.5"),
        ({"w": -1}, {}, "[pso_options] w must be a number >= 0"),
        ({"c2": True}, {}, "[pso_options] c2 must be a number"),
        ({"c2": math.nan}, {}, "[pso_options] c2 must be a number"),
        ({"velocity_clamp": 0}, {}, "velocity_clamp must be a number > 0"),
        ({"k": 3}, {}, "[pso_options] has unknown key 'k'"),
        ({}, {"w": "exp_dcay"}, "valid: constant, exp_decay, lin_variation, nonlin_mod, random"),
        ({}, {"w": 1}, "[pso_strategy] w must be a schedule name"),
        ({}, {"inertia": "constant"}, "[pso_strategy] has unknown key 'inertia'"),
        ({}, {"c1_end": "a", "c1": "lin_variation"}, "[pso_strategy] c1_end must be a number"),
        ({}, {"c1_end": 1.0}, "c1_end is set but c1 is 'constant'"),
        ({"c2": 2}, {"c2": "exp_decay"}, "[pso_strategy] c2 = 'exp_decay'"),
    ],
)
def test_invalid_settings_raise_config_error_naming_the_key(pso_options, pso_strategy, message):
    with pytest.raises(ConfigError) as info:
        SwarmOptions.from_settings(pso_options, pso_strategy, n_particles=4, iters=5)
    assert message in str(info.value)


@pytest.mark.parametrize("kw", [{"n_particles": 0}, {"iters": 0}, {"seed": -1}, {"iters": 2.5}])
def test_invalid_counts_raise(kw):
    with pytest.raises(ConfigError):
        options(**kw)


# ---- determinism and checkpoints ------------------------------------------------------------


def _run(swarm: Swarm, iters: int) -> list[np.ndarray]:
    seen = []
    for k in range(iters):
        x = swarm.ask()
        seen.append(x)
        f = sphere(x - 1.0)
        f[k % swarm.n_particles] = np.inf
        swarm.tell(f)
    return seen


def test_fixed_seed_is_deterministic():
    a = _run(Swarm(LOW, HIGH, options(seed=11)), 5)
    b = _run(Swarm(LOW, HIGH, options(seed=11)), 5)
    c = _run(Swarm(LOW, HIGH, options(seed=12)), 5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])


def test_the_same_tells_give_the_same_state():
    """Resume rebuilds a swarm by replaying its tells: the same seed and tells give the same state."""
    opts = options(seed=5, strategy={"w": "random", "c1": "lin_variation"})
    a, b = (Swarm(LOW, HIGH, opts, init_positions=[[0.0, 0.5, 15.0]]) for _ in range(2))
    for s in (a, b):
        _run(s, 1)
        s.tell_one(2, np.inf)  # an inf personal best and uneven counts in the state
    state = json.loads(json.dumps(a.to_state(), allow_nan=False))
    assert state == json.loads(json.dumps(b.to_state(), allow_nan=False))
    assert state["evaluation_counts"] == [1, 1, 2, 1, 1, 1] and state["options"] == opts.to_dict()


def test_state_encodes_inf_as_none():
    swarm = Swarm(LOW, HIGH, options())
    state = swarm.to_state()
    assert state["best_fitness"] is None
    assert state["personal_best_fitness"] == [None] * 6
    json.dumps(state, allow_nan=False)


# ---- async ----------------------------------------------------------------------------------


def test_tell_one_moves_only_that_particle():
    swarm = Swarm(LOW, HIGH, options())
    before, vel_before = swarm.ask(), swarm.velocities
    swarm.tell_one(2, 1.0)
    after = swarm.ask()
    assert not np.array_equal(after[2], before[2])
    mask = np.arange(6) != 2
    assert np.array_equal(after[mask], before[mask])
    assert np.array_equal(swarm.velocities[mask], vel_before[mask])
    assert swarm.evaluation_counts.tolist() == [0, 0, 1, 0, 0, 0]
    assert swarm.evaluations == 1 and swarm.iteration == 0
    assert np.array_equal(swarm.ask_one(2), after[2])


def test_tell_one_uses_the_particles_own_evaluation_count():
    opts = options(n_particles=3, iters=4, w=0.9, c1=0.0, c2=0.0, strategy={"w": "lin_variation"})
    swarm = Swarm(np.zeros(2), np.full(2, 1000.0), opts)
    w = [0.4 + 0.5 * (4 - t) / 4 for t in range(4)]
    for t in range(3):
        before = np.abs(swarm.velocities[0])
        swarm.tell_one(0, 1.0)
        np.testing.assert_allclose(np.abs(swarm.velocities[0]) / before, w[t])
    before = np.abs(swarm.velocities[1])
    swarm.tell_one(1, 1.0)
    np.testing.assert_allclose(np.abs(swarm.velocities[1]) / before, w[0])
    assert swarm.iteration == 0
    swarm.tell_one(2, 1.0)
    assert swarm.iteration == 1 and swarm.evaluations == 5


# ---- it actually optimizes ------------------------------------------------------------------


def test_converges_on_sphere():
    swarm = Swarm(np.full(3, -5.0), np.full(3, 5.0), SwarmOptions(n_particles=10, iters=50, seed=0))
    for _ in range(50):
        swarm.tell(sphere(swarm.ask()))
    assert swarm.best_fitness < 1e-2
    assert np.all(np.abs(swarm.best_position) < 0.1)


def test_converges_on_shifted_sphere_async():
    target = np.array([2.0, -1.0])
    swarm = Swarm(np.full(2, -5.0), np.full(2, 5.0), SwarmOptions(n_particles=10, iters=50, seed=1))
    rng = np.random.default_rng(0)
    for _ in range(500):
        i = int(rng.integers(10))  # particles come back in random order
        x = swarm.ask_one(i)
        swarm.tell_one(i, float(np.sum((x - target) ** 2)))
    assert swarm.best_fitness < 1e-2


@pytest.mark.parametrize("seed", range(5))
def test_converges_with_original_tool_schedule(seed):
    opts = SwarmOptions.from_settings(
        {"c1": 2.0, "c2": 2.0, "w": 0.9}, {"w": "lin_variation"},
        n_particles=10, iters=50, seed=seed,
    )
    swarm = Swarm(np.full(3, -5.0), np.full(3, 5.0), opts)
    for _ in range(50):
        swarm.tell(sphere(swarm.ask()))
    assert swarm.best_fitness < 1e-2


# ---- stall restart --------------------------------------------------------------------------


def test_restart_patience_validated_and_round_trips():
    with pytest.raises(ConfigError, match=r"\[pso_options\] restart_patience must be an integer >= 0"):
        options(restart_patience=-1)
    with pytest.raises(ConfigError, match="restart_patience"):
        SwarmOptions.from_settings({"restart_patience": 1.5}, {}, n_particles=4, iters=3)
    opts = SwarmOptions.from_settings({"restart_patience": 3}, {}, n_particles=4, iters=3, seed=1)
    assert opts.restart_patience == 3
    assert SwarmOptions.from_dict(json.loads(json.dumps(opts.to_dict()))) == opts
    assert options().restart_patience == 0  # off unless configured (defaults.toml turns it on)


def test_stalled_particle_is_redrawn_and_keeps_its_best():
    swarm = Swarm(LOW, HIGH, options(n_particles=3, restart_patience=2, w=0.0, c1=0.0, c2=0.0))
    swarm.tell(np.array([1.0, 2.0, 3.0]))           # first results: every particle improves
    stuck = swarm.personal_best_positions
    swarm.tell(np.array([5.0, 5.0, 0.5]))           # particles 0 and 1 stall once, 2 improves
    before = swarm.positions
    swarm.tell(np.array([5.0, 5.0, 0.1]))           # 0 and 1 stall twice: re-drawn after the move
    after = swarm.positions
    assert not np.allclose(after[0], before[0]) and not np.allclose(after[1], before[1])
    assert np.allclose(after[2], before[2])         # no velocity, no pull: particle 2 stays
    assert np.all((after >= LOW) & (after <= HIGH))
    assert np.array_equal(swarm.personal_best_positions[:2], stuck[:2])
    assert list(swarm.personal_best_fitness) == [1.0, 2.0, 0.1]


def test_no_restart_when_patience_is_zero():
    swarm = Swarm(LOW, HIGH, options(n_particles=2, w=0.0, c1=0.0, c2=0.0))
    swarm.tell(np.array([1.0, 1.0]))
    x = swarm.positions
    for _ in range(5):
        swarm.tell(np.array([2.0, 2.0]))
    assert np.allclose(swarm.positions, x)


def test_async_stall_restart_and_its_state():
    swarm = Swarm(LOW, HIGH, options(n_particles=2, restart_patience=1, w=0.0, c1=0.0, c2=0.0))
    swarm.tell_one(0, 1.0)
    x = swarm.ask_one(0)
    swarm.tell_one(0, 2.0)                          # one stall is enough: re-drawn
    assert not np.allclose(swarm.ask_one(0), x)
    swarm.tell_one(1, 3.0)
    state = json.loads(json.dumps(swarm.to_state()))
    assert state["stalls"] == [0, 0]


# ---- boundary handling ----------------------------------------------------------------------


def test_boundary_validated_and_round_trips():
    with pytest.raises(ConfigError, match=r'\[pso_options\] boundary must be "absorb" or "reflect", got \'wrap\'; '
                                          r'e.g. boundary = "absorb"'):
        options(boundary="wrap")
    opts = SwarmOptions.from_settings({"boundary": "absorb"}, {}, n_particles=4, iters=3, seed=1)
    assert opts.boundary == "absorb" and options().boundary == "reflect"
    assert SwarmOptions.from_dict(json.loads(json.dumps(opts.to_dict()))) == opts


def test_absorb_stops_on_the_bound_and_zeroes_that_velocity():
    swarm = Swarm(LOW, HIGH, options(n_particles=1, boundary="absorb", w=1.0, c1=0.0, c2=0.0,
                                     velocity_clamp=100.0))
    swarm._positions[0] = np.array([4.0, 0.5, 19.0])
    swarm._velocities[0] = np.array([3.0, 0.1, -50.0])
    swarm.tell(np.array([1.0]))
    assert np.allclose(swarm.positions[0], [5.0, 0.6, 10.0])
    assert np.allclose(swarm.velocities[0], [0.0, 0.1, 0.0])
    swarm.tell(np.array([1.0]))                    # stays on the upper bound of dimension 0
    assert swarm.positions[0][0] == 5.0


@given(st.integers(min_value=0, max_value=2**31))
@settings(max_examples=30, deadline=None)
def test_absorb_keeps_every_particle_in_bounds(seed):
    swarm = Swarm(LOW, HIGH, options(seed=seed, boundary="absorb", w=1.5, c1=2.0, c2=2.0, velocity_clamp=3.0))
    for _ in range(5):
        x = swarm.ask()
        assert np.all((x >= LOW) & (x <= HIGH))
        swarm.tell(sphere(x))


# ---- step mutation --------------------------------------------------------------------------


def test_mutation_validated_and_round_trips():
    for bad in (-0.1, 1.5, "x", True, math.nan):
        with pytest.raises(ConfigError, match=r"\[pso_options\] mutation must be a number in \[0, 1\]"):
            SwarmOptions.from_settings({"mutation": bad}, {}, n_particles=4, iters=3)
    opts = SwarmOptions.from_settings({"mutation": 0.5}, {}, n_particles=4, iters=3, seed=1)
    assert opts.mutation == 0.5 and options().mutation == 0.0  # off unless configured
    assert SwarmOptions.from_dict(json.loads(json.dumps(opts.to_dict()))) == opts


def test_mutation_zero_leaves_the_random_stream_alone():
    a = Swarm(LOW, HIGH, options(seed=5), steps=[1.0, 0.25, 2.0])
    b = Swarm(LOW, HIGH, options(seed=5, mutation=0.0))
    for _ in range(4):
        fa, fb = sphere(a.ask()), sphere(b.ask())
        a.tell(fa)
        b.tell(fb)
    assert np.array_equal(a.positions, b.positions)


def test_every_mutation_is_one_step_in_one_dimension():
    steps = np.array([1.0, 0.25, 2.0])
    for seed in range(20):
        swarm = Swarm(LOW, HIGH, options(seed=seed, n_particles=5, mutation=1.0, w=0.0, c1=0.0, c2=0.0),
                      steps=steps)
        before = swarm.positions
        swarm.tell(np.arange(5.0))                  # no velocity, no pull: only the mutation moves
        moved = np.abs(swarm.positions - before)
        assert np.all((moved > 0).sum(axis=1) == 1)
        assert np.allclose(moved.sum(axis=1), steps[np.argmax(moved > 0, axis=1)])
        assert np.all((swarm.positions >= LOW) & (swarm.positions <= HIGH))


def test_mutation_at_a_bound_steps_inward_and_skips_fixed_dimensions():
    low, high = np.array([0.0, 3.0]), np.array([1.0, 3.0])      # the second dimension is fixed
    swarm = Swarm(low, high, options(n_particles=1, mutation=1.0, w=0.0, c1=0.0, c2=0.0), steps=[0.25, 0.0])
    swarm._positions[0] = [1.0, 3.0]
    swarm.tell(np.array([1.0]))
    assert np.allclose(swarm.positions[0], [0.75, 3.0])


def test_steps_checked_and_kept_in_the_state():
    with pytest.raises(ValueError, match="steps must be 3 finite values"):
        Swarm(LOW, HIGH, options(), steps=[1.0, -1.0, 1.0])
    swarm = Swarm(LOW, HIGH, options(mutation=0.5), steps=[1.0, 0.25, 2.0])
    state = json.loads(json.dumps(swarm.to_state()))
    assert state["steps"] == [1.0, 0.25, 2.0]
    assert Swarm(LOW, HIGH, options()).to_state()["steps"] == pytest.approx([1.0, 0.1, 1.0])  # the default
