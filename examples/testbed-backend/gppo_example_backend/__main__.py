"""The job side of the ``example`` backend: train and evaluate one cell, log into its MLflow run.

    python -m gppo_example_backend --cell '<Cell JSON>'

The four steps of the backend protocol (:mod:`gppo.backends.cell_run`): the base's evaluation at
step 0, ``train/score`` and the loss's diagnostics every step, the final evaluation, then
``finish``. Outside a sweep (no ``MLFLOW_RUN_ID``) it trains and prints, logging nothing.
"""

from __future__ import annotations

import argparse
import random
import sys

import torch

from gppo.backends.cell_loss import LossFn, make_loss
from gppo.backends.cell_run import CellRun
from gppo.cell import Cell
from gppo.testbed.evaluate import evaluate
from gppo.testbed.policy import Policy, response_log_probs
from gppo.testbed.rollout import completed, sample
from gppo.testbed.settings import base_settings
from gppo.testbed.tasks import Domain, get_domain, train_rng
from gppo.testbed.warmstart import load_base_model
from gppo_example_backend.backend import ExampleSettings


def grpo_step(
    policy: Policy,
    opt: torch.optim.Optimizer,
    loss: tuple[LossFn, str],
    domain: Domain,
    s: ExampleSettings,
    prompts: random.Random,  # the testbed's training stream (train_rng)
    gen: torch.Generator,
) -> dict[str, float]:
    """One iteration: G samples per prompt, 0/1 rewards, group-relative advantages, then
    ``minibatches`` updates with the cell's ``loss`` (:func:`make_loss`'s) on the current
    log-probs (B, T) against the sampler's."""
    loss_fn, agg = loss
    problems = domain.sample_train(prompts, s.prompts_per_step)
    ro = sample(policy, [p.prompt for p in problems], s.group_size, domain.max_new_tokens, gen)
    ok = completed(ro).tolist()
    rewards = torch.tensor(
        [
            domain.score(problems[i // s.group_size], t) if ok[i] else 0.0
            for i, t in enumerate(ro.texts)
        ]
    )
    groups = rewards.view(-1, s.group_size)
    adv = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)
    adv = adv.reshape(-1, 1).expand_as(ro.resp_mask).contiguous()
    policy.train()
    diagnostics: dict[str, float] = {}
    for idx in torch.randperm(len(rewards)).chunk(s.minibatches):
        mask = ro.resp_mask[idx]
        logp, _ = response_log_probs(
            policy, ro.prompt_ids[idx], ro.prompt_valid[idx], ro.resp_ids[idx], mask, entropy=False
        )
        value, diagnostics = loss_fn(ro.old_log_prob[idx], logp, adv[idx], mask, loss_agg_mode=agg)
        opt.zero_grad(set_to_none=True)
        value.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
    policy.eval()
    return {"score": float(rewards.mean()), **diagnostics}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gppo_example_backend")
    p.add_argument("--cell", required=True, help="the resolved Cell as JSON (the dispatcher's)")
    cell = Cell.from_json(p.parse_args(argv).cell)
    s = ExampleSettings.model_validate(cell.settings)
    domain = get_domain(s.domain)
    benchmarks = list(cell.benchmarks) or list(domain.benchmark_names)
    run = CellRun.attach(eval_k=cell.eval_k, benchmarks=benchmarks)  # None outside a sweep
    policy = load_base_model(base_settings(s.domain, s.warmstart_target)).policy
    torch.manual_seed(cell.seed)
    prompts, gen = train_rng(cell.seed), torch.Generator().manual_seed(10_000 + cell.seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=s.lr)
    loss = make_loss(cell.method, cell.loss_params)

    def evaluation(step: int) -> None:
        scores = evaluate(policy, domain, benchmarks, cell.eval_k, s.eval_seed)
        if run is not None:
            run.log_evaluation(scores, step)
        print(f"[{cell.id}] step {step} avg@{cell.eval_k} {sum(scores.values()) / len(scores):.3f}")

    evaluation(0)
    for step in range(1, s.steps + 1):
        out = grpo_step(policy, opt, loss, domain, s, prompts, gen)
        if run is not None:
            run.log_train_step(step, out)
    evaluation(s.steps)
    if run is not None:
        run.finish(s.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
