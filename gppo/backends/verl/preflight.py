"""``gppo-sweep check SPEC``: run each verl cell's loss path on a few synthetic tokens (CPU).

Per cell, what a cluster job would do first, with verl's own code:

1. **config**: compose the cell's Hydra overrides with verl's ``ppo_trainer`` config and run
   verl's pre-flight validation (:mod:`.validate`), which builds verl's ``ActorConfig``;
2. **loss**: a synthetic batch laid out by verl's utilities (:mod:`.synthetic`: no-padding
   nested log-probs, ``response_mask``, ``old_log_probs``, ``advantages``, rollout IS weights),
   with the data-parallel batch info of the cell's real shape (DP = GPUs / sequence parallel;
   ``global_batch_size`` = that many times the synthetic batch), through verl's worker loss
   ``ppo_loss``: the loss must be finite float32, equal to gppo.objectives on the same tokens
   (1e-6), with a finite non-zero gradient w.r.t. the log-probs equal to ours;
3. **bf16**: the same call with bf16 log-probs under autocast (as the engine passes them) gives
   a float32 loss;
4. **metrics**: the returned metrics reduce through verl's ``Metric`` aggregation and map to our
   names (``train/policy_loss``, ``train/approx_kl`` and, for gppo cells, every diagnostic).

Each cell yields a :class:`CellCheck` (ok, or the stage and a one-line reason).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from gppo import metrics as gm
from gppo.backends.checkresult import CellCheck, one_line
from gppo.backends.verl import synthetic as sy
from gppo.backends.verl.metrics_map import DIAGNOSTIC_KEYS, mapped_points
from gppo.cell import Cell
from gppo.errors import BackendError
from gppo.objectives.aggregation import GlobalBatchInfo

ATOL = 1e-6


class _Fail(Exception):
    def __init__(self, stage: str, detail: str) -> None:
        super().__init__(detail)
        self.stage = stage


def _ours(cell: Cell, tokens: sy.SyntheticTokens, mode: str, info: GlobalBatchInfo):
    """gppo.objectives on the padded tokens: (loss, grad w.r.t. log_prob)."""
    from gppo.objectives import agg_loss, defaults, gppo_token_loss
    from gppo.objectives.methods import get_method

    lp = tokens.log_prob.clone().requires_grad_(True)
    p = dict(cell.loss_params)
    p.pop("loss_agg_mode", None)
    if cell.method == "gppo":
        rb = p.get("ratio_bounds", defaults.RATIO_BOUNDS)
        mat, _ = gppo_token_loss(
            tokens.old_log_prob,
            lp,
            tokens.advantages,
            tokens.response_mask,
            divergence=p["divergence"],
            estimator=p["estimator"],
            delta=p.get("delta"),
            r_min=p.get("r_min", defaults.R_MIN),
            ratio_bounds=None if rb is None else tuple(rb),
            dual_clip=p.get("dual_clip", defaults.DUAL_CLIP),
        )
        if tokens.rollout_is_weights is not None:
            mat = mat * tokens.rollout_is_weights
        loss = agg_loss(mat, tokens.response_mask, mode, **info)
    else:
        p.pop("ratio_bounds", None)
        p.pop("dual_clip", None)
        torch.manual_seed(0)  # clip_cov's random choice, as for verl's call
        loss, _ = get_method(cell.method).loss(
            tokens.old_log_prob,
            lp,
            tokens.advantages,
            tokens.response_mask,
            loss_agg_mode=mode,
            global_batch_info=info,
            **p,
        )
    loss.backward()
    return loss.detach(), lp.grad


def _verl_call(actor: Any, tokens: sy.SyntheticTokens, data: Any, bf16: bool = False):
    from verl.workers.utils.padding import no_padding_2_padding

    dtype = torch.bfloat16 if bf16 else torch.float32
    leaf = sy.nested_log_probs(tokens.log_prob.to(dtype), data).detach().requires_grad_(True)
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss, metrics = sy.call_ppo_loss(actor, sy.as_model_output(leaf, data), data)
    loss.backward()
    assert leaf.grad is not None  # a leaf that requires grad, after backward()
    return loss.detach(), no_padding_2_padding(leaf.grad, data).float(), metrics


def _dp_size(settings: Any) -> int:
    """The data-parallel size of the cell's real run (GPUs / Ulysses sequence parallel)."""
    return max(1, settings.n_gpus // max(1, settings.sequence_parallel))


def check_cell(cell: Cell, *, batch_size: int = 4, response_len: int = 12) -> CellCheck:
    """Every stage for one verl cell; never raises for a cell's own failure."""
    from gppo.backends.base import get_backend
    from gppo.backends.verl.overrides import OverrideError, cell_overrides
    from gppo.backends.verl.validate import VerlConfigError, compose_and_validate

    try:
        settings = get_backend("verl").settings_of(cell)
        try:
            get_backend("verl").job(cell)  # today's checks: env, overrides, verl's validation
            overrides = cell_overrides(cell, settings)
            actor = compose_and_validate(tuple(overrides))[1]["actor"]
        except (OverrideError, VerlConfigError, ValueError) as exc:
            raise _Fail("config", one_line(str(exc))) from None
        detail = _loss_path(cell, actor, settings, batch_size, response_len)
    except _Fail as exc:
        return CellCheck(cell.id, False, exc.stage, one_line(str(exc)))
    except Exception as exc:  # verl's or ours, unexpected: report it on the cell's line
        return CellCheck(cell.id, False, "error", one_line(f"{type(exc).__name__}: {exc}"))
    return CellCheck(cell.id, True, "", detail)


def _loss_path(cell: Cell, actor: Any, settings: Any, b: int, r: int) -> str:
    mode = actor.loss_agg_mode
    is_gppo = actor.policy_loss.loss_mode == "gppo"
    dp = _dp_size(settings)
    # gppo cells: with rollout IS weights (our plugin applies them); baselines: verl's own
    # modes, compared without (our baseline functions take none)
    tokens = sy.synthetic_tokens(b, r, seed=1, spread=0.3, is_weights=is_gppo)
    data = sy.synthetic_batch(tokens, seed=1, global_batch_size=b * dp)
    n_tok = int(data["loss_mask"].sum())
    sy.set_engine_batch_info(data, dp_size=dp, other_ranks_tokens=(dp - 1) * n_tok)
    info: GlobalBatchInfo = {
        "dp_size": dp,
        "batch_num_tokens": data["batch_num_tokens"],
        "global_batch_size": b * dp,
        "loss_scale_factor": actor.loss_scale_factor,
    }
    try:
        loss, grad, metrics = _verl_call(actor, tokens, data)
    except Exception as exc:
        raise _Fail("loss", f"verl ppo_loss raised {type(exc).__name__}: {exc}") from None
    mask = tokens.response_mask
    if loss.dtype != torch.float32 or not math.isfinite(float(loss)):
        raise _Fail("loss", f"loss {float(loss)} of dtype {loss.dtype} (want finite float32)")
    if not bool(torch.isfinite(grad).all()) or not bool((grad * mask).abs().sum() > 0):
        raise _Fail("loss", "gradient w.r.t. the log-probs is zero or not finite")
    o_loss, o_grad = _ours(cell, tokens, mode, info)
    if abs(float(loss) - float(o_loss)) > ATOL:
        raise _Fail("loss", f"verl {float(loss):.8g} != gppo.objectives {float(o_loss):.8g}")
    if not torch.allclose(grad * mask, o_grad * mask, rtol=1e-5, atol=1e-7):
        raise _Fail("loss", "gradient w.r.t. the log-probs differs from gppo.objectives'")
    b_loss, _, _ = _verl_call(actor, tokens, data, bf16=True)
    if b_loss.dtype != torch.float32:
        raise _Fail("bf16", f"bf16 log-probs under autocast give a {b_loss.dtype} loss")
    agg = sy.aggregate_metrics([metrics])
    points = {p.key for p in mapped_points({k: [(1, v)] for k, v in agg.items()}, (), 8)}
    wanted = [gm.POLICY_LOSS, gm.APPROX_KL]
    if is_gppo:
        wanted += [gm.train_metric(k) for k in DIAGNOSTIC_KEYS]
    missing = [k for k in wanted if k not in points]
    if missing:
        raise _Fail("metrics", f"not logged under our names: {', '.join(missing)}")
    return (
        f"loss mode {actor.policy_loss.loss_mode}, {mode}, dp={dp}: loss {float(loss):.4g} "
        f"= gppo.objectives, gradient equal, bf16 -> float32, {len(agg)} metrics reduce and map"
    )


class NotAVerlSpec(BackendError):
    """verl (or, for ``--train-step``, vLLM's CPU build) is not installed here (one line)."""


def check_plan(
    plan: Any, spec_path: str, echo: Callable[[str], None], *, train_step: bool = False
) -> list[CellCheck]:
    """:func:`check_cell` for every cell of a verl plan, echoing one line per cell as it goes;
    with ``train_step``, then :func:`gppo.backends.verl.trainstep.train_step` for each cell that
    passed (a second line per cell)."""
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        raise NotAVerlSpec(
            f"{spec_path}: backend: verl is not installed here (pip install -c "
            "requirements/constraints.txt -e '.[verl]')"
        )
    if train_step and importlib.util.find_spec("vllm") is None:
        raise NotAVerlSpec(
            f"{spec_path}: --train-step runs verl's trainer on this CPU and needs vLLM's CPU "
            "build: create the verl CPU environment with scripts/verl-cpu-env.sh and run "
            ".venv-verl-cpu/bin/gppo-sweep check --train-step"
        )
    out = []
    for cell in plan.cells:
        result = check_cell(cell)
        echo(result.line())
        out.append(result)
    if train_step:
        from gppo.backends.verl.trainstep import train_step as one_step

        for cell, loss_check in zip(plan.cells, list(out), strict=True):
            if loss_check.ok:
                result = one_step(cell)
                echo(result.line())
                out.append(result)
    return out
