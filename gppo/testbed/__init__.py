"""The CPU testbed as a library: what every trainer that trains on it uses, none of it a backend.

The ``local`` backend (our own GRPO loop, :mod:`gppo.backends.local`), verl's and TRL's
``testbed: true`` routes and any later trainer train and score the same tasks, the same base
models and the same evaluator from here. Modules, one job each:

* tasks: :mod:`.tasks` (domains, families, benchmarks, validation sets, the training stream's RNG:
  :func:`~.tasks.train_rng`), :mod:`.tasks_math`, :mod:`.tasks_code` (the two built-in domains),
  :mod:`.vocab` (the character vocabulary, PAD 0, EOS 1);
* the policy: :mod:`.policy` (a small GPT-2-style transformer; log-probs (B, T)), :mod:`.rollout`
  (batched sampling of (B*G, T) responses with behaviour log-probs), :mod:`.no_dynamo` (AdamW
  without ``torch._dynamo``'s import);
* scoring: :mod:`.evaluate` (avg@k, the one yardstick), :mod:`.answer_prob` (the correct answers'
  probability, teacher-forced), :mod:`.reward` (the exact 0/1 reward of decoded text);
* base models: :mod:`.settings` (the base-model settings and the RL defaults, one home for every
  backend's section), :mod:`.warmstart` (the warm start: key, build, load), :mod:`.shipped` and
  ``base_models/`` (the shipped bases and their records), :mod:`.ship` (``python -m
  gppo.testbed.make_shipped_base``: build and ship one), :mod:`.tempered` (the shipped base at a temperature
  folded into its final layer, ``base_temperature``, and its levels' records), :mod:`.base_eval`
  (a base's step-0 avg@k, cached);
* Hugging Face: :mod:`.hf_export` (the policy as ``GPT2LMHeadModel`` and back), :mod:`.hf_assets`
  (the exported base, benchmarks and training stream as parquet files, keyed by the base's
  warm-start hash), :mod:`.yardstick` (a Hugging Face model directory scored by :mod:`.evaluate`);
* :mod:`.cache` (the cache root, ``$GPPO_CACHE_DIR`` else ``~/.cache/gppo-sweep``, and building a
  file once across processes).

Importing the package imports nothing (torch is imported by the modules that need it).
"""
