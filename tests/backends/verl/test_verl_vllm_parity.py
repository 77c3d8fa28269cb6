"""vLLM's CPU engine samples from the testbed policy's own distribution: the exported shipped math
base, loaded by vLLM as it is (``GPT2LMHeadModel``, the char-level tokenizer, float32), samples
responses whose log-probs under vLLM equal the testbed's forward pass of the same tokens.

This is what lets verl's rollouts stand in for the testbed's sampler: if the export, the tokenizer
or vLLM's GPT-2 disagreed with the testbed (positions, GELU, LayerNorm eps, the tied head), the
log-probs would differ by far more than float32 rounding.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from gppo.backends.local.settings import LocalSettings
from gppo.backends.verl.cpu import CPU_ENV
from gppo.testbed.hf_export import export_policy
from gppo.testbed.policy import response_log_probs
from gppo.testbed.tasks import get_domain
from gppo.testbed.vocab import EOS, encode, left_pad
from gppo.testbed.warmstart import load_base_model

pytestmark = pytest.mark.slow

SAMPLE = r"""
import json, sys
from vllm import LLM, SamplingParams
model_dir, prompts = sys.argv[1], json.loads(sys.argv[2])
llm = LLM(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=22, seed=0)
params = SamplingParams(n=4, temperature=1.0, top_k=-1, top_p=1.0, max_tokens=5, logprobs=0, seed=0)
out = []
for request in llm.generate(prompts, params):
    for c in request.outputs:
        lps = [d[t].logprob for t, d in zip(c.token_ids, c.logprobs)]
        out.append({"prompt": request.prompt, "prompt_ids": list(request.prompt_token_ids),
                    "ids": list(c.token_ids), "logprobs": lps})
print("RESULT " + json.dumps(out))
"""


@pytest.mark.timeout(900)
def test_vllm_samples_the_testbed_policys_distribution(verl_cpu_venv, tmp_path):
    base = load_base_model(LocalSettings(domain="math"), say=lambda _: None)
    model_dir = export_policy(base.policy, tmp_path / "model")
    dom = get_domain("math")
    prompts = [p.prompt for b in dom.benchmark_names for p in dom.benchmark(b)[:4]]
    env = {**os.environ, **CPU_ENV}
    env.pop("VERL_PLATFORM")  # plain vLLM, no verl
    proc = subprocess.run(
        [str(verl_cpu_venv / "bin" / "python"), "-c", SAMPLE, str(model_dir), json.dumps(prompts)],
        env=env, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    samples = json.loads(line.removeprefix("RESULT "))
    assert len(samples) == 4 * len(prompts)
    ended = 0
    for s in samples:
        assert s["prompt_ids"] == encode(s["prompt"])  # the tokenizer: no BOS, the same ids
        ids, valid = left_pad([s["prompt_ids"]])
        resp = torch.tensor([s["ids"]])
        with torch.no_grad():
            ours, _ = response_log_probs(
                base.policy, ids, valid, resp, torch.ones_like(resp, dtype=torch.float32)
            )
        torch.testing.assert_close(
            ours[0], torch.tensor(s["logprobs"]), atol=1e-4, rtol=0, msg=lambda m, s=s: f"{s}: {m}"
        )
        ended += s["ids"][-1] == EOS
    assert ended >= len(samples) // 2  # vLLM stopped at the exported EOS
