"""Entry point of one cell: ``python -m gppo.backends.local --cell '<Cell JSON>'``.

Under the dispatcher (``MLFLOW_RUN_ID`` set) it logs into that run and leaves it open (the
dispatcher terminates it). Standalone it creates its own run (experiment ``gppo-local`` unless
``--experiment``) and ends it; friendlier flags build the cell, e.g.
``python -m gppo.backends.local --method kl --estimator atomic --set steps=10``.
A retried attempt starts clean: nothing is resumed except the cached base model.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any

from gppo import metrics as M
from gppo.backends.cell_run import CellRun, evaluation_points
from gppo.cell import DEFAULT_EVAL_K, Cell, cell_id
from gppo.store.tracking import cell_tags, store_client
from gppo.testbed import cpu_kernels

#: ``1`` in a cell process forked by the launch's fork server (:mod:`.forkserver`; the run's
#: ``perf/forked``)
ENV_FORKED = "GPPO_FORKED_CELL"


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cell_from_flags(args: argparse.Namespace) -> Cell:
    """A Cell from ``--method/--divergence/--estimator/--seed/--domain/--set`` flags."""
    from gppo.objectives.divergences import DIVERGENCES, parse_alpha

    method, div, est = args.method, args.divergence, args.estimator
    if method in DIVERGENCES or parse_alpha(method) is not None:
        method, div = "gppo", method
    settings: dict[str, Any] = {}
    if args.domain:
        settings["domain"] = args.domain
    for item in args.set or []:
        key, _, value = item.partition("=")
        settings[key] = _parse_value(value)
    loss_params: dict[str, Any] = {}
    if method == "gppo":
        if not (div and est):
            raise SystemExit("--method gppo needs --divergence and --estimator")
        loss_params = {"divergence": div, "estimator": est}
        if args.delta is not None:
            loss_params["delta"] = args.delta
        ident = cell_id(div, est, args.seed)
    else:
        ident = cell_id(method, seed=args.seed)
    return Cell(
        id=ident,
        method=method,
        seed=args.seed,
        loss_params=loss_params,
        backend="local",
        settings=settings,
        eval_k=args.k,
    )


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _process_age_s() -> float:
    """Seconds since this process started (its creation time, from psutil)."""
    import psutil

    return time.time() - psutil.Process().create_time()


class _Measures:
    """A cell's evaluations (avg@k, the base's from the cache) and answer probes, logged through
    ``log`` when given, with the seconds they took (``eval_s``)."""

    def __init__(self, cell: Cell, s: Any, domain: Any, benchmarks: list[str], base: Any,
                 log: CellRun | None, say: Any) -> None:  # fmt: skip
        from gppo.testbed.answer_prob import probe_problems

        self.cell, self.s, self.domain, self.benchmarks = cell, s, domain, benchmarks
        self.base, self.policy, self.log, self.say = base, base.policy, log, say
        self.evals: dict[int, dict[str, float]] = {}
        self.probes: dict[int, dict[str, float]] = {}
        self.probe_set = probe_problems(domain)
        self.reused = False  # the base's step-0 evaluation came from the cache
        self.eval_s = 0.0

    def _measure(self) -> dict[str, float]:
        from gppo.testbed.evaluate import evaluate

        s = self.s
        return evaluate(self.policy, self.domain, self.benchmarks, self.cell.eval_k, s.eval_seed,
                        s.eval_prompts)  # fmt: skip

    def evaluate(self, step: int) -> None:
        """avg@k at ``step`` (0: the base model, the same numbers in every cell, computed once)."""
        from gppo.testbed.base_eval import cached_base_eval

        t0, k = time.perf_counter(), self.cell.eval_k
        if step == 0:
            res, self.reused = cached_base_eval(
                self.base, self.s, self.benchmarks, k, self._measure
            )
        else:
            res = self._measure()
        self.evals[step] = evaluation_points(res, k, base=False)
        if self.log is not None:
            self.log.log_evaluation(res, step)
        self.say(
            f"[{self.cell.id}] eval step {step}: "
            + json.dumps({key: round(v, 3) for key, v in res.items()})
            + (
                " (the base model's, computed by an earlier cell)"
                if step == 0 and self.reused
                else ""
            )
        )
        self.eval_s += time.perf_counter() - t0

    def probe(self, step: int) -> None:
        """The correct answers' probability (teacher-forced, no randomness): the exploration
        study's direct measure of how fast RL raises them (docs/studies/exploration.md)."""
        from gppo.testbed.answer_prob import answer_summary

        a = answer_summary(self.policy, self.probe_set)
        self.probes[step] = a
        if self.log is not None:
            self.log.log(
                {
                    M.PROBE_P_ANSWER: a["p_answer"],
                    M.PROBE_ANSWER_TOKEN_MU: a["answer_token_mu"],
                    M.PROBE_ANSWER_RARE_FRAC: a["answer_rare_frac"],
                },
                step,
            )

    def select(self) -> None:
        """The held-out selection score (validation prompts, never reported), at the last step."""
        from gppo.testbed.evaluate import avg_at_k

        t0, s, k = time.perf_counter(), self.s, self.cell.eval_k
        sets = {b: self.domain.validation(b)[: s.eval_prompts] for b in self.benchmarks}
        picked = avg_at_k(self.policy, self.domain, sets, k, s.eval_seed)
        points = {M.select_metric(k, b): v for b, v in picked.items()}
        points[M.select_metric(k)] = sum(picked.values()) / len(picked)
        if self.log is not None:
            self.log.log(points, s.steps)
        self.eval_s += time.perf_counter() - t0


def _train(cell: Cell, s: Any, trainer: Any, measures: _Measures, log: CellRun | None, say: Any,
           t_start: float) -> list[dict[str, float]]:  # fmt: skip
    """``s.steps`` training steps, each logged; the probe and the periodic evaluations between."""
    history = []
    for step in range(1, s.steps + 1):
        out = trainer.step()
        wall = time.perf_counter() - t_start
        history.append(out)
        if log is not None:
            log.log_train_step(step, out, wall_time_s=wall)
        if M.probe_step(step, s.steps):
            measures.probe(step)
        if step % 5 == 0 or step == s.steps:
            say(
                f"[{cell.id}] step {step} score {out['score']:.3f} "
                f"clip {out.get('clip_frac_low', 0) + out.get('clip_frac_high', 0):.4f} "
                f"kl {out.get('approx_kl', 0):.2e} {wall:.1f}s"
            )
        if s.eval_every and step % s.eval_every == 0 and step != s.steps:
            measures.evaluate(step)
    return history


def run_cell(cell: Cell, log: CellRun | None = None, verbose: bool = True) -> dict[str, Any]:
    """Train and evaluate one cell, logging into its run through ``log`` when given (the
    backend protocol: :mod:`gppo.backends.cell_run`)."""
    import torch

    from gppo.backends.cell_loss import make_loss
    from gppo.backends.local.settings import LocalSettings
    from gppo.backends.local.train import Trainer
    from gppo.testbed.tasks import get_domain
    from gppo.testbed.warmstart import load_base_model, warmstart_hash

    t_start = time.perf_counter()
    startup = _process_age_s()  # process start -> here: interpreter, imports, MLflow client
    s = LocalSettings.model_validate(cell.settings)
    torch.set_num_threads(s.num_threads)
    domain = get_domain(s.domain)
    benchmarks = list(cell.benchmarks) or list(domain.benchmark_names)
    for b in benchmarks:
        domain.family(b)  # unknown benchmark -> KeyError listing the known ones
    loss_fn, agg = make_loss(cell.method, cell.loss_params)  # fail fast on bad params
    if log is not None:
        log.log_missing_params(cell, {"local.warmstart_hash": warmstart_hash(s)})
    say = print if verbose else (lambda *a, **k: None)
    base = load_base_model(s, say=lambda line: print(f"[{cell.id}] {line}", flush=True))
    policy = base.policy
    t_base = time.perf_counter() - t_start
    say(f"[{cell.id}] base model {base.source} ({base.path}) in {t_base:.1f}s")

    measures = _Measures(cell, s, domain, benchmarks, base, log, say)
    measures.evaluate(0)
    t0 = time.perf_counter()
    measures.probe(0)
    measures.eval_s += time.perf_counter() - t0  # the base's probe counts as evaluation time
    base_params = [q.detach().clone() for q in policy.parameters()]
    trainer = Trainer(policy, domain, s, loss_fn, cell.seed, agg)
    t_train0 = time.perf_counter()
    history = _train(cell, s, trainer, measures, log, say, t_start)
    t_train = time.perf_counter() - t_train0  # (the periodic evaluations included, as before)
    if s.steps > 0:
        measures.evaluate(s.steps)
    if cell.select:
        measures.select()
    delta = sum(
        float((q.detach() - b).pow(2).sum())
        for q, b in zip(policy.parameters(), base_params, strict=False)
    )
    perf = _perf(trainer.profile, delta**0.5, t_base, measures, t_train, t_start, startup)
    if log is not None:
        log.log(perf, s.steps)
        log.finish(s.steps)
    return {
        "cell": cell.id,
        "built_base": base.built,
        "base_source": base.source,
        "evals": {str(k): v for k, v in measures.evals.items()},
        "probes": {str(k): v for k, v in measures.probes.items()},
        "history": history,
        "perf": perf,
    }


def _perf(prof: Any, delta_l2: float, t_base: float, measures: _Measures, t_train: float,
          t_start: float, startup: float) -> dict[str, float]:  # fmt: skip
    """The cell's ``perf/*`` metrics: where its time and memory went."""
    return {
        M.PERF_PARAM_DELTA_L2: delta_l2,
        M.PERF_BASE_MODEL_S: t_base,
        M.PERF_EVAL_S: measures.eval_s,
        M.PERF_BASE_EVAL_REUSED: float(measures.reused),
        M.PERF_TRAIN_S: t_train,
        M.PERF_SAMPLE_S: prof.sample_s,
        M.PERF_UPDATE_S: prof.update_s,
        M.PERF_SAMPLE_TOKENS_PER_S: prof.sample_tokens / max(prof.sample_s, 1e-9),
        M.PERF_UPDATE_TOKENS_PER_S: prof.update_tokens / max(prof.update_s, 1e-9),
        M.PERF_PEAK_RSS_MB: _peak_rss_mb(),
        M.PERF_TOTAL_S: time.perf_counter() - t_start,
        M.PERF_STARTUP_S: startup,
        M.PERF_FORKED: float(os.environ.get(ENV_FORKED) == "1"),  # by the fork server
        M.PERF_CPU_S: time.process_time(),  # whole process, imports included
    }


def _standalone_run(client: Any, cell: Cell, experiment: str) -> str:
    from gppo.backends.local.settings import LocalSettings

    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
    domain = LocalSettings.model_validate(cell.settings).domain
    tags = {**cell_tags(cell, attempt=0), M.TAG_DOMAIN: domain}
    return client.create_run(exp_id, tags=tags, run_name=cell.id).info.run_id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gppo.backends.local", description=__doc__)
    p.add_argument("--cell", help="the resolved Cell as JSON (what the dispatcher passes)")
    p.add_argument("--method", default="grpo", help="method name, or a divergence for gppo")
    p.add_argument("--divergence")
    p.add_argument("--estimator")
    p.add_argument("--delta", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--domain", choices=["math", "code"])
    p.add_argument("--k", type=int, default=DEFAULT_EVAL_K, help="samples per prompt for avg@k")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a LocalSettings field")
    p.add_argument("--tracking-uri", help="standalone: MLflow store (default MLflow's)")
    p.add_argument("--experiment", default="gppo-local", help="standalone: experiment name")
    p.add_argument("--no-mlflow", action="store_true", help="standalone: do not log anywhere")
    p.add_argument("--summary-json", help="write a JSON summary (evals, history, perf) here")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    cell = Cell.from_json(args.cell) if args.cell else cell_from_flags(args)
    cpu_kernels.apply(cpu_kernels.mode_of(cell.settings))  # before torch's first operation
    # in a sweep: the dispatcher's run (no credentials on this node: one line, exit 1)
    log = CellRun.attach(
        eval_k=cell.eval_k, benchmarks=cell.benchmarks, tracking_uri=args.tracking_uri
    )
    standalone = None
    if log is None and not args.no_mlflow:  # standalone: a run of its own, ended here
        client = store_client(args.tracking_uri)
        run_id = _standalone_run(client, cell, args.experiment)
        print(f"standalone MLflow run {run_id}", file=sys.stderr)
        log = standalone = CellRun(client, run_id, eval_k=cell.eval_k, benchmarks=cell.benchmarks)
    try:
        summary = run_cell(cell, log, verbose=not args.quiet)
    except BaseException:
        if standalone is not None:
            standalone.client.set_terminated(standalone.run_id, "FAILED")
        raise
    if standalone is not None:
        standalone.client.set_terminated(standalone.run_id, "FINISHED")
    if args.summary_json:
        with open(args.summary_json, "w") as fh:
            json.dump(summary, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
