"""The typed run and cluster configuration (msopt/config/typed.py): built once, from defaults.toml."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from msopt.config import DEFAULTS_PATH, load_settings, read_toml
from msopt.config.keys import SCALARS, TABLES, UNSET_DEFAULTS
from msopt.config.typed import PriorConfig, TrialShape
from msopt.errors import ConfigError
from msopt.evaluate.workload import configured_load, workload_config
from msopt.slo import Slos
from tests.support.fields_toml import TP_PP_DP


def test_defaults_come_from_defaults_toml(write_toml):
    s = load_settings(str(write_toml(TP_PP_DP)), environ={})
    run, cluster, defaults = s.config.run, s.config.cluster, read_toml(DEFAULTS_PATH)
    assert run.particles_time_out == defaults["particles_time_out"]
    assert run.sample_size == defaults["sample_size"] and run.seed == defaults["seed"]
    assert run.benchmark == defaults["benchmark"] and run.mode == defaults["mode"]
    assert run.pso_top_k == defaults["data_storage"]["pso_top_k"]
    assert run.slos == Slos(defaults["ttft_slo"], defaults["tpot_slo"], defaults["success_rate_slo"])
    assert cluster.accelerator == defaults["cluster"]["accelerator"]
    assert cluster.reuse_servers is defaults["cluster"]["reuse_servers"]
    # what defaults.toml leaves unset has its one default in UNSET_DEFAULTS
    assert run.max_launches == UNSET_DEFAULTS["max_launches"] and run.backup is UNSET_DEFAULTS["backup"]
    assert run.searcher == UNSET_DEFAULTS["search.searcher"]
    assert not cluster.trial.explicit and cluster.ports is None


def test_trial_shape_resolved_once(write_toml):
    s = load_settings(str(write_toml(TP_PP_DP)), environ={})
    assert s.config.cluster.trial == TrialShape(8, explicit=False)  # the ternary_factories product
    assert s.config.cluster.trial.device_ids() == []                # only an explicit key names device ids
    s = load_settings(str(write_toml("[cluster]\ndevices_per_trial = 4\nports = \"20000-20010\"\n" + TP_PP_DP)),
                      environ={})
    assert s.config.cluster.trial == TrialShape(4, explicit=True)
    assert s.config.cluster.trial.device_ids() == ["0", "1", "2", "3"]
    assert s.config.cluster.ports == (20000, 20010)
    s = load_settings(str(write_toml("[cluster]\ndevices_per_trial = 0\n" + TP_PP_DP)), environ={})
    assert s.config.cluster.trial == TrialShape(0, explicit=True) and s.config.cluster.trial.device_ids() == []


def test_prior_keys_come_once_from_defaults_toml(write_toml):
    s = load_settings(str(write_toml(TP_PP_DP)), environ={})
    search = read_toml(DEFAULTS_PATH)["search"]
    assert (search["prior_evaluations"], search["screen"], search["explore"]) == (600, 4, 0.25)
    assert s.config.prior == PriorConfig(mode=search["prior"], evaluations=search["prior_evaluations"], picks=None,
                                         screen=search["screen"], explore=search["explore"], refit=search["refit"],
                                         correct=search["correct"])
    assert s.where("search.prior_evaluations") == str(DEFAULTS_PATH)
    s = load_settings(str(write_toml("[search]\nprior = \"none\"\nprior_picks = 2\nscreen = 0\nrefit = false\n"
                                     "correct = false\n" + TP_PP_DP)), environ={})
    assert s.config.prior == PriorConfig(mode="none", evaluations=600, picks=2, screen=0, explore=0.25, refit=False,
                                         correct=False)


def test_a_bad_prior_key_is_refused_at_load_time(write_toml):
    path = write_toml("[search]\nexplore = 1.5\n" + TP_PP_DP)
    with pytest.raises(ConfigError, match=rf"^{path}: \[search\] 'explore' must be a number from 0 to 1"):
        load_settings(str(path), environ={})


def test_overrides_rebuild_and_pickle_carries_it(write_toml):
    s = load_settings(str(write_toml(TP_PP_DP)), environ={}).replace(seed=7, particles_time_out=12.5)
    assert s.config.run.seed == 7 and s.config.run.particles_time_out == 12.5
    back = pickle.loads(pickle.dumps(s))  # what Ray ships to an actor
    assert back.config == s.config
    assert "_config" in back.__dict__  # arrived with the Settings, not rebuilt from raw keys


def test_bad_value_is_still_one_line_naming_file_and_key(write_toml):
    path = write_toml("[cluster]\ndevices_per_trial = -1\n" + TP_PP_DP)
    with pytest.raises(ConfigError, match=rf"^{path}: \[cluster\] 'devices_per_trial' must be .*fix 'devices_per_trial'$"):
        load_settings(str(path), environ={})


def test_workload_reported_by_the_benchmark(write_toml):
    s = load_settings(str(write_toml("simulate = false\nbenchmark = \"vllm_benchmark\"\nsample_size = 100\n"
                                     "[vllm_benchmark.command]\nnum_prompts = 300\nrequest_rate = 4\n" + TP_PP_DP)),
                      environ={})
    w = workload_config(s.config)
    assert (w.full_prompts, w.search_prompts, dict(w.load)) == (300, 100, {"request_rate": 4})
    sim = s.replace(simulate=True)
    assert configured_load(sim.config) == {"concurrency": read_toml(DEFAULTS_PATH)["simulator"]["workload"]["concurrency"]}


def test_each_component_gets_its_own_section_with_the_files_that_set_it(write_toml):
    path = write_toml("[capacity]\ntolerance = 0.1\n[simulator]\nhardware = \"h100-sxm\"\n" + TP_PP_DP)
    c = load_settings(str(path), environ={}).config
    assert c.capacity.get("tolerance") == 0.1 and c.capacity.where("tolerance") == str(path)
    assert c.capacity.where("max_probes") == str(DEFAULTS_PATH)  # set by the packaged defaults only
    assert c.simulator.user == frozenset({"hardware"}) and c.simulator.source == str(path)
    assert c.engine.name == "vllm" and [f.name for f in c.engine.fields][:2] == ["tp", "pp"]
    assert c.engine.section.get("target_field") is not None and c.benchmark.name == c.run.benchmark
    assert "tolerance = 0.1" in c.text  # the run directory's config.toml
    back = pickle.loads(pickle.dumps(c))  # what travels to the actors: no Settings inside
    assert back == c and back.simulator.get("hardware") == "h100-sxm"
    with pytest.raises(TypeError):
        back.capacity.table["tolerance"] = 1  # type: ignore[index]  read-only


def test_configuration_md_names_the_keys_defaults_toml_leaves_unset():
    """docs/configuration.md's first layer says which keys defaults.toml leaves unset: each of UNSET_DEFAULTS,
    and no more (a key defaults.toml sets is not among them)."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "configuration.md").read_text(encoding="utf-8")
    layer = text[text.index("1. the packaged defaults"):text.index("2. the file named by")]
    assert "msopt/config/defaults.toml" in layer and "UNSET_DEFAULTS" in layer
    defaults = read_toml(DEFAULTS_PATH)
    for dotted in UNSET_DEFAULTS:
        table, _, key = dotted.rpartition(".")
        assert f"{key}`" in layer, dotted
        assert key not in (defaults.get(table, {}) if table else defaults), dotted


def test_each_checked_key_has_its_default_in_one_place():
    """A key loading checks (msopt/config/keys.py) has its default in defaults.toml or says there what
    unset means (UNSET_DEFAULTS), never both and never neither; two optional keys are their readers' to default."""
    defaults = read_toml(DEFAULTS_PATH)
    optional = {"wait_start_time", "use_request_rate_calibration"}  # the engine's section, optix's mapping
    for name, key in SCALARS.items():
        assert name in optional or (name in defaults) != bool(key.unset), name
    for table, keys in TABLES.items():
        for name, key in keys.items():
            assert (name in defaults[table]) != bool(key.unset), f"{table}.{name}"
    assert set(UNSET_DEFAULTS) == {n for n, k in SCALARS.items() if k.unset} | {
        f"{t}.{n}" for t, keys in TABLES.items() for n, k in keys.items() if k.unset}


def test_no_stale_defaults_path():
    """The packaged defaults are msopt/config/defaults.toml; nothing names the old msopt/defaults.toml."""
    root = Path(__file__).resolve().parents[2]
    stale = [str(p.relative_to(root)) for p in [root / "README.md", *root.glob("docs/*.md"), *root.rglob("msopt/**/*.py")]
             if "msopt/defaults.toml" in p.read_text(encoding="utf-8")]
    assert stale == []
