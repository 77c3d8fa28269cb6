"""Keep ``torch._dynamo`` out of a testbed process: about 1.2-1.8 s of imports per cell.

``torch.optim.Optimizer.{add_param_group, zero_grad, state_dict, load_state_dict}`` are wrapped
by ``torch._disable_dynamo`` (torch 2.13, ``torch/_compile.py``, ``_disable_dynamo.inner``). On
their first call the wrapper imports ``torch._dynamo`` to build ``torch._dynamo.disable(fn)`` and
caches it as ``fn.__dynamo_disable``. The testbed never compiles anything, and outside a
``torch.compile`` trace ``torch._dynamo.disable(fn)`` calls ``fn`` unchanged, so seeding that
cache with ``fn`` itself gives the same behaviour without the import.

Drop this module when torch imports dynamo lazily enough on its own. If torch changes the wrapper,
nothing breaks: :func:`skip_dynamo_import` finds no cache to seed and the import happens on
first call, as before. Never used when anything in the process compiles (the verl backend does
not load it).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

_CACHE_ATTR = "__dynamo_disable"  # the attribute torch/_compile.py caches on the wrapped fn
_WRAPPED = ("add_param_group", "zero_grad", "state_dict", "load_state_dict")


def skip_dynamo_import() -> int:
    """Seed the ``torch._disable_dynamo`` caches of ``torch.optim.Optimizer``; returns how many."""
    seeded = 0
    for name in _WRAPPED:
        fn = getattr(getattr(torch.optim.Optimizer, name, None), "__wrapped__", None)
        if fn is not None and getattr(fn, _CACHE_ATTR, None) is None:
            setattr(fn, _CACHE_ATTR, fn)
            seeded += 1
    return seeded


class AdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose ``step`` runs under ``torch.no_grad()`` directly.

    ``Adam.step`` is wrapped by ``_use_grad_for_differentiable`` (``torch/optim/optimizer.py``,
    ``_use_grad``), which imports ``torch._dynamo`` on every call for two
    ``torch._dynamo.graph_break()`` calls that do nothing outside a ``torch.compile`` trace; with
    ``differentiable=False`` the wrapper is otherwise exactly ``torch.no_grad()``. Same update,
    same state, same hooks (``Optimizer`` adds its profile and hook wrapper to this ``step`` too).
    """

    def __init__(self, params: Any, **kwargs: Any) -> None:
        if kwargs.get("differentiable"):
            raise ValueError("gppo's AdamW: differentiable=True needs torch.optim.AdamW itself")
        skip_dynamo_import()
        super().__init__(params, **kwargs)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        return _ADAM_STEP(self, closure)


_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)  # the update itself, no wrappers
