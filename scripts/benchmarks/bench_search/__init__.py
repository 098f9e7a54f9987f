"""Search quality of msopt against peer optimizers on simulated tuning tasks with a known optimum.

Usage:
    python -m scripts.benchmarks.bench_search [--seeds 20] [--first-seed 0] [--budgets 6,10,20,50] [--problems all]
                                              [--methods all] [--noise 0.03] [--cache DIR] [--jobs 1]
                                              [--ablation-seeds 100:200] [--out docs/benchmarks.md] [--section NAME]

Needs the ``bench`` extra (``pip install -e '.[bench]'``: optuna, cmaes, nevergrad, pyswarms,
aiconfigurator). Without aiconfigurator the independent reality's problems are skipped (with
``--problems all``) or refused (named with ``--problems``), unless their tables are cached.

How it works (printed with the table as well):

0. Realities: each problem's table is either NVIDIA AIConfigurator's estimate of every
   configuration (the independent reality, :mod:`.independent`) or msopt's own simulator with a
   hidden gap (self-referential, :class:`.problems.Gap`). The report shows them side by side,
   the independent one first.
1. Problems: a vLLM (or SGLang) search space (tp, pp, dp = world / (tp·pp) as ``ternary_factories``,
   max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enable_chunked_prefill) on a
   simulated model / hardware / workload. Every valid configuration (tp·pp divides the world
   size) is evaluated ONCE with msopt's own :class:`msopt.evaluate.evaluator.Evaluator` (simulate=True,
   simulator noise 0); the table is cached under ``--cache`` keyed by a hash of the problem's
   configuration. Its minimum is the optimum, exactly.
2. Oracle: every launch looks the configuration up in the table and multiplies generate_speed,
   TTFT and TPOT by independent factors ``1 + noise·N(0, 1)`` (seeded by run seed, configuration
   and how many times this run launched it before: common random numbers across methods), then
   scores them with the default objective. A configuration that fails (out of memory, vLLM
   refusing it) has fitness inf and still costs a launch.
3. Methods get the same launch budget; each starts from the default configuration.
4. Regret of a run: its pick (a peer's: the configuration with the best OBSERVED, noisy fitness
   among its first ``budget`` launches; msopt's: ``Driver.best()`` after its top-3 re-measurement,
   inside the budget), scored at its noise-free fitness f:
   ``(f − f_opt) / (f_med − f_opt)``, with f_med the median noise-free fitness of the feasible
   configurations of the problem. 0 = optimum, 1 = a typical configuration.

Modules, in the order of the flow: :mod:`.problems` (the problems and their cached tables;
``problem.toml.in``), :mod:`.oracle`, :mod:`.methods` (one adapter per method, the ablation's
msopt variants), :mod:`.runs` (tasks, the result cache, worker processes), :mod:`.score`, :mod:`.independent`
(AIConfigurator), :mod:`.hours` (hours to a tuned configuration on a simulated cluster,
``scripts/benchmarks/bench_hours.py``),
:mod:`.render` (tables; the prose is in ``report.md.in`` and ``ablation.md.in``) and :mod:`.cli`.
"""
