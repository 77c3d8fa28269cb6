"""The command help reads as flowing text at any width: no command's description breaks where its
docstring's lines happen to end."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gppo.cli import app
from gppo.cli.help_text import flowing


def test_paragraphs_flow_and_verbatim_ones_stay() -> None:
    doc = """First line of the first
    paragraph, continued.

    Second paragraph
    over two lines.

    \b
    kept
    as written
    """
    assert flowing(doc) == (
        "First line of the first paragraph, continued.\n\n"
        "Second paragraph over two lines.\n\n\b\nkept\nas written"
    )
    assert flowing(None) is None


@pytest.mark.parametrize("width", ["80", "250"])
def test_the_command_list_wraps_at_the_terminal_not_the_docstring(width: str) -> None:
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": width}).output
    assert "seed, and" in out
    if width == "250":  # wide enough for every description on one line
        rows = [line for line in out.splitlines() if "seed, and" in line]
        assert "each cell's exact job command" in rows[0], out


def test_every_commands_first_paragraph_is_one_line() -> None:
    for info in app.registered_commands:
        first = (info.help or "").split("\n\n")[0]
        assert "\n" not in first, (info.name, first)
