"""The CPU testbed backend (``backend: local``): our own GRPO-style RL loop with any method of the
objectives registry, on the testbed library (:mod:`gppo.testbed`: tasks, policy, base models,
avg@k). Modules: ``settings`` (the ``local:`` section), ``train`` (the loop), ``backend`` (the
registered Backend), ``__main__`` (a cell's entrypoint), ``forkserver`` (a launch's cells forked
from one process that imported everything once).

Importing the package stays light; the backend class lives in :mod:`.backend`.
"""
