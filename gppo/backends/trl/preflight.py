"""``gppo-sweep check`` for ``backend: trl``: each cell's loss, forward and backward, on a synthetic
batch shaped as TRL hands it to :class:`~gppo.backends.trl.trainer.GppoGRPOTrainer` (log-probs
(B, T), advantages broadcast over tokens, a right-padded completion mask)."""

from __future__ import annotations

from gppo.backends.checkresult import CellCheck, one_line
from gppo.cell import Cell


def check_cell(cell: Cell, batch: int = 16, tokens: int = 8) -> CellCheck:
    """The cell's settings and loss parameters accepted (``testbed: false``: its model and data
    files on this machine), its loss finite with a finite, non-zero gradient; one
    :class:`CellCheck`."""
    import torch

    from gppo.backends.cell_loss import make_loss
    from gppo.backends.trl.settings import TrlSettings

    try:
        s = TrlSettings.model_validate(cell.settings)
        loss_fn, agg = make_loss(cell.method, cell.loss_params)
    except Exception as exc:  # the cell's own settings or parameters: one line
        return CellCheck(cell.id, False, "config", one_line(exc))
    if not s.testbed:
        from gppo.backends.trl.realmodel import missing_paths

        missing = missing_paths(s)
        if missing:
            return CellCheck(cell.id, False, "config", f"not found: {'; '.join(missing)}")
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(batch, tokens, generator=g, dtype=torch.float64) * 3
    new = (
        old + 0.2 * torch.randn(batch, tokens, generator=g, dtype=torch.float64)
    ).requires_grad_()
    adv = torch.randn(batch, 1, generator=g, dtype=torch.float64).expand(batch, tokens)
    mask = torch.ones(batch, tokens, dtype=torch.float64)
    mask[::3, tokens // 2 :] = 0
    try:
        loss, _ = loss_fn(old, new, adv, mask, loss_agg_mode=agg)
        loss.backward()
    except Exception as exc:
        return CellCheck(cell.id, False, "loss", one_line(exc))
    grad = new.grad
    if not (torch.isfinite(loss) and grad is not None and torch.isfinite(grad).all()):
        return CellCheck(cell.id, False, "loss", "non-finite loss or gradient")
    if float(grad.abs().sum()) == 0.0:
        return CellCheck(cell.id, False, "loss", "zero gradient on a batch with ratios off 1")
    return CellCheck(cell.id, True, "", f"loss {float(loss.detach()):.4g} ({agg}), gradient finite")
