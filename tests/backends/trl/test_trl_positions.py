"""TRL's log-prob forward on left-padded prompts scores the testbed's base at the positions it
sampled at: with :func:`gppo.backends.trl.trainer.use_mask_positions` it equals the testbed's own
forward; without it (TRL as shipped: ``arange`` positions) a padded row is scored wrongly."""

from __future__ import annotations

import pytest
import torch

from .conftest import make_trainer

pytestmark = pytest.mark.slow  # loads TRL and two models (about 10 s)


def _batch():
    from gppo.testbed.tasks import get_domain

    dom = get_domain("math")
    problems = [p for name in dom.benchmark_names for p in dom.benchmark(name)[:4]]
    return [p.prompt for p in problems], [p.answer for p in problems]


def _trl_and_testbed_logps(trainer, base_dir):
    """TRL's per-token log-probs of (prompt, answer) rows, and the testbed policy's."""
    from gppo.testbed.hf_export import import_policy
    from gppo.testbed.policy import response_log_probs

    prompts, answers = _batch()
    tok = trainer.processing_class
    p = tok(prompts, return_tensors="pt", padding=True)
    c = tok(
        [a + tok.eos_token for a in answers],
        return_tensors="pt",
        padding=True,
        padding_side="right",
    )
    ids = torch.cat([p.input_ids, c.input_ids], 1)
    mask = torch.cat([p.attention_mask, c.attention_mask], 1)
    with torch.no_grad():
        trl, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, c.input_ids.size(1)
        )
        policy = import_policy(base_dir)
        ours, _ = response_log_probs(
            policy,
            p.input_ids,
            p.attention_mask.bool(),
            c.input_ids,
            c.attention_mask.bool(),
            entropy=False,
        )
    resp = c.attention_mask.bool()
    padded = (p.attention_mask == 0).any(1)
    return trl, ours, resp, padded


def test_trls_forward_scores_left_padded_prompts_like_the_testbed(base_dir, tmp_path):
    trainer, _ = make_trainer(base_dir, tmp_path)
    trl, ours, resp, padded = _trl_and_testbed_logps(trainer, base_dir)
    assert padded.any() and (~padded).any()  # rows of different prompt lengths
    torch.testing.assert_close(trl[resp], ours[resp], atol=1e-4, rtol=0)


def test_without_the_fix_a_padded_row_is_scored_at_shifted_positions(base_dir, tmp_path):
    trainer, _ = make_trainer(base_dir, tmp_path, positions=False)
    trl, ours, resp, padded = _trl_and_testbed_logps(trainer, base_dir)
    gap = (trl - ours).abs().masked_fill(~resp, 0).amax(1)
    assert float(gap[padded].max()) > 0.1  # TRL as shipped: wrong log-probs on padded rows
    assert float(gap[~padded].max()) < 1e-4  # an unpadded row is right either way
