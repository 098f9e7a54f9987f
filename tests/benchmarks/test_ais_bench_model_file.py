"""Issue 51 item 4: a stock AISBench template name is the user's file of that name.

The original's users edit AISBench's installed ``vllm_api_stream_chat.py`` in place, and the original rewrote only
``request_rate`` and ``batch_size`` in it (msserviceprofiler@9582f434 optimizer/plugins/benchmark.py). So
``models = "vllm_api_stream_chat"`` (or ``model_file``, a name or a path) renders that file with only what the search
changes set: host_ip, host_port, batch_size, request_rate. The stock file (AISBench 29c363e
ais_bench/benchmark/configs/models/vllm_api/vllm_api_stream_chat.py) has ``max_out_len=512`` and
``ignore_eos=False``; msopt's generated template has 256 and True, which is why a stock name must not mean it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from msopt.benchmarks import get_benchmark
from msopt.benchmarks.ais_bench_configs import installed_model_file
from msopt.cli.main import main
from msopt.engines import LaunchSpec
from msopt.errors import ConfigError
from msopt.launch.render import Candidate
from tests.benchmarks.test_ais_bench import CONF, ais_names, load_generated  # noqa: F401 (a fixture)
from tests.support.shared_data import ORIGINAL_CONFIG, shared

SERVER = LaunchSpec(engine="mindie", argv=("x",), port=8123, host="127.0.0.1", served_model_name="qwen",
                    model="/models/Qwen3-8B")

#: A user's edit of the stock file (AISBench 29c363e's keys, their own values and a comment).
EDITED = '''from ais_bench.benchmark.models import VLLMCustomAPIChat
from ais_bench.benchmark.utils.postprocess.model_postprocessors import extract_non_reasoning_content

models = [
    dict(
        attr="service",
        type=VLLMCustomAPIChat,
        abbr="vllm-api-stream-chat",
        path="/data/tokenizers/qwen",
        model="served-qwen",
        stream=True,
        request_rate=0,
        retry=2,
        api_key="",
        host_ip="localhost",
        host_port=8080,
        url="",
        max_out_len=1024,  # our production outputs
        batch_size=1,
        trust_remote_code=False,
        generation_kwargs=dict(
            temperature=0.6,
            ignore_eos=False,
        ),
        pred_postprocessor=dict(type=extract_non_reasoning_content),
    )
]
'''


def _render(section: dict, tmp_path: Path, concurrency: int = 48) -> tuple[str, ...]:
    argv, _ = get_benchmark("ais_bench").render(Candidate({}, [], section), server=SERVER, num_prompts=8,
                                                load={"concurrency": concurrency}, result_dir=tmp_path)
    return argv


@pytest.mark.usefixtures("ais_names")
def test_a_stock_name_measures_the_stock_file_where_aisbench_is_not_installed(tmp_path: Path) -> None:
    section = {"command": {"models": "vllm_api_stream_chat"}}
    get_benchmark("ais_bench").check([], section)
    model, _ = load_generated(_render(section, tmp_path))
    stock = CONF["model_templates"]["vllm_api_stream_chat"]["keys"]
    assert (model["max_out_len"], model["generation_kwargs"]) == (stock["max_out_len"], stock["generation_kwargs"])
    assert (model["max_out_len"], model["generation_kwargs"]["ignore_eos"]) == (512, False)
    assert (model["host_ip"], model["host_port"], model["batch_size"], model["request_rate"]) == \
        ("127.0.0.1", 8123, 48, 0.0)
    assert (model["path"], model["model"]) == ("/models/Qwen3-8B", "qwen")  # empty in the stock file


def test_the_users_installed_file_is_rendered_with_only_what_the_search_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    conf = site / "ais_bench" / "benchmark" / "configs" / "models" / "vllm_api" / "vllm_api_stream_chat.py"
    conf.parent.mkdir(parents=True)
    (site / "ais_bench" / "__init__.py").write_text("")
    conf.write_text(EDITED)
    monkeypatch.syspath_prepend(str(site))
    assert installed_model_file("vllm_api_stream_chat") == conf
    argv = _render({"command": {"models": "vllm_api_stream_chat"}}, tmp_path / "r")
    text = (Path(argv[argv.index("--config-dir") + 1]) / "models" / "msopt_model.py").read_text()
    changed = {a.strip() for a in set(text.splitlines()) - set(EDITED.splitlines()) if not a.startswith("#")}
    assert changed == {"host_ip='127.0.0.1',", "host_port=8123,", "batch_size=48,", "request_rate=0.0,"}
    assert text.splitlines()[0].startswith(f"# Rendered by msopt for one evaluation from AISBench's installed {conf}")
    # a path of the user's own is read the same way; output_len, where given, sets max_out_len
    own = tmp_path / "my_model.py"
    own.write_text(EDITED)
    argv = _render({"command": {"model_file": str(own), "output_len": 300}}, tmp_path / "p")
    text = (Path(argv[argv.index("--config-dir") + 1]) / "models" / "msopt_model.py").read_text()
    assert "        max_out_len=300,  # our production outputs" in text and "temperature=0.6," in text


@pytest.mark.parametrize(("command", "needle"), [
    ({"model_file": "vllm_api_stream_chat", "model_template": "vllm_api_general_stream"},
     "'model_template' and model_file both say what the model config is"),
    ({"model_file": "vllm_api_stream_chat", "ignore_eos": True}, "'ignore_eos' and model_file"),
    ({"model_file": "tgi_api_general"}, "name one of mindie_stream_api_general"),
])
def test_conflicting_or_unknown_model_files_are_one_line(command: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        get_benchmark("ais_bench").check([], {"command": command})
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_validate_says_what_the_measurement_will_be(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = shared(ORIGINAL_CONFIG).read_text(encoding="utf-8")
    path = tmp_path / "c.toml"
    path.write_text(text.replace('models = "models"', 'models = "vllm_api_stream_chat"'))
    assert main(["validate", "-c", str(path)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("ais_bench: ")]
    assert "vllm_api_stream_chat.py" in line and "max_out_len 512" in line and "ignore_eos False" in line
    assert line.endswith("msopt sets host_ip, host_port, batch_size (the concurrency) and request_rate per "
                         "evaluation, the rest as the file has it")
