"""The metric and tag names that more than one module writes or reads: the backends'
entrypoints, the dispatcher and the store write them; the analysis, the benchmarks and the tests
read them.

MLflow refuses ``@`` in metric names, so avg@k is stored as ``avg_at_k``. A run's MLflow ``step``
is the RL step: one generation batch and its updates (an *iteration*; a step holds
``minibatches * ppo_epochs`` optimiser updates, whose diagnostics :func:`reduce_step` reduces to
one value). Training metrics are logged at the step they describe; evaluation metrics at the step
after which the evaluation ran (0 for the base model, before any update); a cell's ``perf/*``
timings and resources once, at its last step (``perf/testbed_eval_s`` at each testbed
evaluation, ``perf/resumed_from_step`` where an attempt resumed).

Names that only one module uses live with it: verl's own metric names and how they map onto
these (:mod:`gppo.backends.verl.metrics_map`), the experiment's MLflow tags
(:mod:`gppo.store.tracking`) and an Optuna trial's attributes (:mod:`gppo.sweep.tuning.attrs`).
"""

from __future__ import annotations

#: the behaviour-probability buckets of the per-bucket clip fractions (written once, with the loss
#: that counts them)
from gppo.objectives.buckets import MU_BUCKETS as MU_BUCKETS

# --- training metrics (one value per RL step: a generation batch and its updates) -------------
TRAIN_SCORE = "train/score"  # mean 0/1 reward of the step's rollouts
ENTROPY = "train/entropy"  # mean token entropy of the policy on the step's rollouts
APPROX_KL = "train/approx_kl"
RATIO_MEAN = "train/ratio_mean"
#: mean |log π − log μ| over an update's tokens, averaged over the step's updates: how far the
#: updates so far have moved the sampled tokens' log-probs from the behaviour policy's (issue 59)
ABS_LOG_RATIO = "train/abs_log_ratio"
RATIO_MAX = "train/ratio_max"
CLIP_FRAC_LOW = "train/clip_frac_low"
CLIP_FRAC_HIGH = "train/clip_frac_high"
BOUND_ACTIVE_FRAC = "train/bound_active_frac"  # share of tokens where ratio_bounds cut the region
DUAL_CLIP_FRAC = "train/dual_clip_frac"
POLICY_LOSS = "train/policy_loss"
WALL_TIME = "train/wall_time_s"  # seconds since the cell started


def reduce_step(values_by_key: dict[str, list[float]]) -> dict[str, float]:
    """One value per key for a step whose updates (or processes) each reported one: the largest
    for a ``*_max`` key (``ratio_max``), the mean for every other. Every trainer reduces this way,
    so ``train/ratio_max`` means the same in each."""
    return {
        key: max(vals) if key.endswith("_max") else sum(vals) / len(vals)
        for key, vals in values_by_key.items()
        if vals
    }


def train_metric(loss_metric_key: str) -> str:
    """MLflow name of a diagnostic returned by a loss (``clip_frac_low`` -> ``train/clip_frac_low``)."""
    return f"train/{loss_metric_key}"


def clip_frac_bucket(bucket: str, side: str = "") -> str:
    """Clip fraction within one μ bucket; ``side`` is ``""`` (low + high), ``"low"`` or ``"high"``."""
    suffix = f"_{side}" if side else ""
    return f"train/clip_frac{suffix}/{bucket}"


# --- timings and resources of a cell (``perf/*``; the backend that logs each, if only one) -----
PERF_TOTAL_S = "perf/total_s"  # in-process seconds, start of work to the end
PERF_TRAIN_S = "perf/train_s"  # the training loop
PERF_PEAK_RSS_MB = "perf/peak_rss_mb"  # the process's peak resident memory
PERF_CPU_S = "perf/cpu_s"  # CPU seconds of the whole process, imports included (local)
PERF_STARTUP_S = "perf/startup_s"  # process start -> work: imports, MLflow (local)
PERF_BASE_MODEL_S = "perf/base_model_s"  # loading (or building) the base model (local)
PERF_EVAL_S = "perf/eval_s"  # the evaluations, step 0 and final (local)
PERF_SAMPLE_S = "perf/sample_s"  # rollouts (local)
PERF_UPDATE_S = "perf/update_s"  # forward, backward and AdamW (local)
PERF_SAMPLE_TOKENS_PER_S = "perf/sample_tokens_per_s"  # (local)
PERF_UPDATE_TOKENS_PER_S = "perf/update_tokens_per_s"  # response tokens (local)
PERF_PARAM_DELTA_L2 = "perf/param_delta_l2"  # L2 distance of the final weights from the base's
PERF_BASE_EVAL_REUSED = "perf/base_eval_reused"  # 1: the base's step-0 avg@k came from the cache
PERF_FORKED = "perf/forked"  # 1: the cell was forked by the launch's fork server (local)
PERF_PROCESSES = "perf/processes"  # data-parallel training processes (trl)
PERF_RESUMED_FROM = "perf/resumed_from_step"  # the checkpoint step an attempt resumed (trl)
PERF_TESTBED_EVAL_S = "perf/testbed_eval_s"  # one testbed evaluation, at its step (verl)


# --- the cost of a run: the resources its job held x its wall time (gppo.store.cost) ----------
#: logged by the launcher, not the job: the job's resources when it is submitted (step 0), and
#: when an attempt ends the run's wall time and hours, summed over the attempts of a run that
#: keeps one run across attempts (verl); every backend alike
COST_NUM_CPUS = "cost/num_cpus"  # CPUs the job holds, all its nodes together
COST_NUM_GPUS = "cost/num_gpus"  # GPUs the job holds, all its nodes together
COST_NODES = "cost/nodes"  # nodes the job spans
COST_WALL_S = "cost/wall_s"  # seconds from submission to the attempt's end
COST_CPU_HOURS = "cost/cpu_hours"  # num_cpus x wall time, in hours
COST_GPU_HOURS = "cost/gpu_hours"  # num_gpus x wall time, in hours


# --- the answer probe (CPU testbed): the correct answers' probability, teacher-forced -----------
#: on the domain's validation prompts (gppo.testbed.answer_prob), at step 0 (the base),
#: every step up to PROBE_DENSE_STEPS, then every PROBE_EVERY steps and at the last
PROBE_P_ANSWER = "probe/p_answer"  # mean probability that one sample is the correct answer
PROBE_ANSWER_TOKEN_MU = "probe/answer_token_mu"  # mean π of the correct answers' tokens
PROBE_ANSWER_RARE_FRAC = "probe/answer_rare_frac"  # share of those tokens with π < 0.1
PROBE_DENSE_STEPS = 10
PROBE_EVERY = 10


def probe_step(step: int, last: int) -> bool:
    """Whether the answer probe runs after training step ``step`` (0: the base) of ``last``."""
    return step <= PROBE_DENSE_STEPS or step % PROBE_EVERY == 0 or step == last


# --- evaluation metrics ------------------------------------------------------------------------
def avg_at(k: int) -> str:
    """The MLflow-safe spelling of avg@k."""
    return f"avg_at_{k}"


#: every evaluation's metrics begin with this; the base's step-0 copies with EVAL_BASE_PREFIX
EVAL_PREFIX = "eval/"
EVAL_BASE_PREFIX = "eval_base/"


def eval_metric(benchmark: str, k: int) -> str:
    """avg@k on one benchmark, e.g. ``eval/add3/avg_at_8``."""
    return f"{EVAL_PREFIX}{benchmark}/{avg_at(k)}"


def eval_domain_metric(k: int) -> str:
    """Mean avg@k over the domain's benchmarks, e.g. ``eval/avg_at_8``."""
    return f"{EVAL_PREFIX}{avg_at(k)}"


def parse_eval_metric(name: str) -> tuple[str, int] | None:
    """Inverse of :func:`eval_metric`: ``(benchmark, k)``, or ``None`` for any other name."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != "eval" or not parts[2].startswith("avg_at_"):
        return None
    try:
        return parts[1], int(parts[2].removeprefix("avg_at_"))
    except ValueError:
        return None


def eval_base_metric(benchmark: str, k: int) -> str:
    """The base model's avg@k (the step-0 eval) under its own name, e.g. ``eval_base/add3/avg_at_8``.

    The step-0 evaluation logged under this name as well as :func:`eval_metric` (step 0) lets a
    reader take the base score from the run's latest values without one history call per run.
    Every backend logs it at step 0 (:meth:`gppo.backends.cell_run.CellRun.log_evaluation`); a
    run without it contributes no base score (the report shows the base row as missing).
    """
    return f"{EVAL_BASE_PREFIX}{benchmark}/{avg_at(k)}"


def parse_eval_base_metric(name: str) -> tuple[str, int] | None:
    """Inverse of :func:`eval_base_metric`: ``(benchmark, k)``, or ``None`` for any other name."""
    if not name.startswith(EVAL_BASE_PREFIX):
        return None
    return parse_eval_metric(EVAL_PREFIX + name.removeprefix(EVAL_BASE_PREFIX))


#: the held-out selection score (a split disjoint from the benchmarks, never reported):
#: ``select/<benchmark>/avg_at_<k>`` per benchmark's family, ``select/avg_at_<k>`` their mean
SELECT_PREFIX = "select/"


def select_metric(k: int, benchmark: str | None = None) -> str:
    """``select/avg_at_8`` (the mean), or ``select/add3/avg_at_8`` for one benchmark's family."""
    return f"{SELECT_PREFIX}{benchmark}/{avg_at(k)}" if benchmark else f"{SELECT_PREFIX}{avg_at(k)}"


#: verl's own step counter as its MLflow adapter logs it (a resumed verl run's last step)
VERL_GLOBAL_STEP = "training/global_step"


def verl_val_metric(benchmark: str, k: int) -> str:
    """verl's own validation mean@k of one benchmark, kept beside the testbed evaluator's avg@k in a
    ``verl.testbed`` cell's run (a second number, never read into Table 1), e.g.
    ``verl_val/add3/mean_at_8``."""
    return f"verl_val/{benchmark}/mean_at_{k}"


# --- tags --------------------------------------------------------------------------------------
TAG_PREFIX = "gppo."
TAG_ROLE = "gppo.role"  # ROLE_SWEEP (parent run), ROLE_CELL, ROLE_TRIAL
ROLE_SWEEP = "sweep"
ROLE_CELL = "cell"
ROLE_TRIAL = "trial"
TAG_SWEEP_ID = "gppo.sweep_id"
TAG_SWEEP_NAME = "gppo.sweep_name"
#: on the parent run: the command line's ``KEY=VALUE`` spec overrides of its latest launch
TAG_SPEC_OVERRIDES = "gppo.spec_overrides"
TAG_CELL_ID = "gppo.cell_id"
TAG_METHOD = "gppo.method"
TAG_DIVERGENCE = "gppo.divergence"
TAG_ESTIMATOR = "gppo.estimator"
TAG_SEED = "gppo.seed"
TAG_ATTEMPT = "gppo.attempt"
TAG_DOMAIN = "gppo.domain"
TAG_BACKEND = "gppo.backend"
TAG_CELL_HASH = "gppo.cell_hash"  # hash of the cell's resolved settings
TAG_COST_KEY = "gppo.cost_key"  # what its cost depends on (gppo.store.cost.cost_key)
#: a cell's run key (gppo.grid.sharing.run_key): cells with one key are served by one run
TAG_RUN_KEY = "gppo.run_key"
#: on a follower's run (a cell that is the same function as its lead): the id of the run whose
#: results it copies; such a run trained nothing and cost nothing (count its source once)
TAG_SAME_RUNS = "gppo.same_runs"
#: on a follower's run: the cell id of the run it copies (``tv-mc-s0``)
TAG_SAME_CELL = "gppo.same_cell"
#: on a follower's run while its copy is being written (removed by its last write): a run that
#: still has it was cut off mid-copy, and the next launch deletes it and copies again
TAG_COPYING = "gppo.copying"
#: a cell's axis point as JSON ``{path: value}`` (only in a sweep with axes; the reports read it)
TAG_AXES = "gppo.axes"
#: one tag per axis value, ``gppo.axis.calibration.r_min`` = ``0.8`` (the MLflow UI's grouping)
TAG_AXIS_PREFIX = "gppo.axis."
TAG_RAY_JOB_ID = "gppo.ray_job_id"  # submission id of the attempt that owns the run
TAG_RAY_ADDRESS = "gppo.ray_address"  # the Jobs API the attempt was submitted to (`logs` finds it)
#: when the run's latest attempt was submitted (Unix seconds): a relaunch that re-attaches to it
#: counts its cost from there, not from the run's start (a run kept across attempts, verl's)
TAG_SUBMITTED_AT = "gppo.submitted_at"
TAG_TRIAL_NUMBER = "gppo.trial_number"
TAG_STUDY_NAME = "gppo.study_name"
#: adaptive seeds: why the cell's row stopped, e.g. ``separated at 4 seeds`` (on each of its runs)
TAG_ROW_STOPPED = "gppo.row_stopped"
#: on the parent run: "true" when the sweep's last launch ended with cells its budget left
#: pending ("false" otherwise), so a report written later says "left by the budget" as it did
TAG_BUDGET_LEFT = "gppo.budget_left"
#: Set to "true" by a backend entrypoint only after its final evaluation has been logged.
TAG_FINISHED = "gppo.finished"
TAG_FAILURE = "gppo.failure"  # last log lines of a cell that kept failing
#: what ending an attempt's leftover processes took (gppo.processes.Ended.note), when it took any
TAG_PROCESSES = "gppo.processes"
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's own nesting tag

# --- environment passed to a job ---------------------------------------------------------------
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_RUN_ID = "MLFLOW_RUN_ID"
