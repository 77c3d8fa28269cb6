"""The CPU testbed backend (``backend: local``): synthetic verifiable tasks in two domains,
a small char-level policy, GRPO-style RL with any method of the objectives registry, avg@k.

Importing the package stays light; the backend class lives in :mod:`.backend`.
"""
