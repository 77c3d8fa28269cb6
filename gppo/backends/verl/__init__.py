"""The verl backend: each cell as one verl PPO training (Ray job, 8 GPUs) with the GPPO loss.

Modules: ``settings`` (the ``verl:`` spec section), ``overrides`` (Cell -> Hydra overrides),
``validate`` (verl's own config checks), ``plugin`` (loss mode ``gppo`` inside verl; the
``verl.plugins`` entry point), ``reward`` (benchmark names -> verl's scorers), ``metrics_map``
(verl's metric names -> :mod:`gppo.metrics`), ``data`` (what ``gppo-sweep data
prepare``, in :mod:`gppo.cli.data`, writes), ``backend`` (the registered Backend) and ``__main__`` (the job's entrypoint).
Nothing here imports verl at import time except ``plugin``.
"""
