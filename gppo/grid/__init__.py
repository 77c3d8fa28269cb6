"""Grid specs: schema, validation with one-line errors, deterministic expansion into cells."""

from gppo.grid.cell import Cell, Resources

__all__ = ["Cell", "Resources"]
