"""Launch infrastructure, below every engine and benchmark: what a launch is and the helpers an adapter
renders one with (:mod:`~msopt.launch.render`), starting, watching and stopping its processes
(:mod:`~msopt.launch.process`), their logs (:mod:`~msopt.launch.logs`), ports (:mod:`~msopt.launch.ports`),
the files a launch stages (:mod:`~msopt.launch.files`), HCCL's ports and the NPUs' addresses
(:mod:`~msopt.launch.hccl`, :mod:`~msopt.launch.hccn`), and how a trial splits over nodes
(:mod:`~msopt.launch.placement`). It knows no engine, benchmark, simulator or
configuration (the import contracts of pyproject.toml)."""
