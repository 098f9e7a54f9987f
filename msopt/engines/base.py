"""Engine adapters: render a candidate's values into the launch of one server (:class:`EngineAdapter`,
the registry :data:`ENGINES`); what a launch is and the helpers that build one are in
:mod:`msopt.launch.render`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from msopt.engines.init_doc import InitContext
from msopt.engines.pd import PdLaunch
from msopt.engines.rules import Advisory, Rule
from msopt.errors import ConfigError, EvaluationError
from msopt.launch.render import DEFAULT_STOP_GRACE, Candidate, LaunchSpec, TrialNode, valid_port
from msopt.registry import Registry
from msopt.space.fields import FieldDecl

if TYPE_CHECKING:
    from msopt.config import Config
    from msopt.engines.crash import CrashReader
    from msopt.engines.health_sources import PatternSource


class EngineAdapter:
    """Base of the engine adapters; one instance per engine, stateless.

    ``render`` turns a :class:`~msopt.launch.render.Candidate` (every field's value, the fields, the
    ``[<engine>]`` section) into a :class:`LaunchSpec`: fields whose
    ``config_position`` is ``env`` become environment variables (and ``$NAME`` substitutions in
    the ``[<engine>.command]`` items), flag positions (``--x``) become argv items, dotted paths
    go into the engine's JSON config where the engine has one.
    """

    name: ClassVar[str] = ""
    health_path: ClassVar[str] = "/health"
    #: The port the engine's server listens on when its configuration names none.
    default_port: ClassVar[int] = 8000
    #: Seconds the server needs after SIGTERM to stop its own children before msopt sends SIGKILL;
    #: carried on every LaunchSpec the adapter renders (``LaunchSpec.stop_grace``).
    stop_grace: ClassVar[float] = DEFAULT_STOP_GRACE
    #: Free ports a multi-node launch needs on the leader's node besides ``port`` and
    #: ``rendezvous_port``; the runner allocates them as it allocates those and passes them to
    #: :meth:`render_nodes` as ``leader_ports`` (only when this is not 0).
    leader_ports: ClassVar[int] = 0
    #: The command a launch runs when ``[<engine>.command] executable`` is not set (empty: none
    #: declared; then a load-time message shows ``["server"]`` as the example).
    default_executable: ClassVar[tuple[str, ...]] = ()
    #: The engine's start-up rules (:class:`msopt.engines.rules.Rule`): configurations it refuses
    #: before it serves, checked on every rendered launch before it starts (real and simulated) and
    #: by the search's screen, so a refused candidate costs no launch.
    startup_rules: ClassVar[tuple[Rule, ...]] = ()
    #: Fields the engine accepts but that tune nothing (:class:`msopt.engines.rules.Advisory`),
    #: printed by ``msopt validate`` as ``warning:`` lines.
    advisories: ClassVar[tuple[Advisory, ...]] = ()
    #: Health patterns of the engine's own server log, ``{severity: {error_type: (pattern, ...)}}``
    #: (severities ``fatal`` and ``retryable``, as in ``[health_check.service]``), checked besides
    #: the configuration's; an error type the configuration lists patterns for keeps those alone.
    health_patterns: ClassVar[Mapping[str, Mapping[str, tuple[str, ...]]]] = MappingProxyType({})
    #: Where the patterns of the packaged ``[health_check]`` table (msopt/config/defaults.toml) that
    #: this engine prints come from, each with a sample line (:mod:`msopt.engines.health_sources`);
    #: the tests check the table against them (:func:`msopt.evaluate.health.pattern_sources`).
    health_sources: ClassVar[tuple[PatternSource, ...]] = ()
    #: ``(origin, line)``: lines the engine logs that look alarming but are no failure; no packaged
    #: pattern may match them (the tests check).
    benign_lines: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: The lines of the engine's server log that say it died while serving, and where its dump names
    #: the request in flight (:mod:`msopt.engines.crash`); None: only the process's exit says it.
    crash_reader: ClassVar[CrashReader | None] = None
    #: Flags that make the engine's server speak HTTPS (``msopt preflight`` fails a launch that
    #: passes one: msopt's readiness check and benchmarks speak plain HTTP).
    tls_flags: ClassVar[frozenset[str]] = frozenset()
    #: Where, besides ``[<engine>.command] model``, the engine's configuration names the model
    #: path, as ``msopt preflight`` shows it when that path is missing (``""``: nowhere else).
    model_path_hint: ClassVar[str] = ""
    #: The simulator personality that models this engine's launches (a name in
    #: ``msopt.sim.PERSONALITIES``); None: the simulator does not model it, so it has no simulated
    #: runs and no simulator prior unless ``[search] prior = "simulator"`` asks for one.
    sim_personality: ClassVar[str | None] = None
    #: Program names (an executable's base name) that print the engine's version with ``--version``
    #: (``msopt preflight`` asks them).
    version_programs: ClassVar[tuple[str, ...]] = ()
    #: Whether a trial that spans nodes needs each NPU's RoCE address (``hccn_tool -i N -ip -g``; MindIE's
    #: rank table): ``msopt preflight`` reads them on every node and says which it could not.
    needs_device_ips: ClassVar[bool] = False
    #: Whether :meth:`render_pd` renders a prefill/decode-disaggregated trial (a ``pd`` table).
    supports_pd: ClassVar[bool] = False

    #: The OpenAI-compatible route ``msopt init`` points the built-in load generator at.
    init_endpoint: ClassVar[str] = "/v1/completions"

    def write_init(self, ctx: InitContext) -> None:
        """Write this engine's sections of ``msopt init``'s config.toml (``[<engine>]``, ``[<engine>.command]`` and
        the fields it tunes) into ``ctx.doc``; msopt init writes the rest and validates the whole.

        Raises:
            ConfigError: msopt init has no template for this engine (the built-in ones are in
                ``msopt/engines/<name>/template.py``).
        """
        raise ConfigError(f"msopt init has no template for engine {self.name!r}; write its [{self.name}] section "
                          "by hand (docs/plugins.md)")

    def installed_values(self, fields: Sequence[FieldDecl], section: Mapping[str, Any],
                         environ: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
        """What the installation runs today, per field name, with where it was read
        (:func:`msopt.engines.installed.installed_baseline`): an env field's ``$NAME`` here."""
        return {d.name: (environ[d.name], f"${d.name} in this environment") for d in fields
                if d.config_position == "env" and d.name in environ}

    def installed_constraints(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> dict[str, tuple[Any,
                                                                                                             str]]:
        """Fields the installed configuration leaves one value, per field name: (that value, why, citing the
        engine's check), e.g. MindIE's maxPreemptCount with the installed cpuMemSize 0
        (:func:`msopt.engines.installed.installed_changes`); none by default."""
        return {}

    def simulation_section(self, section: Mapping[str, Any]) -> Mapping[str, Any]:
        """``section`` as a simulated launch renders it on this machine, which need not have the engine
        installed (MindIE: without a ``config_path`` that is not here, so its built-in template); by default
        ``section`` itself."""
        return section

    def installed_devices(self, section: Mapping[str, Any]) -> tuple[int, str] | None:
        """The devices one trial of the installed deployment holds, and where that was read (MindIE: its
        config.json's worldSize and npuDeviceIds); None: the installation does not say."""
        return None

    def installed_absent(self, decl: FieldDecl) -> str | None:
        """Why :meth:`installed_values` found no value for ``decl`` where this engine keeps it (MindIE: its
        config.json); None: the generic reason."""
        return None

    def render(self, candidate: Candidate, *, port: int, devices: Sequence[str] = (),
               workdir: Path | None = None) -> LaunchSpec:
        """Render the launch of one server with the candidate's values."""
        raise NotImplementedError

    def render_nodes(self, candidate: Candidate, *, port: int, nodes: Sequence[TrialNode], rendezvous_port: int,
                     workdir: Path | None = None, leader_ports: Sequence[int] = ()) -> list[LaunchSpec]:
        """Render one launch per node of a trial (``nodes[0]`` is the leader, whose server the
        benchmark talks to); with one node this is ``[render(...)]``.

        ``rendezvous_port`` is a free port on the leader's node for the engine's own node-to-node
        rendezvous (SGLang ``--dist-init-addr``, vLLM's data-parallel RPC or master port);
        ``leader_ports`` are :attr:`leader_ports` more (empty where the caller has none to give).

        Raises:
            EvaluationError: the engine has no multi-node form, or the values do not split over
                the nodes.
        """
        if len(nodes) == 1:
            return [self.render(candidate, port=port, devices=list(nodes[0].devices), workdir=workdir)]
        raise EvaluationError(f"engine {self.name!r} has no multi-node launch; a trial of {len(nodes)} nodes "
                              "needs vllm, sglang or mindie (or lower [cluster] devices_per_trial)")

    def render_pd(self, candidate: Candidate, *, ports: Sequence[int], devices: Sequence[str] = (),
                  workdir: Path | None = None, nodes: Sequence[TrialNode] = ()) -> PdLaunch:
        """Render a prefill/decode-disaggregated trial when :meth:`is_disaggregated`; its instances are
        placed on ``nodes`` when the trial spans nodes.

        Raises:
            EvaluationError: the engine has no disaggregated launch.
        """
        raise EvaluationError(f"engine {self.name!r} has no prefill/decode-disaggregated launch in msopt; "
                              "use sglang, or drop the [<engine>.pd] table")

    def is_disaggregated(self, section: Mapping[str, Any]) -> bool:
        """Whether the section asks for a prefill/decode-disaggregated trial (a ``pd`` table): its
        launch is :meth:`render_pd`'s, not one server (``check`` refuses the table where the engine
        does not :attr:`supports_pd`)."""
        return "pd" in section

    def check(self, fields: Sequence[FieldDecl], section: Mapping[str, Any]) -> None:
        """Raise ConfigError for a configuration this engine cannot render; every command runs it
        at load time (:func:`msopt.run.validate.validate`)."""

    def check_config(self, config: Config) -> None:
        """Raise ConfigError for what the engine refuses outside its own section (the original tool's
        inputs for it, say); :func:`msopt.run.validate.validate` runs it first, before the fields are
        built. Nothing by default."""

    def notes(self, section: Mapping[str, Any]) -> list[str]:
        """Lines ``msopt validate`` prints about what a launch will do beyond the fields (files
        edited, settings msopt changes); none by default."""
        return []

    def preflight(self, section: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
        """The engine's own checks of this machine before a launch, as ``(check, ok, detail)``
        (``msopt preflight``; the generic ones are in :mod:`msopt.run.preflight`); none by default."""
        return []

    def version_checks(self, argv: Sequence[str], version: str, exe_len: int) -> list[tuple[str, bool, str]]:
        """``msopt preflight``: the engine's checks of a launch's command line ``argv`` (its first
        ``exe_len`` items the executable) against the installed ``version`` (the line the version
        probe printed, e.g. ``vllm 0.33.0``), as ``(check, ok, detail)``; none by default."""
        return []

    def model_path(self, section: Mapping[str, Any]) -> str:
        """The model (a local directory or a hub id) a launch loads, as configured: ``[<engine>.command]
        model``; "" when none is set. The simulator prior reads the model's config.json there."""
        cmd = section.get("command", {})
        value = cmd.get("model", "") if isinstance(cmd, Mapping) else ""
        return value if isinstance(value, str) else ""

    def server_key(self, candidate: Candidate, *, load_fields: frozenset[str] = frozenset()) -> str | None:
        """What identifies the server the candidate starts: a digest of the rendered launch (argv,
        environment, edited files' content) at a fixed port and work directory, without the
        ``env`` fields named in ``load_fields`` (the benchmark's load, which the server never
        reads). Two evaluations with the same key can share one running server.

        None where a launch is not one server on one node (a ``pd`` table) or cannot be rendered
        from the candidate: such an evaluation always starts its own.
        """
        if self.is_disaggregated(candidate.section):
            return None
        load = {f.name for f in candidate.fields if f.config_position == "env" and f.name in load_fields}
        try:
            spec = self.render(candidate, port=self.launch_port(candidate.section), workdir=Path("/msopt-server-key"))
        except (EvaluationError, ConfigError):
            return None
        env = {str(k): str(v) for k, v in spec.env.items() if k not in load}
        blob = json.dumps({"engine": spec.engine, "argv": [str(a) for a in spec.argv], "env": env,
                           "files": {str(k): v for k, v in spec.files.items()}},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def launch_port(self, section: Mapping[str, Any]) -> int:
        """The port a user's server should listen on (exported launch files): ``[<engine>.command]
        port``, else :attr:`default_port`."""
        cmd = section.get("command", {})
        return valid_port(cmd.get("port") if isinstance(cmd, Mapping) else None, self.default_port)

    def export_target(self, section: Mapping[str, Any], target: str) -> str:
        """Where the user installs an exported configuration file rendered for ``target``."""
        return target


ENGINES: Registry[type[EngineAdapter]] = Registry("engine", entry_point_group="msopt.engines")


def sim_personality_of(engine: str) -> str | None:
    """The simulator personality the adapter registered as ``engine`` names
    (:attr:`EngineAdapter.sim_personality`), None for an engine it does not know or that names none:
    what the layers above hand the simulator, which sits below the engines and knows none of them."""
    return ENGINES.get(engine).sim_personality if engine in ENGINES else None
