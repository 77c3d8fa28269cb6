"""The testbed's AdamW: the same update as torch.optim.AdamW, without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gppo.testbed.no_dynamo import AdamW


def _train(
    opt_cls: type[torch.optim.Optimizer], steps: int = 5, **kwargs: bool
) -> list[torch.Tensor]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = opt_cls(net.parameters(), lr=1e-2, weight_decay=0.1, **kwargs)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


@pytest.mark.parametrize("kwargs", [{}, {"fused": True}], ids=["per-tensor", "fused"])
def test_same_update_as_torch_adamw_to_the_last_bit(kwargs: dict[str, bool]) -> None:
    ours, theirs = _train(AdamW, **kwargs), _train(torch.optim.AdamW, **kwargs)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(ours, _train(AdamW, 0), strict=True))


def test_refuses_differentiable() -> None:
    with pytest.raises(ValueError, match="differentiable"):
        AdamW([torch.zeros(1, requires_grad=True)], differentiable=True)


@pytest.mark.slow
def test_a_cell_process_never_imports_dynamo(tmp_path) -> None:
    code = (
        "import sys\n"
        "from gppo.backends.local.__main__ import main\n"
        "main(['--method', 'tv', '--estimator', 'mc', '--no-mlflow', '--quiet',\n"
        "      '--set', 'steps=2', '--set', 'eval_prompts=4'])\n"
        "print('torch._dynamo' in sys.modules, 'torch' in sys.modules)\n"
    )
    env = {"GPPO_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["False", "True"]
