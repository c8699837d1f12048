"""Workloads: what a measurement trains. `Workload` is the contract (a model, the batches of
each rank and step, the loss, and optionally a metric); `load.load_workload` builds one from a
built-in name or ``MODULE:FACTORY`` / ``path/to/file.py:FACTORY``. The built-ins: ``mlp`` and
``tiny`` (MLPs on a fixed random batch), ``cnn`` (a small ResNet), ``gpt`` (a small GPT),
``teacher`` and ``digits`` (the convergence tasks)."""
