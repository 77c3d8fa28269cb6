"""The backend protocol in code: what every backend's cell process writes into its MLflow run.

The launcher, the tuner and the report read a cell's run by these rules only (the names of
:mod:`gppo.metrics`), whatever trained it (the CPU testbed, verl, TRL, a backend of your own):

1. **the base model's evaluation, at step 0**: avg@k per benchmark (``eval/<b>/avg_at_k``), their
   mean (``eval/avg_at_k``) and the same scores under ``eval_base/<b>/avg_at_k``
   (:meth:`CellRun.log_evaluation` at step 0);
2. **every training step**: ``train/score`` (what stall detection watches) and the loss
   diagnostics as ``train/<key>`` (:meth:`CellRun.log_train_step`);
3. **the final evaluation at the last step** (and any in between), as in 1 without ``eval_base``;
4. **at the very end**, once the final evaluation is in the store: tag ``gppo.finished=true``
   (:meth:`CellRun.finish`, which refuses to set it without that evaluation).

A retried attempt that resumes the same run (verl, TRL) logs each point once:
``log_evaluation(..., once=True)`` skips a step already in the run, :meth:`CellRun.last_step`
says where the run's history ends; only the run's own checkpoints are resumed
(:func:`gppo.backends.checkpoints.claim_checkpoints`: a later sweep of the same cell starts
afresh). :func:`protocol_violations` checks a finished run against these rules: the backends'
contract test (``tests/backends/test_backend_contract.py``) runs each built-in backend's entrypoint
through it (a backend of your own: call it on a run of yours).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gppo import metrics as M
from gppo.errors import GppoError
from gppo.store.health import exit_if_refused
from gppo.store.run_logger import RunLogger
from gppo.store.tracking import retry_locked, store_client

if TYPE_CHECKING:
    from gppo.store.tracking import MlflowClient


class ProtocolError(GppoError, RuntimeError):
    """A cell process broke the protocol (e.g. ``finish`` before the final evaluation)."""


def evaluation_points(scores: Mapping[str, float], k: int, *, base: bool) -> dict[str, float]:
    """The metrics of one evaluation: avg@k per benchmark, their mean, and with ``base`` (step 0)
    the same scores under ``eval_base/…``. ``scores``: benchmark -> avg@k in [0, 1]."""
    if not scores:
        raise ProtocolError("an evaluation needs at least one benchmark's score")
    out = {M.eval_metric(b, k): float(v) for b, v in scores.items()}
    out[M.eval_domain_metric(k)] = sum(out.values()) / len(scores)
    if base:
        out.update({M.eval_base_metric(b, k): float(v) for b, v in scores.items()})
    return out


class CellRun(RunLogger):
    """One cell's MLflow run as its process writes it (buffered ``log_batch``; SQLite locks retried).

    ``eval_k``: the k of avg@k; ``benchmarks``: the cell's benchmarks (an evaluation must score
    exactly these; empty: any non-empty set).
    """

    def __init__(
        self,
        client: Any,
        run_id: str,
        *,
        eval_k: int,
        benchmarks: Sequence[str] = (),
        flush_every: int = 200,
    ) -> None:
        super().__init__(client, run_id, flush_every=flush_every)
        self.eval_k = eval_k
        self.benchmarks = tuple(benchmarks)
        self._evaluated: set[int] = set()

    @classmethod
    def attach(
        cls, *, eval_k: int, benchmarks: Sequence[str] = (), tracking_uri: str | None = None
    ) -> CellRun | None:
        """The run the dispatcher opened for this process (``MLFLOW_RUN_ID`` in the store at
        ``MLFLOW_TRACKING_URI``, or ``tracking_uri``); ``None`` when run outside a sweep. A tracking
        server that refuses this node's credentials ends the process with one line (exit 1:
        :func:`gppo.store.health.exit_if_refused`)."""
        run_id = os.environ.get(M.ENV_RUN_ID)
        if not run_id:
            return None
        uri = tracking_uri or os.environ.get(M.ENV_TRACKING_URI)
        client = store_client(uri)
        exit_if_refused(client, uri, run_id)  # no credentials on this node: one line, exit 1
        return cls(client, run_id, eval_k=eval_k, benchmarks=benchmarks)

    # --- 1 and 3: evaluations -------------------------------------------------------------------
    def log_evaluation(
        self, scores: Mapping[str, float], step: int, *, once: bool = False
    ) -> dict[str, float] | None:
        """Log avg@k of each benchmark at ``step`` (0: the base model, also as ``eval_base/…``)
        and write it through; ``once``: not if the run already has an evaluation at ``step`` (a
        resumed attempt). Returns the points logged, or ``None`` when skipped."""
        if self.benchmarks and set(scores) != set(self.benchmarks):
            raise ProtocolError(
                f"evaluation at step {step} scored {sorted(scores)}; the cell's benchmarks are "
                f"{sorted(self.benchmarks)}"
            )
        points = evaluation_points(scores, self.eval_k, base=step == 0)
        if once and step in self.evaluated_steps():
            return None
        self.log(points, step)
        self.flush()
        self._evaluated.add(step)
        return points

    def evaluated_steps(self) -> set[int]:
        """The steps at which the run has an evaluation (this process's and the store's)."""
        name = M.eval_domain_metric(self.eval_k)
        history = retry_locked(lambda: self.client.get_metric_history(self.run_id, name))
        return self._evaluated | {int(m.step) for m in history}

    # --- 2: training steps ----------------------------------------------------------------------
    def log_train_step(
        self, step: int, values: Mapping[str, float], *, wall_time_s: float | None = None
    ) -> None:
        """Log one training step: ``values`` are a loss's diagnostics (``score``, ``entropy``,
        ``clip_frac_low``, …; logged as ``train/<key>``) or names already under ``train/``."""
        row = {
            k if k.startswith("train/") else M.train_metric(k): float(v) for k, v in values.items()
        }
        if wall_time_s is not None:
            row[M.WALL_TIME] = float(wall_time_s)
        self.log(row, step)

    def last_step(self, name: str = M.TRAIN_SCORE) -> int:
        """The last step at which the run has ``name`` (0 when none): where a resumed attempt is."""
        self.flush()
        history = retry_locked(lambda: self.client.get_metric_history(self.run_id, name))
        return max((int(m.step) for m in history), default=0)

    # --- 4: the end ---------------------------------------------------------------------------
    def finish(self, final_step: int) -> None:
        """Flush, then tag the run finished; raises :class:`ProtocolError` (and tags nothing) when
        the run has no evaluation at ``final_step``."""
        self.flush()
        if final_step not in self.evaluated_steps():
            raise ProtocolError(f"training ended without a final evaluation at step {final_step}")
        self.set_tags({M.TAG_FINISHED: "true"})


def protocol_violations(
    client: MlflowClient, run_id: str, *, eval_k: int, benchmarks: Sequence[str], final_step: int
) -> list[str]:
    """What a finished cell run lacks of the protocol (empty: none): the base evaluation at step
    0 (with ``eval_base``), a ``train/score`` at every step 1..``final_step``, the final
    evaluation, the finished tag."""
    run = retry_locked(lambda: client.get_run(run_id))
    latest, problems = run.data.metrics, []

    def steps(name: str) -> set[int]:
        return {int(m.step) for m in retry_locked(lambda: client.get_metric_history(run_id, name))}

    for b in benchmarks:
        have = steps(M.eval_metric(b, eval_k))
        problems += [
            f"no {M.eval_metric(b, eval_k)} at step {s}" for s in (0, final_step) if s not in have
        ]
        if M.eval_base_metric(b, eval_k) not in latest:
            problems.append(f"no {M.eval_base_metric(b, eval_k)}")
    domain = steps(M.eval_domain_metric(eval_k))
    problems += [
        f"no {M.eval_domain_metric(eval_k)} at step {s}" for s in (0, final_step) if s not in domain
    ]
    missing = sorted(set(range(1, final_step + 1)) - steps(M.TRAIN_SCORE))
    if missing:
        problems.append(f"no {M.TRAIN_SCORE} at step(s) {missing[:10]}")
    if run.data.tags.get(M.TAG_FINISHED) != "true":
        problems.append(f"tag {M.TAG_FINISHED} is not 'true'")
    return problems
