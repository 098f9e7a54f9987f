"""What a user sees of a finished run: the verdict, the top table, the failures, the page in a
real headless browser (issue 19)."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from msopt.config import load_settings
from msopt.report import REPORT_HTML, write_report
from msopt.report.html import error_kind
from msopt.run.store import RunStore
from msopt.space import DecodeContext, SearchSpace
from tests.report.test_report import _result, small_quickstart, vllm_run  # noqa: F401  (a fixture)

INSTALL_BROWSER = "apt-get install -y chromium chromium-driver && pip install selenium"


def _table_rows(page: str, heading: str) -> list[list[str]]:
    table = page[page.index(heading):]
    table = table[:table.index("</table>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S)
            if "<td" in row]


def test_the_run_ends_with_a_verdict(vllm_run: dict) -> None:  # noqa: F811
    out = vllm_run["stdout"] + vllm_run["stderr"]
    assert re.search(r"^(verdict: |!!! NO CONFIGURATION MET THE SLOs)", out, flags=re.M), out
    for label in ("TTFT", "TPOT", "success rate"):
        assert re.search(rf"^  {label} .* (≤|≥|>|<) .* [✓✗]$", out, flags=re.M), label
    assert re.search(r"^  throughput: [\d,]+ tok/s (NOT )?within the SLOs; baseline ", out, flags=re.M)
    assert "(lower is better; eval " in out


def test_the_report_opens_with_the_verdict(vllm_run: dict) -> None:  # noqa: F811
    page = (vllm_run["run"] / REPORT_HTML).read_text(encoding="utf-8")
    assert page.index("<h2>Verdict</h2>") < page.index("<h2>Recommended configuration</h2>")
    rows = _table_rows(page, "<h2>Verdict</h2>")
    assert [r[0] for r in rows] == ["TTFT", "TPOT", "success rate"]
    assert all(r[3] in ("✓", "✗") and r[5] in ("✓", "✗") for r in rows)  # recommended and baseline
    assert "Throughput: " in page and "lower is better" in page


def test_top_table_has_one_row_per_configuration_the_recommended_first(vllm_run: dict) -> None:  # noqa: F811
    page = (vllm_run["run"] / REPORT_HTML).read_text(encoding="utf-8")
    head = page[page.index("<h2>Top configurations</h2>"):]
    headers = re.findall(r"<th>(.*?)</th>", head[:head.index("</tr>")])
    assert {"output tok/s", "TTFT (ms)", "TPOT (ms)", "success (%)"} <= set(headers)
    rows = _table_rows(page, "<h2>Top configurations</h2>")
    assert "&#9733;" in rows[0][0] and rows[0][1] == str(vllm_run["best"]["eval_id"])
    first_field = headers.index("mean fitness (n)") + 6
    configs = [tuple(r[first_field:]) for r in rows]
    assert len(configs) == len(set(configs)), configs
    means = [float(r[4].split()[0]) for r in rows[1:]]
    assert means == sorted(means)


def test_failures_are_grouped_by_kind_with_one_full_example(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(small_quickstart())
    settings = load_settings(str(cfg), environ={})
    space = SearchSpace.from_settings(settings)
    store = RunStore.create(tmp_path / "out", settings.config, run_id="kinds")
    rng = np.random.default_rng(0)
    low, high = space.bounds
    for i in range(9):
        d = space.decode(rng.uniform(low, high), DecodeContext(i % 3, 3, i // 3))
        error = (f"out of memory: KV cache needs {1.5 + i} GiB, {i * 7} GiB free\ntraceback line {i}" if i < 8
                 else "server exited with code 1")
        store.append(_result(i, d.position, d.values, {}, math.inf, error=error))
    store.close()
    page = write_report(store.run_dir).read_text(encoding="utf-8")
    rows = _table_rows(page, "<h2>Failures</h2>")
    assert [r[0] for r in rows] == ["8", "1"]
    assert rows[0][1] == "out of memory: KV cache needs N GiB, N GiB free"
    assert "traceback line 0" in rows[0][2] and "traceback line 1" not in page
    assert error_kind("a 3.5e-3 b 12") == "a N b N"


def _browser():
    """A headless Chromium driven by Selenium, or a skip naming the install command."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip(f"selenium is not installed; install the browser test's tools with: {INSTALL_BROWSER}")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip(f"no chromium / chromedriver on PATH; install them with: {INSTALL_BROWSER}")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1300,1800"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=opts)


def test_report_renders_in_a_real_browser(vllm_run: dict, tmp_path: Path) -> None:  # noqa: F811
    page = vllm_run["run"] / REPORT_HTML
    browser = _browser()
    try:
        browser.get(page.resolve().as_uri())
        assert browser.title.startswith("msopt report")
        images = browser.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])")
        assert len(images) == 4  # fitness, parallel coordinates, Pareto front, the simulator prior
        for alt, complete, width, height in images:
            assert complete and width > 300 and height > 200, (alt, width, height)
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == [], errors
        verdict = browser.find_element("css selector", "p.verdict").text
        assert verdict.startswith(("the recommended configuration", "NO CONFIGURATION"))
        width = browser.execute_script("return document.body.scrollWidth")
        assert width <= 1300 + 40, width  # no page-wide horizontal scrolling
        shot = tmp_path / "report.png"
        browser.save_full_page_screenshot(str(shot)) if hasattr(browser, "save_full_page_screenshot") \
            else browser.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        print(f"screenshot: {shot}")
        (tmp_path / "console.json").write_text(json.dumps(browser.get_log("browser")))
    finally:
        browser.quit()


def test_best_command_launches_exactly_what_was_measured(vllm_run: dict) -> None:  # noqa: F811
    run, best = vllm_run["run"], vllm_run["best"]
    measured = next(json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()
                    if json.loads(line)["eval_id"] == best["eval_id"])
    record = json.loads((run / "best_command.json").read_text())
    argv, env = record["argv"], record["env"]
    settings = load_settings(str(run / "config.toml"), environ={})
    checked = 0
    for f in settings.fields:
        value = measured["values"][f.name]
        if f.config_position == "env":
            assert env[f.name] == str(value)
        elif f.config_position.startswith("--") and not isinstance(value, bool):
            assert argv[argv.index(f.config_position) + 1] == str(value), f.name
        else:
            continue
        checked += 1
    assert checked >= 5
    # the float field is searched at its step, so what is measured is what is shown
    assert measured["values"]["gpu_memory_utilization"] == round(measured["values"]["gpu_memory_utilization"], 2)
