"""TOML snippets shared by tests: the tp x pp x dp = 8 layout of the examples."""

from __future__ import annotations

#: tp enum [1, 2, 4, 8], pp enum [1, 2, 4], dp = 8 / (tp x pp) as ternary_factories.
TP_PP_DP = """
[[vllm.target_field]]
name = "tp"
config_position = "--tensor-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2, 4, 8]
value = 1
[[vllm.target_field]]
name = "pp"
config_position = "--pipeline-parallel-size"
min = 0
max = 1
dtype = "enum"
dtype_param = [1, 2, 4]
value = 1
[[vllm.target_field]]
name = "dp"
config_position = "--data-parallel-size"
min = 0
max = 0
dtype = "ternary_factories"
dtype_param = { target_names = ["tp", "pp"], product = 8 }
"""
