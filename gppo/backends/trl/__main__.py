"""Entry point of one TRL cell: ``python -m gppo.backends.trl --cell '<Cell JSON>'``.

1. builds the cell's parts (:class:`~gppo.backends.trl.realmodel.CellParts`). ``testbed: true``:
   the testbed's assets (the exported base, the four benchmarks) and the seed's training stream,
   exactly the prompts the testbed's ``Trainer`` draws, in its order (not shuffled), scored by
   the testbed's own evaluator. ``testbed: false``: ``model_path``, the prepared ``train_file``
   (shuffled by TRL, seeded) and ``val_files``, rewarded and scored by verl's scorers
   (:mod:`gppo.backends.trl.realmodel`);
2. scores the base (avg@k, seed ``eval_seed``) and logs it at step 0 (once, even on a resumed
   attempt);
3. trains with :class:`~gppo.backends.trl.trainer.GppoGRPOTrainer` (the cell's loss), logging each
   step's ``train/*`` once, checkpointing every ``save_every`` steps under the cell's checkpoint
   directory; a retried attempt of the same run resumes from its latest complete checkpoint
   (any other run's are removed first: :mod:`gppo.backends.checkpoints`);
4. saves the final policy under ``<checkpoint>/final`` and scores it by the same evaluator at
   step ``steps``, then tags the run finished
   (the backend protocol: :mod:`gppo.backends.cell_run`).

Outside a sweep (no ``MLFLOW_RUN_ID``) it trains and prints the scores, logging nothing.

More than one process (``num_gpus: N > 1``, or ``num_processes`` on a CPU): the backend's job
runs this module under ``accelerate launch`` (:meth:`~gppo.backends.trl.backend.TrlBackend.job`),
one data-parallel process per GPU. Every process trains (TRL splits each step's samples across
them and averages the gradients); only the main one evaluates, logs into the run (each step's
metrics reduced over the processes) and tags it finished, while the others wait at a barrier.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trl import GRPOConfig, GRPOTrainer

from gppo import metrics
from gppo.backends import checkpoints
from gppo.backends.cell_run import CellRun
from gppo.backends.checkpoints import claim_checkpoints
from gppo.backends.trl.console import say
from gppo.backends.trl.realmodel import CellParts
from gppo.backends.trl.settings import TrlSettings
from gppo.cell import Cell
from gppo.errors import BackendError
from gppo.testbed import cpu_kernels

#: How long a process waits at a barrier (or any collective) for the others: the main process
#: evaluates alone meanwhile, and the launcher's stall detection, not this, catches a hang.
BARRIER_TIMEOUT_S = 6 * 3600


def process_state(s: TrlSettings) -> Any:
    """accelerate's ``PartialState`` of this process (one process, or one of ``accelerate
    launch``'s; CPU processes talk over gloo), set up before TRL's so that barriers wait
    ``BARRIER_TIMEOUT_S``; raises a one-line :class:`BackendError` when this machine has fewer
    CUDA GPUs than ``num_gpus``."""
    from datetime import timedelta

    import torch
    from accelerate import PartialState

    if s.num_gpus and torch.cuda.device_count() < s.num_gpus:
        raise BackendError(
            f"num_gpus: {s.num_gpus} but this machine shows {torch.cuda.device_count()} CUDA "
            "GPUs; lower num_gpus or run where that many are free"
        )
    return PartialState(cpu=s.num_gpus == 0, timeout=timedelta(seconds=BARRIER_TIMEOUT_S))


def _wait_for_everyone() -> None:
    """A barrier of the cell's processes (none with one). The state is asked afresh: TRL's
    ``TrainingArguments`` resets accelerate's state and sets it up again on the same process
    group."""
    from accelerate import PartialState

    PartialState().wait_for_everyone()


def grpo_config(s: TrlSettings, seed: int, output_dir: Path, max_new_tokens: int) -> GRPOConfig:
    """TRL's ``GRPOConfig`` for these settings: one generation batch of ``prompts_per_step * G``
    samples split into ``minibatches`` updates (``steps_per_generation``; each update's samples
    split across the ``processes``), no shuffling of the
    dataset (the stream is already the testbed's), nothing reported elsewhere."""
    from trl import GRPOConfig

    per_update = s.samples_per_step // (s.minibatches * s.processes)  # per process
    return GRPOConfig(
        output_dir=str(output_dir),
        seed=seed,
        max_steps=s.steps * s.updates_per_step,
        per_device_train_batch_size=per_update,
        gradient_accumulation_steps=1,
        steps_per_generation=s.minibatches,
        num_generations=s.group_size,
        num_iterations=s.ppo_epochs,
        shuffle_dataset=not s.testbed,  # the testbed's stream is already in its order
        learning_rate=s.lr,
        lr_scheduler_type=s.lr_schedule,
        warmup_steps=s.warmup_steps,
        weight_decay=s.weight_decay,
        max_grad_norm=s.grad_clip if s.grad_clip is not None else 0.0,
        temperature=s.temperature,
        top_p=1.0,
        top_k=0,
        max_completion_length=max_new_tokens,
        beta=0.0,
        scale_rewards="group",
        bf16=s.dtype == "bfloat16",
        fp16=False,
        gradient_checkpointing=s.gradient_checkpointing,
        disable_dropout=True,
        use_vllm=s.use_vllm,
        vllm_mode=s.vllm_mode,
        vllm_server_base_url=s.vllm_server_url,
        # π_old is the trainer's recomputed log-prob, as in the testbed and verl's defaults; TRL's
        # vLLM importance-sampling factor would multiply our loss by a ratio no other trainer uses
        vllm_importance_sampling_correction=False,
        use_cpu=s.num_gpus == 0,
        ddp_timeout=BARRIER_TIMEOUT_S,
        save_strategy="steps",
        save_steps=s.save_every * s.updates_per_step,
        save_total_limit=1,
        logging_steps=s.updates_per_step,
        report_to=[],
        dataloader_num_workers=0,
        remove_unused_columns=False,
        log_completions=False,
        disable_tqdm=True,
    )


def cell_checkpoint_dir(cell: Cell, s: TrlSettings) -> Path:
    """The cell's TRL output directory: stable across retries, new when its settings change (and
    claimed by the cell's run before training: :mod:`gppo.backends.checkpoints`)."""
    return checkpoints.cell_checkpoint_dir(cell, "trl", s.checkpoint_dir)


#: what transformers writes into a ``checkpoint-N`` directory last (after the weights, optimiser,
#: scheduler and RNG states): a directory without it was cut off mid-save
CHECKPOINT_COMPLETE = "trainer_state.json"


def last_complete_checkpoint(out_dir: Path, main: bool = True) -> str | None:
    """The newest ``checkpoint-N`` under ``out_dir`` that transformers finished writing, or
    ``None``. A newer one cut off mid-save (an attempt stopped while saving) would fail every
    retry in ``trainer.train``; the main process removes it."""
    if not out_dir.is_dir():
        return None
    found = sorted(
        (int(p.name.rpartition("-")[2]), p)
        for p in out_dir.glob("checkpoint-*")
        if p.is_dir() and p.name.rpartition("-")[2].isdigit()
    )
    while found and not (found[-1][1] / CHECKPOINT_COMPLETE).is_file():
        _, cut = found.pop()
        if main:
            say(f"{cut} was cut off mid-save: removed")
            shutil.rmtree(cut, ignore_errors=True)
    return str(found[-1][1]) if found else None


class _StepLogger:
    """TRL callback: at the end of each generation batch's updates, its metrics into the run
    (steps the run already has are not logged again: a resumed attempt retrains them)."""

    def __init__(
        self, trainer: Any, s: TrlSettings, run: CellRun | None, start: float, main: bool = True
    ) -> None:
        self.trainer, self.s, self.run, self.start, self.main = trainer, s, run, start, main
        self.logged = run.last_step() if run is not None else 0

    def __call__(self, step: int, values: dict[str, float]) -> None:
        wall = time.perf_counter() - self.start
        if self.main and (step % 5 == 0 or step == self.s.steps):
            say(f"step {step} score {values.get('score', 0):.3f} {wall:.1f}s")
        if self.run is not None and step > self.logged:
            self.run.log_train_step(step, values, wall_time_s=wall)
            self.run.flush()
            self.logged = step


def _callback(trainer: Any, s: TrlSettings) -> Any:
    from transformers import TrainerCallback

    class StepDone(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step % s.updates_per_step == 0:
                trainer.step_done(state.global_step // s.updates_per_step)

    return StepDone()


def testbed_parts(s: TrlSettings, cell: Cell, benchmarks: list[str]) -> CellParts:
    """The ``testbed: true`` route: the testbed's exported base (GPT-2, mask-derived position
    ids), the seed's training stream in the testbed's order, its exact reward, and its own
    evaluator over the saved model directory (avg@k, seed ``eval_seed``)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gppo.testbed.hf_assets import build_testbed_assets, train_problems
    from gppo.testbed.reward import testbed_score
    from gppo.testbed.yardstick import score_model_dir

    assets = build_testbed_assets(s.domain, s.warmstart_target)
    problems = train_problems(s.domain, cell.seed, s.steps, s.prompts_per_step)
    data = Dataset.from_list([{"prompt": p.prompt, "answer": p.answer} for p in problems])

    def reward(completions: list[str], answer: list[str], **_: Any) -> list[float]:
        return [
            testbed_score(s.domain, c, a)["score"] for c, a in zip(completions, answer, strict=True)
        ]

    def score(model: Any, model_dir: Path | None) -> dict[str, float]:
        assert model_dir is not None, "the testbed route scores saved models only (base_dir set)"
        return score_model_dir(
            model_dir, s.domain, benchmarks, cell.eval_k, s.eval_seed, s.val_temperature
        )

    dtype = torch.bfloat16 if s.dtype == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(assets.model_dir, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(assets.model_dir, padding_side="left")
    return CellParts(model, tokenizer, data, reward, score, base_dir=assets.model_dir)


def weights_line(trainer: GRPOTrainer) -> str:
    """This process's trained policy in one line: its rank, TRL's optimiser updates, and the sum
    of its weights (float64); data-parallel processes print the same updates and sum."""
    state = trainer.accelerator.state
    model = trainer.accelerator.unwrap_model(trainer.model)
    total = sum(float(p.detach().double().sum()) for p in model.parameters())
    return (
        f"process {state.process_index} of {state.num_processes}: "
        f"{trainer.state.global_step} updates, weights sum {total:.12e}"
    )


def _is_main(cell: Cell, s: TrlSettings, run: CellRun | None) -> bool:
    """Whether this is the cell's main process (the one that scores and logs); refuses a process
    count other than the settings' and a run handed to another process."""
    state = process_state(s)
    if state.num_processes != s.processes:
        raise BackendError(
            f"{cell.id}: its settings ask {s.processes} processes but this is one of "
            f"{state.num_processes}; run it as the backend's job does (accelerate launch, "
            f"--num_processes {s.processes})"
        )
    if run is not None and not state.is_main_process:
        raise BackendError(f"process {state.process_index} of {cell.id}: only the main one logs")
    return bool(state.is_main_process)


def _trainer(cell: Cell, s: TrlSettings, parts: CellParts, loss: tuple[Any, str], out_dir: Path,
             run: CellRun | None, t0: float, main: bool) -> Any:  # fmt: skip
    """TRL's GRPOTrainer with the cell's ``loss`` (function, aggregation), our step logger and
    callback, without TRL's printer."""
    from transformers.trainer_callback import PrinterCallback

    from gppo.backends.trl.trainer import GppoGRPOTrainer

    loss_fn, agg = loss
    trainer = GppoGRPOTrainer(
        model=parts.model,
        args=grpo_config(s, cell.seed, out_dir, s.completion_length),
        train_dataset=parts.data,
        reward_funcs=[parts.reward],
        processing_class=parts.tokenizer,
        loss_fn=loss_fn,
        loss_agg_mode=agg,
    )
    trainer.on_step = _StepLogger(trainer, s, run, t0, main)
    trainer.add_callback(_callback(trainer, s))
    trainer.remove_callback(PrinterCallback)  # its dict per update: the job log has our step lines
    return trainer


def run_cell(cell: Cell, run: CellRun | None) -> dict[str, float]:
    """Train and score one cell (the module docstring's four parts); returns the final scores
    (on a process other than the main one: ``{}``, and ``run`` must be ``None`` there)."""
    import torch

    from gppo.backends.base import get_backend
    from gppo.backends.cell_loss import make_loss
    from gppo.backends.trl.trainer import use_mask_positions

    t0 = time.perf_counter()
    s = TrlSettings.model_validate(cell.settings)
    main = _is_main(cell, s, run)
    torch.set_num_threads(s.num_threads)
    benchmarks = list(cell.benchmarks) or list(get_backend("trl").default_benchmarks(s))
    loss = make_loss(cell.method, cell.loss_params)  # fail fast on bad params
    if s.testbed:
        parts = testbed_parts(s, cell, benchmarks)
    else:
        from gppo.backends.trl import realmodel

        parts = realmodel.load(s, benchmarks, cell.eval_k)
    use_mask_positions(parts.model)

    def score(model: Any, model_dir: Path | None, step: int) -> dict[str, float]:
        """The main process scores and logs; the others wait for it."""
        scores: dict[str, float] = {}
        if main:
            scores = parts.score(model, model_dir)
            say(f"step {step} avg@{cell.eval_k}: {scores}")
            if run is not None:
                run.log_evaluation(scores, step, once=True)
        _wait_for_everyone()
        return scores

    out_dir = cell_checkpoint_dir(cell, s)
    if main:  # before the barrier below: every process then sees the claimed directory
        note = claim_checkpoints(out_dir, run.run_id if run is not None else None)
        if note:
            say(note)
    if run is None or 0 not in run.evaluated_steps():
        score(parts.model, parts.base_dir, 0)
    else:
        _wait_for_everyone()  # every process decides the same way
    resume = last_complete_checkpoint(out_dir, main)
    trainer = _trainer(cell, s, parts, loss, out_dir, run, t0, main)
    if resume:
        say(f"resuming from {resume}")
        if run is not None:  # the step of the checkpoint this attempt resumed from
            done = int(Path(resume).name.rpartition("-")[2]) // s.updates_per_step
            run.log({metrics.PERF_RESUMED_FROM: done}, run.last_step() or done)
    t_train = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    t_train = time.perf_counter() - t_train
    if trainer.state.global_step != s.steps * s.updates_per_step:  # never a finished run untrained
        raise BackendError(
            f"{cell.id}: TRL stopped after {trainer.state.global_step} of "
            f"{s.steps * s.updates_per_step} updates (its log above says why)"
        )
    say(weights_line(trainer))
    final_dir = out_dir / "final"
    trainer.save_model(str(final_dir))  # every process (the main one writes)
    if main:
        parts.tokenizer.save_pretrained(str(final_dir))
    _wait_for_everyone()
    scores = score(trainer.accelerator.unwrap_model(trainer.model), final_dir, s.steps)
    if run is not None:
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        perf = {metrics.PERF_TRAIN_S: t_train, metrics.PERF_TOTAL_S: time.perf_counter() - t0}
        perf.update({metrics.PERF_PEAK_RSS_MB: peak_mb, metrics.PERF_PROCESSES: s.processes})
        run.log(perf, s.steps)
        run.finish(s.steps)
    _wait_for_everyone()
    return scores


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gppo.backends.trl", description=__doc__)
    p.add_argument("--cell", required=True, help="the resolved Cell as JSON (the dispatcher's)")
    args = p.parse_args(argv)
    cell = Cell.from_json(args.cell)
    cpu_kernels.apply(cpu_kernels.mode_of(cell.settings))  # before torch's first operation
    state = process_state(TrlSettings.model_validate(cell.settings))
    # only the main process of ``accelerate launch`` writes to the run
    run = None
    if state.is_main_process:
        run = CellRun.attach(eval_k=cell.eval_k, benchmarks=cell.benchmarks)
    run_cell(cell, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
