"""verl's batch conversion works with the tensordict the lock installs.

verl 0.9.1's trainer turns every batch into a TensorDict before computing the old log-probs
(``trainer/ppo/ray_trainer.py:1293``, ``batch.to_tensordict()``), and
``DataProto.to_tensordict`` asserts tensordict >= 0.10 (``verl/protocol.py:1105``), although verl's
metadata allows ``tensordict>=0.8.0,<=0.10.0,!=0.9.0``. A lock that picks 0.8.3 fails every verl
cell at its first training step, on any hardware. These tests run the real conversion (no mocks)
on a small batch shaped like the trainer's, so such a lock fails here instead.
"""

from __future__ import annotations

import numpy as np
import torch
from verl.protocol import DataProto
from verl.workers.utils.padding import left_right_2_no_padding

PROMPT_LEN, RESPONSE_LEN = 4, 3


def _batch() -> DataProto:
    """A left-padded prompt + right-padded response batch of 2, with the non-tensor and meta
    fields the trainer carries (``uid`` per sample, ``global_steps``)."""
    prompt_mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    response_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    input_ids = torch.arange(2 * (PROMPT_LEN + RESPONSE_LEN)).reshape(2, -1) * attention_mask
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": input_ids[:, PROMPT_LEN:],
            "response_mask": response_mask,
        },
        non_tensors={"uid": np.array(["a", "b"], dtype=object)},
        meta_info={"global_steps": 1, "temperature": 1.0},
    )


def test_to_tensordict_keeps_tensors_non_tensors_and_meta_info():
    """The conversion the trainer makes on every step (verl/protocol.py:1099)."""
    batch = _batch()
    td = batch.to_tensordict()
    assert td.batch_size == torch.Size([2])
    for key, tensor in batch.batch.items():
        assert torch.equal(td[key], tensor), key
    assert list(td["uid"]) == ["a", "b"]
    assert td["global_steps"] == 1


def test_trainer_step_conversion_to_no_padding():
    """Steps 1 and 2 of ``_compute_old_log_prob`` (ray_trainer.py:1293-1295): to a TensorDict,
    then to verl's no-padding (nested) layout."""
    batch = _batch()
    td = left_right_2_no_padding(batch.to_tensordict())
    lengths = [len(row) for row in td["input_ids"].unbind()]
    assert lengths == batch.batch["attention_mask"].sum(dim=1).tolist() == [5, 7]
    assert td["max_seq_len"] == PROMPT_LEN + RESPONSE_LEN


def test_round_trip_back_to_dataproto():
    """``DataProto.from_tensordict`` (verl/protocol.py:553, also gated on tensordict 0.10)."""
    batch = _batch()
    back = DataProto.from_tensordict(batch.to_tensordict())
    assert torch.equal(back.batch["input_ids"], batch.batch["input_ids"])
    assert list(back.non_tensor_batch["uid"]) == ["a", "b"]
    assert back.meta_info["global_steps"] == 1
