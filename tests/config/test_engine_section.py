"""check_engine_section: -e naming an engine whose search space would silently come from the packaged defaults."""

from __future__ import annotations

import pytest

from msopt.config import load_settings
from msopt.config.settings import check_engine_section
from msopt.errors import ConfigError
from msopt.run.validate import load
from tests.support.fields_toml import TP_PP_DP


def test_an_engine_the_file_does_not_declare_is_refused(write_toml):
    path = write_toml(TP_PP_DP)  # declares [[vllm.target_field]] only
    check_engine_section(load_settings(str(path), environ={}))  # its own engine: fine
    with pytest.raises(ConfigError) as err:
        check_engine_section(load_settings(str(path), "sglang", environ={}))
    text = str(err.value)
    assert text.startswith(str(path)) and "[[sglang.target_field]]" in text and "use -e vllm" in text
    with pytest.raises(ConfigError, match="use -e vllm"):  # validate runs it first
        load(str(path), "sglang", environ={})
