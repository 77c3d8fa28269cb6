"""TRL's ``GRPOTrainer`` with the cell's loss: every GPPO cell and baseline, as in the testbed.

:class:`GppoGRPOTrainer` overrides ``_compute_loss`` only: the per-token log-probs come from TRL's
own helper (``_get_per_token_logps_and_entropies``), π_old from the batch
(``old_per_token_logps``; TRL leaves it out when the update is on-policy, then it is the detached
current log-prob, as in TRL), the advantages are TRL's (group-normalised, broadcast over tokens),
and the loss is the cell's (:func:`gppo.backends.cell_loss.make_loss`, the testbed loop's too; the
verl plugin calls the same objectives through :func:`gppo.objectives.losses.gppo_token_loss`). Its diagnostics (clip fractions per side and per
μ bucket, approx KL, …) are reduced over the step's updates (and, with more than one process,
over the processes) as the testbed reduces them (:func:`gppo.metrics.reduce_step`: the largest
``ratio_max``, the mean of the rest) and handed to ``on_step`` once per generation batch.

Position ids. TRL's log-prob forward passes only ``input_ids`` and ``attention_mask``; a model with
learned absolute positions (GPT-2, the testbed's base) then scores a left-padded prompt at
``arange`` positions while ``generate`` sampled it at positions that count only real tokens. So
:func:`use_mask_positions` gives such a model position ids derived from the attention mask whenever
a caller passes none (``tests/backends/trl/test_trl_positions.py`` fails without it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from trl import GRPOTrainer

from gppo.metrics import reduce_step
from gppo.objectives.defaults import LOSS_AGG_MODE
from gppo.testbed.hf_export import mask_positions

#: ``on_step(step, values)``: one generation batch's metrics under the loss's own keys plus
#: ``score`` (mean reward), ``entropy`` and ``response_length``
StepHook = Callable[[int, dict[str, float]], None]


def use_mask_positions(model: torch.nn.Module) -> Any:
    """Give ``model`` mask-derived position ids on every call without them and without a KV
    cache (a full-sequence forward); returns the hook's handle."""

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        mask = kwargs.get("attention_mask")
        full = kwargs.get("past_key_values") is None  # not a cached generation step
        if full and mask is not None and kwargs.get("position_ids") is None:
            kwargs["position_ids"] = mask_positions(mask)
        return args, kwargs

    return model.register_forward_pre_hook(hook, with_kwargs=True)


class GppoGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose policy loss is ``loss_fn`` (``make_loss(method, params)``)."""

    def __init__(
        self,
        *args: Any,
        loss_fn: Callable[..., tuple[torch.Tensor, dict[str, float]]],
        loss_agg_mode: str = LOSS_AGG_MODE,
        on_step: StepHook | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.gppo_loss_fn, self.gppo_agg, self.on_step = loss_fn, loss_agg_mode, on_step
        self._acc: dict[str, list[float]] = {}
        self._batch: dict[str, float] = {}

    # --- one generation batch: its reward and length (TRL logged them into self._metrics) ---------
    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        mask = out["completion_mask"].float()
        self._batch = {
            "score": float(self._metrics["train"]["reward"][-1]),
            "response_length": float(mask.sum(1).mean()),
        }
        return out

    # --- the loss -----------------------------------------------------------------------------------
    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, mask], dim=1)
        log_prob, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        old = inputs.get("old_per_token_logps")
        old = log_prob.detach() if old is None else old
        adv = inputs["advantages"]
        adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
        adv = adv.expand_as(log_prob).to(log_prob.dtype)
        response_mask = mask.to(log_prob.dtype)
        loss, metrics = self.gppo_loss_fn(
            old, log_prob, adv, response_mask, loss_agg_mode=self.gppo_agg
        )
        if self.model.training:  # type: ignore[union-attr]  # Trainer.__init__ set the model
            loss = loss / self.current_gradient_accumulation_steps
            ent = float(
                (entropies.detach() * response_mask).sum() / response_mask.sum().clamp(min=1)
            )
            for key, value in {
                **metrics,
                "policy_loss": float(loss.detach()),
                "entropy": ent,
            }.items():
                self._acc.setdefault(key, []).append(float(value))
        return loss

    # --- resume ------------------------------------------------------------------------------------
    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """TRL's, except for CPU processes (``num_processes`` > 1): transformers then loads the
        optimiser state onto ``args.device``, ``cpu:0``, a location ``torch.load`` cannot
        restore (transformers 5); the same files are loaded onto ``cpu`` instead."""
        if checkpoint is None or self.args.world_size == 1 or self.args.device.type != "cpu":
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME

        for name, target in ((OPTIMIZER_NAME, self.optimizer), (SCHEDULER_NAME, self.lr_scheduler)):
            path = Path(checkpoint) / name
            if path.is_file():
                state = torch.load(path, map_location="cpu", weights_only=True)
                target.load_state_dict(state)  # type: ignore[union-attr]  # created before resuming

    # --- one step (generation batch) done -----------------------------------------------------------
    def step_done(self, step: int) -> None:
        """Hand the step's metrics (reduced over its updates and processes) to ``on_step`` and
        start anew (every process calls it at the same step: the gather is a collective)."""
        values = reduce_step(self._acc)
        values.update(self._batch)
        self._acc = {}
        if self.accelerator.num_processes > 1:
            values = self._reduce_over_processes(values)
        if self.on_step is not None:
            self.on_step(step, values)

    def _reduce_over_processes(self, values: dict[str, float]) -> dict[str, float]:
        """Each value reduced over the processes by :func:`reduce_step` (all report the same
        keys: the same loss); ``(P, K)`` gathered, one column per key."""
        keys = sorted(values)
        local = torch.tensor([[values[k] for k in keys]], dtype=torch.float64)
        table = self.accelerator.gather(local.to(self.accelerator.device)).cpu()
        return reduce_step({k: table[:, i].tolist() for i, k in enumerate(keys)})
