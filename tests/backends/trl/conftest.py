"""Fixtures of the TRL backend's tests: the testbed's exported base and a GppoGRPOTrainer on it."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="TRL is in the trl and test extras (pip install -e '.[test]')")


@pytest.fixture(scope="module")
def base_dir():
    from gppo.testbed.hf_assets import build_testbed_assets

    return build_testbed_assets("math").model_dir


def make_trainer(base_dir, tmp_path, *, cls=None, positions=True, **config):
    """A GRPOTrainer (``cls``: TRL's own, or ours with ``loss_fn``) on the exported base, set up
    as the backend sets it up; ``positions``: with the mask-derived position ids."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from gppo.backends.trl.trainer import use_mask_positions

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    handle = use_mask_positions(model) if positions else None
    tok = AutoTokenizer.from_pretrained(base_dir, padding_side="left")
    loss_kw = {k: config.pop(k) for k in ("loss_fn", "loss_agg_mode", "on_step") if k in config}
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=5,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        report_to=[],
        **config,
    )
    data = Dataset.from_list([{"prompt": "1+2="}] * 8)
    trainer = (cls or GRPOTrainer)(
        model=model,
        args=args,
        train_dataset=data,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        processing_class=tok,
        **loss_kw,
    )
    trainer.current_gradient_accumulation_steps = 1
    return trainer, handle
