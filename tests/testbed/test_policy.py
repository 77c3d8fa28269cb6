"""Policy, KV-cached sampling, GRPO advantages and avg@k: the numerics the RL loop relies on."""

from __future__ import annotations

import torch

from gppo.backends.local.train import group_advantages
from gppo.testbed.evaluate import evaluate
from gppo.testbed.policy import Policy, PolicyConfig, response_log_probs
from gppo.testbed.rollout import sample
from gppo.testbed.tasks import get_domain
from gppo.testbed.vocab import EOS, PAD, decode, encode, left_pad


def _policy(seed: int = 0) -> Policy:
    torch.manual_seed(seed)
    return Policy(PolicyConfig(d_model=32, n_layers=2, n_heads=4, max_len=48)).eval()


def test_vocab_round_trip_and_left_pad() -> None:
    assert decode([*encode("12+34="), EOS, *encode("9")]) == "12+34="
    ids, valid = left_pad([encode("1+2="), encode("123+45=")])
    assert ids.shape == (2, 7) and ids[0, :3].tolist() == [PAD] * 3
    assert valid.sum(1).tolist() == [4, 7]


def test_left_padding_does_not_change_logits() -> None:
    pol = _policy()
    a = encode("123+45=")
    ids, valid = left_pad([a, encode("1+2+3+45=")])
    padded, _ = pol(ids, valid)
    alone, _ = pol(torch.tensor([a]), torch.ones(1, len(a), dtype=torch.bool))
    torch.testing.assert_close(padded[0, -len(a) :], alone[0], atol=1e-5, rtol=1e-5)


def test_cached_sampling_log_probs_match_a_full_forward() -> None:
    pol = _policy(1)
    gen = torch.Generator().manual_seed(0)
    ro = sample(pol, ["12+34=", "1+2+3=", "999-1="], 4, 6, gen)
    assert ro.resp_ids.shape[0] == 12
    logp, ent = response_log_probs(pol, ro.prompt_ids, ro.prompt_valid, ro.resp_ids, ro.resp_mask)
    m = ro.resp_mask.bool()
    torch.testing.assert_close(logp[m], ro.old_log_prob[m], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ent[m], ro.entropy[m], atol=1e-4, rtol=1e-4)
    # after EOS nothing is generated: mask is a prefix, tokens are padding
    for row in range(12):
        toks = ro.resp_ids[row].tolist()
        if EOS in toks:
            k = toks.index(EOS)
            assert ro.resp_mask[row, : k + 1].all() and not ro.resp_mask[row, k + 1 :].any()
            assert all(t == PAD for t in toks[k + 1 :])


def test_sampling_is_seeded() -> None:
    pol = _policy(2)
    a = sample(pol, ["5+5="], 8, 5, torch.Generator().manual_seed(7))
    b = sample(pol, ["5+5="], 8, 5, torch.Generator().manual_seed(7))
    assert torch.equal(a.resp_ids, b.resp_ids)


def test_group_advantages_zero_for_constant_groups() -> None:
    r = torch.tensor([1.0] * 8 + [0.0] * 8 + [1, 0, 0, 0, 0, 0, 0, 0])
    adv = group_advantages(r, 8)
    assert torch.all(adv[:16] == 0)
    g = adv[16:]
    assert g[0] > 0 and torch.all(g[1:] < 0)
    assert abs(float(g.sum())) < 1e-5


def test_evaluate_is_deterministic_and_bounded() -> None:
    pol = _policy(3)
    d = get_domain("math")
    a = evaluate(pol, d, ["add-small", "add3"], k=4, seed=5, max_prompts=16)
    b = evaluate(pol, d, ["add-small", "add3"], k=4, seed=5, max_prompts=16)
    assert a == b and set(a) == {"add-small", "add3"}
    assert all(0.0 <= v <= 1.0 for v in a.values())
