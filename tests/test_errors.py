"""One error tree: every exception class gppo defines is a GppoError, drawn in gppo/errors.py,
and the CLI turns each into one line on stderr and its exit code."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import typer

from gppo import errors
from gppo.cli.exit_codes import fail, one_line_errors

ROOT = Path(__file__).resolve().parents[1] / "gppo"


def defined_exception_classes() -> list[tuple[str, str]]:
    """(module, class name) of every public class in gppo/ whose bases name an exception."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = [ast.unparse(b) for b in node.bases]
                if any(
                    b.endswith(("Error", "Exception", "Busy", "Exists", "Shared")) for b in bases
                ):
                    out.append((module.removesuffix(".__init__"), node.name))
    return out


@pytest.mark.parametrize("module,name", defined_exception_classes())
def test_every_error_is_a_gppo_error(module, name):
    if module.startswith("gppo.backends.verl"):
        pytest.importorskip(
            "verl"
        )  # the verl backend's modules import verl lazily; not needed here
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, errors.GppoError), f"{module}.{name} is not under GppoError"
    assert cls.exit_code in (errors.EXIT_FAILED, errors.EXIT_USAGE)


def test_the_tree_in_the_docstring_names_every_class():
    drawn = errors.__doc__
    for name, obj in vars(errors).items():
        if isinstance(obj, type) and issubclass(obj, errors.GppoError):
            assert name in drawn, f"{name} is missing from gppo/errors.py's tree"


@pytest.mark.parametrize(
    "exc,code",
    [
        (errors.SpecError("grid.yaml", "grid.divergences[0]", "unknown divergence 'x'"), 2),
        (errors.UnknownNameError("unknown backend 'x'; known: local, verl"), 2),
        (errors.LaunchBusy("sweep s is held by host:1"), 1),
        (errors.StoreNotShared("grid.yaml: a remote cluster cannot reach sqlite:///m.db"), 2),
        (errors.TuneError("3 of 4 trials failed"), 1),
        (errors.ReportError("a.csv: row 2, column score: 41.5 is outside [0, 1]"), 2),
    ],
)
def test_cli_prints_one_line_and_the_code(exc, code, capsys):
    @one_line_errors
    def command() -> None:
        raise exc

    with pytest.raises(typer.Exit) as ended:
        command()
    assert ended.value.exit_code == code
    err = capsys.readouterr().err
    assert err == str(exc) + "\n" and err.count("\n") == 1


def test_other_exceptions_are_not_swallowed():
    @one_line_errors
    def command() -> None:
        raise ZeroDivisionError("a bug, with its traceback")

    with pytest.raises(ZeroDivisionError):
        command()


def test_fail_with_a_message_is_usage_error(capsys):
    assert fail("give a SPEC").exit_code == 2
    assert capsys.readouterr().err == "give a SPEC\n"


def test_unknown_name_is_a_key_error_and_a_value_error():
    exc = errors.UnknownNameError("unknown divergence 'x'; known: tv")
    assert isinstance(exc, KeyError) and isinstance(exc, ValueError)
    assert str(exc) == "unknown divergence 'x'; known: tv"  # not KeyError's repr
