"""The ``trl`` backend: one cell = one ``python -m gppo.backends.trl --cell <json>`` job; a cell of
more than one process (``num_gpus: N > 1``, or ``num_processes`` on a CPU) runs that module under
``accelerate launch`` (:func:`launch_argv`)."""

from __future__ import annotations

import dataclasses
import sys

from pydantic import BaseModel

from gppo.backends.base import (
    STALL_REAL_MODEL_S,
    STALL_TESTBED_S,
    Backend,
    Job,
    head_cpus_for,
    held_cpus,
    register_backend,
    thread_env,
)
from gppo.backends.trl.settings import TrlSettings
from gppo.cell import Cell, Resources
from gppo.testbed import cpu_kernels
from gppo.testbed.settings import RL

#: one OpenMP thread per cell unless it sets ``num_threads`` (torch reads these at import)
JOB_ENV = {**thread_env(RL.num_threads), "TOKENIZERS_PARALLELISM": "false"}


@register_backend
class TrlBackend(Backend[TrlSettings]):
    """TRL's ``GRPOTrainer`` with the cell's loss, on one node (a CPU, one GPU, or N GPUs as N
    data-parallel processes)."""

    name = "trl"
    settings_model = TrlSettings
    entrypoint_module = "gppo.backends.trl"
    #: a retried attempt resumes TRL's checkpoint in the same run (each step logged once)
    reuse_run_on_retry = True

    def default_benchmarks(self, settings: BaseModel) -> tuple[str, ...]:
        """The testbed domain's four benchmarks; ``testbed: false``: the domain's paper
        benchmarks among ``val_files``, else every ``val_files`` key
        (:func:`gppo.backends.rldata.default_benchmarks`, verl's rule too)."""
        s = TrlSettings.model_validate(settings)
        if not s.testbed:
            from gppo.backends.rldata import default_benchmarks

            return default_benchmarks(s.domain, s.val_files)
        from gppo.testbed.tasks import get_domain

        return get_domain(s.domain).benchmark_names

    def known_benchmarks(self, settings: BaseModel) -> tuple[str, ...] | None:
        s = TrlSettings.model_validate(settings)
        return self.default_benchmarks(s) if s.testbed else tuple(s.val_files)

    def stall_timeout_s(self, settings: BaseModel, *, first_step: bool = False) -> float | None:
        """The testbed route: 10 minutes between steps, 15 before the first (imports, the base's
        evaluation, TRL's set-up). A model of your own: an hour, as verl's (between two logged
        steps it may evaluate whole benchmarks, save a checkpoint, or retrain, unlogged, the
        steps a resumed attempt repeats since its checkpoint)."""
        if not TrlSettings.model_validate(settings).testbed:
            return STALL_REAL_MODEL_S
        return 1.5 * STALL_TESTBED_S if first_step else STALL_TESTBED_S

    def local_head_resources(self, settings: BaseModel) -> Resources | None:
        """A CPU cell holds a CPU per thread of each process: a local head has at least that
        many, also on a machine with fewer cores (:func:`~gppo.backends.base.head_cpus_for`)."""
        s = TrlSettings.model_validate(settings)
        return None if s.num_gpus else head_cpus_for(s.processes * s.num_threads)

    def preflight(self, plan, spec_path, say, *, train_step=False):
        """Each cell's loss built and run forward and backward on a synthetic batch, in TRL's
        shapes (B, T), before anything is launched (``train_step``: the same; a TRL step on
        this machine is what the CPU preset's learning test runs)."""
        from gppo.backends.trl.preflight import check_cell

        results = []
        for cell in plan.cells:
            result = check_cell(cell)
            say(result.line())
            results.append(result)
        return results

    def prepare_data(self, input_path, output_path, source, *, split, skip_invalid):
        """verl's RL parquet, written by verl's converter (:func:`gppo.backends.rldata.prepare`,
        which imports no verl): one file per benchmark, so a prepared file serves both backends."""
        from gppo.backends.rldata import prepare

        return prepare(input_path, output_path, source, split=split, skip_invalid=skip_invalid)

    def job(self, cell: Cell) -> Job:
        """The cell's process (or ``accelerate launch`` of its processes), asking Ray for
        ``num_gpus`` GPUs and, for CPU processes, a CPU per thread of each (``num_processes x
        num_threads``): what it holds is what it costs."""
        s = self.settings_of(cell)
        env = dict(JOB_ENV)
        if s.num_threads > 1:
            env.update(thread_env(s.num_threads))
        if not s.num_gpus:  # a CPU cell: its kernels (docs/reproducibility.md)
            env.update(cpu_kernels.job_env(s.cpu_kernels))
        resources = cell.resources
        if s.num_gpus and resources.num_gpus < s.num_gpus:
            resources = dataclasses.replace(resources, num_gpus=float(s.num_gpus))
        if not s.num_gpus:  # a CPU cell holds a CPU per thread of each process
            resources = held_cpus(resources, s.processes * s.num_threads)
        module = ("-m", self.entrypoint_module, "--cell", cell.to_json())
        argv = (sys.executable, *launch_argv(s), *module)
        return Job(argv=argv, env=env, resources=resources)


def launch_argv(s: TrlSettings) -> tuple[str, ...]:
    """What goes between the interpreter and ``-m gppo.backends.trl``: nothing for one process;
    ``accelerate launch`` of ``s.processes`` data-parallel processes otherwise (its torchrun
    route, ``--multi_gpu``, which on a CPU runs gloo processes: ``accelerate launch --cpu`` starts
    one process unless MPI is set up), on a free port of the node, precision as the cell's."""
    if s.processes == 1:
        return ()
    precision = "bf16" if s.dtype == "bfloat16" else "no"
    return (
        "-m", "accelerate.commands.launch", "--multi_gpu",
        "--num_processes", str(s.processes), "--num_machines", "1",
        "--main_process_port", "0", "--mixed_precision", precision, "--dynamo_backend", "no",
    )  # fmt: skip
