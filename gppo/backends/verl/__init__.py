"""The verl backend: each cell as one verl PPO training (Ray job, 8 GPUs) with the GPPO loss.

Modules:

* the spec and the job: ``settings`` (the ``verl:`` section), ``overrides`` (Cell -> Hydra
  overrides), ``validate`` (verl's own config checks), ``backend`` (the registered Backend);
* inside the job: ``__main__`` (the entrypoint: the backend protocol of
  :mod:`gppo.backends.cell_run`), ``metrics_map`` (verl's metric names -> :mod:`gppo.metrics`),
  ``resume`` (a resumed cell logs each step once), ``plugin`` (loss mode ``gppo`` inside verl;
  the ``verl.plugins`` entry point), ``hooks`` (what verl's and vLLM's processes run first),
  ``compat`` (what verl needs to train the testbed's GPT-2);
* built assets: ``smoke`` (the smoke run's tiny model and data), ``tiny`` (a tiny random Qwen2);
* checks: ``preflight`` (``gppo-sweep check``: each cell's loss through verl's worker loss),
  ``synthetic`` (batches laid out as verl's trainer hands them over), ``trainstep`` (``check
  --train-step``: one ``main_ppo`` step), ``engine`` and ``enginecheck`` (verl's FSDP engine in
  this process, one step with our loss), ``gpucheck`` (``scripts/gpu-check.sh``);
* ``cpu/``: verl's whole trainer on a CPU (smoke runs and pre-flight, not training).

Shared with other backends, outside this package: the prepared-data schema
(:mod:`gppo.backends.rldata`, ``gppo-sweep data prepare``), the reward by ``data_source``
(:mod:`gppo.backends.rewards`, loaded by verl as ``custom_reward_function``) and the testbed as a
Hugging Face task (:mod:`gppo.testbed.hf_assets`, ``verl.testbed: true``). Nothing here imports
verl at import time except ``plugin``.
"""
