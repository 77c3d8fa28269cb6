"""The testbed's settings with one home: its base model's recipe and its RL defaults.

* :class:`BaseModelSettings`: what the base model depends on (domain, policy shape, the
  ``warmstart_*`` recipe) and where a self-built one is cached. The ``local`` backend's
  ``LocalSettings`` extends it; a trainer that trains the testbed's base (TRL's and verl's
  ``testbed: true``) builds one from its own section (:func:`base_settings`), so the same settings
  give the same warm-start key, the same shipped file and the same exported model.
* :data:`RL`: the testbed's RL defaults (the quick-start budget: steps, prompts per step, G,
  mini-batches, epochs, learning rate, clip, temperature, evaluation seed), which every backend
  section that trains on the testbed uses as its own defaults (``tests/testbed`` checks they
  agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from gppo.store.cost import DRIVES_COST, NO_COST


@dataclass(frozen=True)
class RLDefaults:
    """The testbed's RL settings (GRPO-style, one step = one generation batch and its updates)."""

    steps: int = 60
    prompts_per_step: int = 32
    group_size: int = 8
    minibatches: int = 8
    ppo_epochs: int = 1
    lr: float = 1e-4
    weight_decay: float = 0.0
    grad_clip: float | None = 1.0
    temperature: float = 1.0
    #: the evaluation's sampling seed (avg@k): a base scores its shipped record with it
    eval_seed: int = 1234
    #: torch's (OpenMP's) threads in a CPU cell: one, the reduction order the shipped numbers have
    num_threads: int = 1


#: the testbed's RL defaults, read by every section that trains on the testbed
RL = RLDefaults()
#: avg@k's sampling temperature: the testbed's evaluator, and TRL's and verl's ``val_temperature``
EVAL_TEMPERATURE = 1.0


class BaseModelSettings(BaseModel):
    """The base model's settings (unknown keys are rejected).

    The warm start ("base model") depends only on the ``domain``, ``d_model``/``n_layers``/
    ``n_heads`` and ``warmstart_*`` fields (:func:`gppo.testbed.warmstart.warmstart_key`), so every
    cell of a sweep shares one base model: the shipped one for the defaults and the exploration
    family (:mod:`gppo.testbed.shipped`), else built once and cached under ``cache_dir``.
    ``base_temperature`` changes the base as loaded, not its file: the loaded policy's logits are
    the file's divided by τ (:func:`gppo.testbed.policy.fold_temperature`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: Annotated[Literal["math", "code"], DRIVES_COST] = "math"
    # policy
    d_model: Annotated[int, DRIVES_COST] = Field(128, ge=16)
    n_layers: Annotated[int, DRIVES_COST] = Field(2, ge=1)
    n_heads: Annotated[int, DRIVES_COST] = Field(4, ge=1)
    # base model: supervised warm start on a noisy distribution, stopped on a validation target
    # (shipped with the package for the defaults, else built once and cached on disk)
    warmstart_steps: Annotated[int, DRIVES_COST] = Field(
        30000, ge=0, description="the most supervised steps, restarts included"
    )
    warmstart_target: Annotated[float | None, DRIVES_COST] = Field(
        None,
        gt=0,
        le=1,
        description="stop at the first check whose validation avg@k (domain mean) reaches this; "
        "None: the domain's (math 0.25, code 0.10); 1.0: run every step",
    )
    warmstart_check_every: Annotated[int, DRIVES_COST] = Field(
        50, ge=1, description="steps between validation checks"
    )
    warmstart_fine_check_every: Annotated[int | None, DRIVES_COST] = Field(
        None,
        ge=1,
        description="steps between checks once validation reaches half the target; "
        "None: warmstart_check_every throughout",
    )
    warmstart_restart_after: Annotated[int | None, DRIVES_COST] = Field(
        4000,
        ge=1,
        description="an attempt whose checks have not reached half the target in this many steps "
        "starts over from fresh weights; None: never",
    )
    warmstart_batch: Annotated[int, DRIVES_COST] = Field(128, ge=1)
    warmstart_lr: Annotated[float, DRIVES_COST] = Field(
        1e-3, gt=0, description="constant after a 50-step warm-up"
    )
    warmstart_noise: Annotated[float, DRIVES_COST] = Field(
        0.3, ge=0, le=1, description="share of training answers replaced by a plausible wrong one"
    )
    warmstart_seed: Annotated[int, DRIVES_COST] = 0
    # the base as loaded: a temperature folded into its final layer (not in the warm-start key:
    # every value loads the same shipped or built file, then divides the final LayerNorm by it)
    base_temperature: Annotated[float, DRIVES_COST] = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description="τ folded into the base's final layer (its logits / τ): above 1 the correct "
        "answers get rarer, every token's ranking kept (docs/studies/rare-learnable.md); "
        "1: the base as shipped",
    )
    cache_dir: Annotated[str | None, NO_COST] = Field(
        None,
        description="where self-built bases are cached (None: the cache root's bases/, "
        "gppo.testbed.cache.cache_root)",
    )

    @model_validator(mode="after")
    def _heads_divide_width(self) -> BaseModelSettings:
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_neutral_settings(handler(self))


#: the base-model settings that leave the base as loaded unchanged at their neutral value: there
#: they stay out of the settings' dump (:func:`without_neutral_settings`), so a cell written
#: before they existed keeps its settings hash (and its run)
NEUTRAL_SETTINGS: dict[str, Any] = {"base_temperature": 1.0}


#: a settings dump's value type (kept by the filters below)
V = TypeVar("V")


def without_neutral_settings(data: Mapping[str, V]) -> dict[str, V]:
    """``data`` (a settings dump) without the :data:`NEUTRAL_SETTINGS` at their neutral value."""
    return {
        k: v for k, v in data.items() if not (k in NEUTRAL_SETTINGS and v == NEUTRAL_SETTINGS[k])
    }


#: the fields of another trainer's section that pick a base of the testbed's family: off (None),
#: they stay out of the section's dump (:func:`without_off_choices`), so a cell written before
#: they existed keeps its settings hash (and its run)
BASE_CHOICES = ("warmstart_target",)


def without_off_choices(data: Mapping[str, V]) -> dict[str, V]:
    """``data`` (a section's dump) without the :data:`BASE_CHOICES` that are None."""
    return {k: v for k, v in data.items() if not (k in BASE_CHOICES and v is None)}


class ChoosesABase(BaseModel):
    """Base class of another trainer's section that can pick a base of the testbed's family (TRL's,
    verl's): its dump leaves out the :data:`BASE_CHOICES` that are off, and the settings that do
    not act on this cell (:meth:`idle_settings`), so a cell written before they existed keeps its
    settings hash (and its run)."""

    def idle_settings(self) -> tuple[str, ...]:
        """The fields that do not act on this cell as configured (none here)."""
        return ()

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        idle = self.idle_settings()
        return {k: v for k, v in without_off_choices(handler(self)).items() if k not in idle}


def base_settings(domain: str = "math", warmstart_target: float | None = None) -> BaseModelSettings:
    """The base of ``domain`` picked by its warm-start target (None: the domain's default base):
    what a ``testbed: true`` section of another trainer selects its base by."""
    return BaseModelSettings(domain=domain, warmstart_target=warmstart_target)
