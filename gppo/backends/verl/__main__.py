"""The verl cell's Ray-job entrypoint: ``python -m gppo.backends.verl [options] -- OVERRIDES``.

1. imports the plugin (loss mode ``gppo``) and validates the overrides with verl's own config
   code, so a bad cell fails in seconds with one line, before Ray allocates GPUs;
2. mirrors verl's metrics onto our names in the cell's MLflow run (``MLFLOW_RUN_ID``) every
   ``--mirror-every`` seconds while training runs, and once more at the end;
3. runs ``verl.trainer.main_ppo.main`` with the overrides (exactly ``python -m
   verl.trainer.main_ppo OVERRIDES``), which resumes from the cell's checkpoint directory when
   this run's earlier attempt left it (another run's are removed first:
   :mod:`gppo.backends.checkpoints`; a checkpoint saved but never logged is moved back to the
   run's latest logged step: :mod:`gppo.backends.verl.resume`);
4. after the final evaluation is in the run, sets tag ``gppo.finished=true``.

With ``--testbed DOMAIN`` (a ``verl.testbed: true`` cell) it first builds the testbed's assets
(the exported base, the benchmarks, the seed's training stream: :mod:`.testbed`), and the scores
are the testbed evaluator's (:mod:`.yardstick`): the base model's before verl starts (step 0) and
the last checkpoint's after it ends (step ``--total-steps``); verl's own validation is kept as
``verl_val/…``.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence

from gppo import metrics
from gppo.backends.cell_run import CellRun, ProtocolError
from gppo.cell import DEFAULT_EVAL_K
from gppo.testbed import cpu_kernels
from gppo.testbed.settings import RL


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m gppo.backends.verl [options] -- HYDRA_OVERRIDES...")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m gppo.backends.verl")
    parser.add_argument("--benchmarks", required=True, help="comma-separated data_source names")
    parser.add_argument("--eval-k", type=int, default=DEFAULT_EVAL_K)
    parser.add_argument("--total-steps", type=int, required=True)
    parser.add_argument("--mirror-every", type=float, default=60.0, help="seconds")
    parser.add_argument(
        "--checkpoint-dir", help="the cell's verl checkpoints (trainer.default_local_dir)"
    )
    parser.add_argument("--check-only", action="store_true", help="validate and exit")
    parser.add_argument(
        "--cpu-kernels", choices=cpu_kernels.MODES, help="a CPU cell's kernels (verl.cpu_kernels)"
    )
    parser.add_argument(
        "--testbed", metavar="DOMAIN", help="a verl.testbed cell: the testbed's assets and scores"
    )
    parser.add_argument("--seed", type=int, default=0, help="the cell's seed (--testbed)")
    parser.add_argument(
        "--prompts-per-step", type=int, default=RL.prompts_per_step, help="(--testbed)"
    )
    parser.add_argument("--eval-seed", type=int, default=RL.eval_seed, help="(--testbed)")
    parser.add_argument(
        "--warmstart-target", type=float, default=None, help="(--testbed) the base's; none: default"
    )
    return parser.parse_args(argv[:split]), argv[split + 1 :]


class _Mirror:
    """Background mirroring of verl's metrics onto ours (driver process, MLflow client only)."""

    def __init__(self, run: CellRun, every: float, verl_scores: bool = True) -> None:
        self.run, self.client, self.run_id = run, run.client, run.run_id
        self.benchmarks, self.k, self.every = list(run.benchmarks), run.eval_k, every
        self.verl_scores = verl_scores
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gppo-mirror", daemon=True)

    def once(self) -> list:
        from gppo.backends.verl.metrics_map import mirror_run

        return mirror_run(self.client, self.run_id, self.benchmarks, self.k, self.verl_scores)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.once()
            except Exception as exc:  # a flaky tracking server must not kill training
                print(f"[gppo] metric mirror failed (will retry): {exc}", file=sys.stderr)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class _Testbed:
    """The testbed side of a ``verl.testbed`` cell: its assets and the testbed evaluator's scores."""

    def __init__(self, args: argparse.Namespace, benchmarks: list[str]) -> None:
        self.args, self.benchmarks = args, benchmarks

    def prepare(self) -> None:
        from gppo.testbed.hf_assets import build_testbed_assets, ensure_train_stream

        a = self.args
        self.assets = build_testbed_assets(a.testbed, a.warmstart_target)
        ensure_train_stream(self.assets, a.seed, a.total_steps, a.prompts_per_step)

    def score(self, run: CellRun | None, step: int) -> None:
        """avg@k of the base (step 0) or of verl's checkpoint at ``step``, logged once."""
        import time

        from gppo.backends.verl.resume import final_hf_dir
        from gppo.testbed.yardstick import score_model_dir

        a = self.args
        t0 = time.perf_counter()
        model_dir = self.assets.model_dir if step == 0 else final_hf_dir(a.checkpoint_dir, step)
        scores = score_model_dir(model_dir, a.testbed, self.benchmarks, a.eval_k, a.eval_seed)
        print(
            f"[gppo] testbed evaluator, step {step} ({model_dir}): "
            + ", ".join(f"{b} {v:.3f}" for b, v in scores.items()),
            file=sys.stderr,
            flush=True,
        )
        if run is not None and run.log_evaluation(scores, step, once=True) is not None:
            run.log({metrics.PERF_TESTBED_EVAL_S: time.perf_counter() - t0}, step)
            run.flush()


def _run_verl(overrides: list[str]) -> None:
    """``python -m verl.trainer.main_ppo OVERRIDES`` in this process (Hydra reads sys.argv)."""
    import verl.trainer.main_ppo as main_ppo

    saved = sys.argv
    sys.argv = [main_ppo.__file__, *overrides]
    try:
        main_ppo.main()
    finally:
        sys.argv = saved


def main(argv: Sequence[str] | None = None) -> int:
    args, overrides = _parse(sys.argv[1:] if argv is None else argv)
    if args.cpu_kernels:  # a CPU cell: before torch's first operation (Ray's actors: the job env)
        cpu_kernels.apply(args.cpu_kernels)
    from gppo.backends.verl.validate import VerlConfigError, check_overrides

    try:
        check_overrides(tuple(overrides))
    except VerlConfigError as exc:
        print(f"gppo verl: {exc}", file=sys.stderr)
        return 2
    if args.check_only:
        print("gppo verl: overrides valid")
        return 0
    benchmarks = [b for b in args.benchmarks.split(",") if b]
    # the job's MLFLOW_TRACKING_URI, explicitly: never a URI some library set in-process
    run = CellRun.attach(eval_k=args.eval_k, benchmarks=benchmarks)
    testbed = _Testbed(args, benchmarks) if args.testbed else None
    mirror = _Mirror(run, args.mirror_every, testbed is None) if run is not None else None
    if args.checkpoint_dir:  # never resume another run's checkpoints (a sweep before this one)
        from gppo.backends.checkpoints import claim_checkpoints

        note = claim_checkpoints(args.checkpoint_dir, run.run_id if run is not None else None)
        if note:
            print(f"[gppo] {note}", file=sys.stderr, flush=True)
    if testbed is not None:
        testbed.prepare()
        testbed.score(run, step=0)
    if run is not None and args.checkpoint_dir:
        from gppo.backends.verl.resume import align_checkpoints

        note = align_checkpoints(args.checkpoint_dir, run.last_step(metrics.VERL_GLOBAL_STEP))
        if note:
            print(f"[gppo] {note}", file=sys.stderr, flush=True)
    if mirror is not None:
        mirror.start()
    try:
        _run_verl(overrides)
    finally:
        if mirror is not None:
            mirror.stop()
    if testbed is not None:
        testbed.score(run, step=args.total_steps)
    if mirror is None or run is None:
        return 0
    mirror.once()
    try:
        run.finish(args.total_steps)
    except ProtocolError as exc:
        print(f"gppo verl: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
