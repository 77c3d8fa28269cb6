"""One registry type for every named plug-in: divergences, estimators, methods, backends, domains.

A :class:`Registry` maps a name to a value (a factory, a class, an object). It refuses a second
registration under a taken name (:class:`~gppo.errors.DuplicateNameError`) and answers a failed
lookup with one wording that lists the known names (:class:`~gppo.errors.UnknownNameError`)::

    unknown divergence 'foo'; known: tv, chi2, kl, hellinger, rkl, js (and alpha:<a>)

Names are listed in declaration order. Entries may be *lazy*: ``add_lazy(name, "module.path")``
names the module whose import registers ``name``, so that ``import gppo`` stays light (the
backends, found through their entry points, and the CPU testbed's domains use this).

Tables derived from a registry in modules that must not import it at import time (the report
reads a CSV without torch) are :class:`LazyTuple` / :class:`LazyMapping`: built on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

from gppo.errors import DuplicateNameError, UnknownNameError

V = TypeVar("V")
K = TypeVar("K")
T = TypeVar("T")


class Registry(Generic[V]):
    """Names → values of one kind (``kind`` is the word used in messages: "divergence", ...).

    ``families`` lists the name patterns a registry accepts on top of its entries (such as
    ``alpha:<a>``); they only appear in the unknown-name message. An entry may carry ``tags``
    (``"paper"``: part of the paper's 4 × 3 grid; ``"baseline"``: a baseline method) so that the
    lists derived from a registry (the default grid, the baselines) are written nowhere else.
    """

    def __init__(
        self,
        kind: str,
        *,
        families: tuple[str, ...] = (),
        discover: Callable[[Registry[V]], None] | None = None,
    ) -> None:
        self.kind = kind
        self.families = families
        #: called once, on the first lookup or listing, to declare more entries (entry points)
        self._discover = discover
        self._entries: dict[str, V] = {}
        self._lazy: dict[str, str] = {}
        self._order: dict[str, frozenset[str]] = {}  # every name in declaration order -> tags

    def add(self, name: str, value: V, *, tags: Iterable[str] = ()) -> V:
        """Register ``value`` as ``name``; a taken name raises :class:`DuplicateNameError`.

        A name declared by :meth:`add_lazy` is registered here when its module is imported (it
        keeps the tags given there, plus ``tags``).
        """
        self._discovered()  # a module imported before the first lookup keeps its declared place
        if name in self._entries:
            raise DuplicateNameError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = value
        self._order[name] = self._order.get(name, frozenset()) | frozenset(tags)
        return value

    def register(self, name: str, *, tags: Iterable[str] = ()) -> Callable[[V], V]:
        """Decorator form of :meth:`add`: ``@REGISTRY.register("tv")``."""

        def deco(value: V) -> V:
            return self.add(name, value, tags=tags)

        return deco

    def add_lazy(self, name: str, module: str, *, tags: Iterable[str] = ()) -> None:
        """Name ``module`` as the one whose import registers ``name`` (imported on first use);
        ``"module:attr"``: that attribute is the value, registered after the import unless the
        module registered ``name`` itself (a plug-in found through an entry point)."""
        if name in self._order:
            raise DuplicateNameError(f"{self.kind} {name!r} is already registered")
        self._lazy[name] = module
        self._order[name] = frozenset(tags)

    def _discovered(self) -> None:
        discover, self._discover = self._discover, None
        if discover is not None:
            discover(self)

    def names(self, tag: str | None = None) -> list[str]:
        """Known names in declaration order (lazy ones included), only those tagged ``tag`` if
        given."""
        self._discovered()
        return [n for n, tags in self._order.items() if tag is None or tag in tags]

    def __contains__(self, name: object) -> bool:
        self._discovered()
        return isinstance(name, str) and name in self._order

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._discovered()
        return len(self._order)

    def unknown(self, name: object, *, tag: str | None = None) -> UnknownNameError:
        """The error for an unknown ``name``, listing the known names (one wording for all).

        With ``tag`` the tag is the word and only the tagged names are listed (``unknown baseline
        'ppo'; known: gspo, ...`` from the method registry).
        """
        known = ", ".join(self.names(tag))
        extra = f" (and {', '.join(self.families)})" if self.families and tag is None else ""
        return UnknownNameError(f"unknown {tag or self.kind} {name!r}; known: {known}{extra}")

    def get(self, name: str, *, tag: str | None = None) -> V:
        """The value registered as ``name`` (importing its module first when lazy); with ``tag``
        only a name carrying that tag is found."""
        self._discovered()
        if tag is not None and (name not in self or tag not in self._order[name]):
            raise self.unknown(name, tag=tag)
        if isinstance(name, str) and name not in self._entries and name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            loaded = importlib.import_module(module)
            if attr and name not in self._entries:
                self._entries[name] = getattr(loaded, attr)
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.unknown(name) from None


class LazyTuple(Sequence[T]):
    """A tuple built by ``build()`` on first use (``in``, ``index``, iteration, ``len``)."""

    def __init__(self, build: Callable[[], Iterable[T]]) -> None:
        self._build = build

    @cached_property
    def _items(self) -> tuple[T, ...]:
        return tuple(self._build())

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[T, ...]: ...
    def __getitem__(self, i: Any) -> Any:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        return self._items == (other._items if isinstance(other, LazyTuple) else other)

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return repr(self._items)


class LazyMapping(Mapping[K, V]):
    """A dict built by ``build()`` on first use (``in``, ``[]``, ``get``, iteration)."""

    def __init__(self, build: Callable[[], Mapping[K, V]]) -> None:
        self._build = build

    @cached_property
    def _data(self) -> dict[K, V]:
        return dict(self._build())

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return repr(self._data)


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's module-level ``__getattr__`` that imports ``exports[name]`` (a submodule of
    ``package``) on first use of ``name``: ``import gppo.sweep`` stays free of Ray and MLflow
    while ``from gppo.sweep import Launcher`` works."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    return __getattr__
