"""The one registry type (gppo.registry.Registry) and the five registries built on it.

Every registry refuses a second registration under a taken name and words an unknown name the
same way: ``unknown <kind> 'foo'; known: a, b, c`` (plus `` (and alpha:<a>)`` for divergences).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from gppo.backends.base import BACKENDS, get_backend, register_backend
from gppo.errors import DuplicateNameError, UnknownNameError
from gppo.objectives.divergences import DIVERGENCES, divergence, get_divergence
from gppo.objectives.estimators import ESTIMATORS, get_estimator
from gppo.objectives.methods import METHODS, get_method
from gppo.registry import LazyMapping, LazyTuple, Registry
from gppo.testbed.tasks import DOMAINS, get_domain, register_domain


# ---- the Registry type -----------------------------------------------------------------------
def _widgets() -> Registry[int]:
    reg: Registry[int] = Registry("widget", families=("w:<n>",))
    reg.add("one", 1, tags=("odd",))
    reg.register("two")(2)
    reg.add("three", 3, tags=("odd",))
    return reg


def test_names_in_and_tags() -> None:
    reg = _widgets()
    assert reg.names() == ["one", "two", "three"] == list(reg)
    assert len(reg) == 3
    assert "two" in reg and "four" not in reg and None not in reg and ["one"] not in reg
    assert reg.names("odd") == ["one", "three"]
    assert reg.get("three") == 3


def test_duplicate_refused_and_registry_unchanged() -> None:
    reg = _widgets()
    with pytest.raises(DuplicateNameError, match=r"^widget 'two' is already registered$"):
        reg.add("two", 22)
    with pytest.raises(DuplicateNameError):
        reg.add_lazy("one", "some.module")
    assert reg.get("two") == 2 and reg.names() == ["one", "two", "three"]


@pytest.mark.parametrize("bad", ["four", "", None, 3])
def test_unknown_name_one_wording(bad: object) -> None:
    reg = _widgets()
    with pytest.raises(UnknownNameError) as err:
        reg.get(bad)  # type: ignore[arg-type]
    assert str(err.value) == f"unknown widget {bad!r}; known: one, two, three (and w:<n>)"
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)


def test_unknown_within_a_tag() -> None:
    reg = _widgets()
    assert reg.get("one", tag="odd") == 1
    with pytest.raises(UnknownNameError, match=r"^unknown odd 'two'; known: one, three$"):
        reg.get("two", tag="odd")


def test_lazy_entry_imported_on_first_get(tmp_path, monkeypatch) -> None:
    (tmp_path / "gppo_reg_home.py").write_text(
        "from gppo.registry import Registry\n"
        "REG = Registry('widget')\n"
        "REG.add('early', 0)\n"
        "REG.add_lazy('late', 'gppo_reg_plugin', tags=('plugin',))\n"
    )
    (tmp_path / "gppo_reg_plugin.py").write_text(
        "from gppo_reg_home import REG\nREG.add('late', 42)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("gppo_reg_home", "gppo_reg_plugin"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    from gppo_reg_home import REG  # type: ignore[import-not-found]

    assert "late" in REG and REG.names() == ["early", "late"] and REG.names("plugin") == ["late"]
    assert "gppo_reg_plugin" not in sys.modules  # known by name, not imported
    assert REG.get("late") == 42
    assert "gppo_reg_plugin" in sys.modules
    assert REG.names() == ["early", "late"]  # declaration order kept after the import
    with pytest.raises(DuplicateNameError):
        REG.add("late", 43)


def test_lazy_views_build_on_first_use() -> None:
    calls: list[int] = []

    def build() -> list[str]:
        calls.append(1)
        return ["a", "b"]

    seq = LazyTuple(build)
    table = LazyMapping(lambda: {"x": 1})
    assert calls == []
    assert "b" in seq and seq.index("b") == 1 and seq == ("a", "b") and list(seq) == ["a", "b"]
    assert calls == [1]  # built once
    assert table.get("x") == 1 and "y" not in table and dict(table) == {"x": 1}


@pytest.mark.slow
def test_builtin_backends_and_domains_are_lazy() -> None:
    code = (
        "import sys\n"
        "from gppo.backends.base import BACKENDS, get_backend\n"
        "from gppo.testbed.tasks import DOMAINS\n"
        "names = BACKENDS.names()\n"
        "assert names[:1] == ['local'] and 'verl' in names, names  # and any entry point's\n"
        "assert DOMAINS.names() == ['code', 'math'], DOMAINS.names()\n"
        "backends = [f'gppo.backends.{n}.backend' for n in names]\n"
        "loaded = [m for m in (*backends, 'gppo.testbed.tasks_math', 'torch', 'verl')\n"
        "          if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "assert get_backend('local').name == 'local'\n"
        "assert 'gppo.backends.local.backend' in sys.modules\n"
        "assert 'gppo.backends.verl.backend' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


# ---- the five registries ---------------------------------------------------------------------
#: (registry, its public getter, a public way to register a new value under a name)
REGISTRIES: dict[str, tuple[Registry[Any], Callable[[str], Any], Callable[[str], Any]]] = {
    "divergence": (
        DIVERGENCES,
        get_divergence,
        lambda name: divergence(name)(lambda: get_divergence("tv")),
    ),
    "estimator": (
        ESTIMATORS,
        get_estimator,
        lambda name: ESTIMATORS.add(name, ESTIMATORS.get("mc")),
    ),
    "method": (METHODS, get_method, lambda name: METHODS.add(name, METHODS.get("gppo"))),
    "backend": (
        BACKENDS,
        get_backend,
        lambda name: register_backend(type("Dup", (type(get_backend("local")),), {"name": name})),
    ),
    "domain": (DOMAINS, get_domain, lambda name: register_domain(name)(lambda: get_domain("math"))),
}


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_real_registry_refuses_a_duplicate(kind: str) -> None:
    reg, get, register = REGISTRIES[kind]
    assert reg.kind == kind
    before = reg.names()
    for name in before:
        get(name)  # every entry resolves (lazy ones are imported here)
        with pytest.raises(DuplicateNameError, match=rf"^{kind} '{re.escape(name)}' is already"):
            register(name)
    assert reg.names() == before


@pytest.mark.parametrize("kind", list(REGISTRIES))
def test_real_registry_words_an_unknown_name_the_same_way(kind: str) -> None:
    reg, get, _ = REGISTRIES[kind]
    family = " (and alpha:<a>)" if kind == "divergence" else ""
    expected = f"unknown {kind} 'nope'; known: {', '.join(reg.names())}{family}"
    with pytest.raises(UnknownNameError) as err:
        get("nope")
    assert str(err.value) == expected
    assert isinstance(err.value, KeyError) and isinstance(err.value, ValueError)


def test_a_value_registered_before_the_first_lookup_keeps_its_declared_place() -> None:
    """A module imported before anything has looked a name up (a test importing a backend's
    module first, say) registers itself; the entries its registry discovers still come in their
    declared order, with their tags."""

    def discover(reg: Registry[int]) -> None:
        reg.add_lazy("local", "gppo.nowhere", tags=("built-in",))
        reg.add_lazy("trl", "gppo.nowhere", tags=("built-in",))

    reg: Registry[int] = Registry("backend", discover=discover)
    reg.add("trl", 2)  # the trl module imported first
    assert reg.names() == ["local", "trl"]
    assert reg.names("built-in") == ["local", "trl"]
    assert reg.get("trl") == 2
