"""One registry type for every named plug-in: divergences, estimators, methods, backends, domains.

A :class:`Registry` maps a name to a value (a factory, a class, an object). It refuses a second
registration under a taken name (:class:`~gppo.errors.DuplicateNameError`) and answers a failed
lookup with one wording that lists the known names (:class:`~gppo.errors.UnknownNameError`)::

    unknown divergence 'foo'; known: chi2, hellinger, kl, tv (and alpha:<a>)

Entries may be *lazy*: ``add_lazy(name, "module.path")`` names the module whose import registers
``name``, so that ``import gppo`` stays light (the backends use this for ``verl``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from gppo.errors import DuplicateNameError, UnknownNameError

V = TypeVar("V")


class Registry(Generic[V]):
    """Names → values of one kind (``kind`` is the word used in messages: "divergence", ...).

    ``families`` lists the name patterns a registry accepts on top of its entries (such as
    ``alpha:<a>``); they only appear in the unknown-name message.
    """

    def __init__(self, kind: str, *, families: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.families = families
        self._entries: dict[str, V] = {}
        self._lazy: dict[str, str] = {}

    def add(self, name: str, value: V) -> V:
        """Register ``value`` as ``name``; a taken name raises :class:`DuplicateNameError`."""
        if name in self._entries:
            raise DuplicateNameError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = value
        return value

    def register(self, name: str) -> Callable[[V], V]:
        """Decorator form of :meth:`add`: ``@REGISTRY.register("tv")``."""

        def deco(value: V) -> V:
            return self.add(name, value)

        return deco

    def add_lazy(self, name: str, module: str) -> None:
        """Name ``module`` as the one whose import registers ``name`` (imported on first use)."""
        self._lazy[name] = module

    def names(self) -> list[str]:
        """Known names: the registered ones in registration order, then the lazy ones."""
        return [*self._entries, *(n for n in self._lazy if n not in self._entries)]

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def unknown(self, name: object) -> UnknownNameError:
        """The error for an unknown ``name``, listing the known names (one wording for all)."""
        known = ", ".join(self.names())
        extra = f" (and {', '.join(self.families)})" if self.families else ""
        return UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}{extra}")

    def get(self, name: str) -> V:
        """The value registered as ``name`` (importing its module first when lazy)."""
        if isinstance(name, str) and name not in self._entries and name in self._lazy:
            importlib.import_module(self._lazy[name])
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.unknown(name) from None
