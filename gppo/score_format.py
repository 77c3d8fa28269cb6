"""How a score is shown: a fraction as an exact decimal percent, rounded half up.

Table 1, the report page and the launch log all print avg@k this way, so that the same run reads
the same everywhere (0.3465 → ``34.7``, never ``34.6`` from binary floating point).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def pct(score: float) -> Decimal:
    """A fraction as an exact decimal percent (0.346 -> Decimal('34.600'))."""
    return Decimal(repr(float(score))) * 100


def quantize(value: Decimal, places: int) -> Decimal:
    """``value`` rounded half up to ``places`` decimals (Table 1's rounding)."""
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
