"""``python -m msopt.benchmarks PARAMS_JSON``: the builtin load generator as a child process."""

from __future__ import annotations

import sys

from msopt.benchmarks.builtin import main

sys.exit(main())
