"""The TRL backend: each cell as one TRL ``GRPOTrainer`` run on one node (a laptop CPU, one GPU,
or several GPUs as data-parallel processes under ``accelerate launch``) with the cell's loss
(``backend: trl``).

Modules: ``settings`` (the ``trl:`` spec section), ``trainer`` (the ``GRPOTrainer`` subclass whose
loss is the cell's, and the position-id fix for left-padded GPT-2-style models), ``backend`` (the
registered Backend), ``preflight`` (``gppo-sweep check``: each cell's loss on a synthetic batch in
TRL's shapes), ``realmodel`` (the ``testbed: false`` route: a model of your own on data from
``gppo-sweep data prepare -b trl``, scored by :mod:`gppo.backends.rewards`) and ``__main__`` (the
job's entrypoint: the backend protocol of :mod:`gppo.backends.cell_run`; its ``testbed: true``
route trains the testbed's exported base from :mod:`gppo.testbed.hf_assets`). Nothing here
imports TRL at import time except ``trainer``.
"""
