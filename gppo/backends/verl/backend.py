"""The ``verl`` backend: each cell is one Ray job running verl's PPO trainer with our loss.

``job(cell)`` builds::

    python -m gppo.backends.verl --benchmarks aime24,aime25,... --eval-k 8 --total-steps 400 \\
        -- <Hydra overrides for verl.trainer.main_ppo>

The entrypoint is a thin wrapper of ours (:mod:`gppo.backends.verl.__main__`) rather than
``python -m verl.trainer.main_ppo`` directly, because the job must do three things verl does not:
import the plugin and validate the overrides loudly before Ray hands out 8 GPUs; mirror verl's
metric names onto ours (:mod:`gppo.metrics`) in the cell's MLflow run while it trains; and set
``gppo.finished=true`` after the final evaluation. Between those it calls verl's own
``main_ppo.main`` with the overrides, exactly as ``python -m verl.trainer.main_ppo`` would.

Environment (the dispatcher submits it as the Ray job's ``runtime_env.env_vars``, which Ray
merges into verl's own ``ray.init(runtime_env=...)`` so every actor gets it):
``VERL_USE_EXTERNAL_MODULES`` (the plugin), the spec's ``verl.env`` and, added by the dispatcher,
``MLFLOW_TRACKING_URI`` / ``MLFLOW_RUN_ID`` (verl's MLflow logger attaches to that run).
verl's own runtime-env variables are refused there: Ray fails the job when the job's and verl's
``env_vars`` share a key.

Importing this module does not import verl; :meth:`VerlBackend.job` validates the overrides
against verl's config classes when verl is installed on the launching machine.
"""

from __future__ import annotations

import importlib.util
from typing import ClassVar

from gppo.backends.base import STALL_REAL_MODEL_S, Backend, Job, register_backend
from gppo.backends.rldata import default_benchmarks
from gppo.backends.verl.overrides import cell_checkpoint_dir, cell_overrides
from gppo.backends.verl.settings import VerlSettings
from gppo.cell import Cell, Resources
from gppo.testbed import cpu_kernels

PLUGIN_MODULE = "gppo.backends.verl.plugin"
#: Env vars verl's ``main_ppo`` puts in its own ``ray.init`` runtime env (constants_ppo.py): the
#: job's runtime env must not repeat them, or Ray refuses to merge the two.
VERL_RESERVED_ENV = frozenset(
    {
        "TOKENIZERS_PARALLELISM",
        "NCCL_DEBUG",
        "VLLM_LOGGING_LEVEL",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_DISABLE_COMPILE_CACHE",
        "HCCL_HOST_SOCKET_PORT_RANGE",
        "HCCL_NPU_SOCKET_PORT_RANGE",
        "HSA_NO_SCRATCH_RECLAIM",
        "NCCL_NVLS_ENABLE",
        "NCCL_MNNVL_ENABLE",
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "NVTX_INJECTION64_PATH",
        "VERL_FULL_DETERMINISM",
        "VLLM_BATCH_INVARIANT",
        "VERL_RL_INSIGHT_ENABLE",
        "PYTHONHASHSEED",
        "CUBLAS_WORKSPACE_CONFIG",
        "FLASH_ATTENTION_DETERMINISTIC",
        "NCCL_DETERMINISTIC",
        "NCCL_ALGO",
        "TRANSFER_QUEUE_ENABLE",
    }
)
#: Set by the dispatcher, never by the spec.
DISPATCHER_ENV = frozenset({"MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"})


@register_backend
class VerlBackend(Backend[VerlSettings]):
    name: ClassVar[str] = "verl"
    settings_model: ClassVar[type[VerlSettings]] = VerlSettings
    entrypoint_module: ClassVar[str] = "gppo.backends.verl"
    reuse_run_on_retry: ClassVar[bool] = True
    entrypoint_holds_resources: ClassVar[bool] = False
    preflight_train_step: ClassVar[bool] = True

    def default_benchmarks(self, settings: VerlSettings) -> tuple[str, ...]:
        return default_benchmarks(settings.domain, settings.benchmark_files)

    def known_benchmarks(self, settings: VerlSettings) -> tuple[str, ...]:
        return tuple(settings.benchmark_files)

    def stall_timeout_s(self, settings: VerlSettings, *, first_step: bool = False) -> float | None:
        """An hour: between two logged steps verl may load the model, start vLLM, run a
        validation pass (every ``eval_every`` steps) and save a checkpoint (``save_every``)."""
        return STALL_REAL_MODEL_S

    def local_head_resources(self, settings: VerlSettings) -> Resources | None:
        """A CPU cell: the CPU mode's (:meth:`gppo.backends.verl.cpu.CpuMode.local_head`: Ray
        CPUs and one fake GPU per verl worker); a GPU cell: None (what Ray detects)."""
        if not settings.cpu:
            return None
        from gppo.backends.verl.cpu import CPU_MODE

        return CPU_MODE.local_head(settings)

    def preflight(self, plan, spec_path, say, *, train_step=False):
        """verl's config validation, each cell's loss through verl's own worker loss on
        synthetic tokens, and with ``train_step`` one ``main_ppo`` step per cell
        (:func:`gppo.backends.verl.preflight.check_plan`)."""
        from gppo.backends.verl.preflight import check_plan

        return check_plan(plan, spec_path, say, train_step=train_step)

    def prepare_data(self, input_path, output_path, source, *, split, skip_invalid):
        """verl's RL parquet (:func:`gppo.backends.rldata.prepare`): one file per benchmark,
        its ``data_source`` naming the scorer (:data:`gppo.backends.rewards.SCORER_OF`)."""
        from gppo.backends.rldata import prepare

        return prepare(input_path, output_path, source, split=split, skip_invalid=skip_invalid)

    def prepare(self, settings: VerlSettings) -> None:
        """``cpu: true``: check that the Python the cells run with has vLLM's CPU build
        (:meth:`gppo.backends.verl.cpu.CpuMode.check_environment`); ``smoke_assets: true`` /
        ``testbed: true``: build the model and data once."""
        if settings.cpu:
            from gppo.backends.verl.cpu import CPU_MODE

            CPU_MODE.check_environment(settings)
        if settings.smoke_assets:
            from gppo.backends.verl.smoke import build_smoke_assets

            build_smoke_assets()
        if settings.testbed:
            from gppo.testbed.hf_assets import build_testbed_assets

            build_testbed_assets(settings.domain, settings.warmstart_target)

    def job(self, cell: Cell) -> Job:
        settings = self.settings_of(cell)
        bad = sorted(set(settings.env) & (VERL_RESERVED_ENV | DISPATCHER_ENV))
        if bad:
            raise ValueError(
                f"cell {cell.id}: verl.env may not set {', '.join(bad)} (verl's own runtime env "
                "or the dispatcher's MLflow variables)"
            )
        overrides = cell_overrides(cell, settings)
        if importlib.util.find_spec("verl") is not None:
            from gppo.backends.verl.validate import VerlConfigError, check_overrides

            try:
                check_overrides(tuple(overrides))
            except VerlConfigError as exc:
                raise VerlConfigError(f"cell {cell.id}: {exc}") from None
        benchmarks = cell.benchmarks or self.default_benchmarks(settings)
        cpu_mode = None
        if settings.cpu:
            from gppo.backends.verl.cpu import CPU_MODE

            cpu_mode = CPU_MODE
        python = cpu_mode.python(settings) if cpu_mode else settings.python or "python"
        argv = (
            python,
            "-m",
            self.entrypoint_module,
            "--benchmarks",
            ",".join(benchmarks),
            "--eval-k",
            str(cell.eval_k),
            "--total-steps",
            str(settings.total_steps),
            "--mirror-every",
            f"{settings.mirror_every_s:g}",
            "--checkpoint-dir",
            cell_checkpoint_dir(cell, settings),
            *(("--cpu-kernels", settings.cpu_kernels) if cpu_mode else ()),
            *(
                (
                    "--testbed",
                    settings.domain,
                    "--seed",
                    str(cell.seed),
                    "--prompts-per-step",
                    str(settings.prompts_per_step),
                    "--eval-seed",
                    str(settings.eval_seed),
                    *(
                        ("--warmstart-target", f"{settings.warmstart_target!r}")
                        if settings.warmstart_target is not None
                        else ()
                    ),
                )
                if settings.testbed
                else ()
            ),
            "--",
            *overrides,
        )
        env = {**settings.env, "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE}
        if cpu_mode:  # the pinned kernels win over verl.env: cpu_kernels: natural turns them off
            env = {**cpu_mode.job_env(env), **cpu_kernels.job_env(settings.cpu_kernels)}
        resources = Resources(
            num_cpus=cell.resources.num_cpus,
            num_gpus=float(settings.n_gpus),
            memory_gb=cell.resources.memory_gb,
            custom=cell.resources.custom,
            nodes=settings.nnodes,
        )
        return Job(argv=argv, env=env, resources=resources)
