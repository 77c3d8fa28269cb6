"""An example gppo-sweep backend in its own package: GRPO with a cell's loss on the CPU testbed.

- :mod:`.backend`: the spec side, ``ExampleBackend`` (its ``example:`` settings section and the
  Ray job of one cell), registered under the ``gppo.backends`` entry-point group;
- :mod:`.__main__`: the job side, one cell: the testbed's base, its tasks and reward, a short GRPO
  loop with the cell's loss, the testbed's evaluator, logged through ``CellRun``.

It imports ``gppo.testbed`` and the shared backend modules only, never another backend.
"""
