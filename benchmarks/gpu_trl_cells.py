"""TRL cells on one CUDA GPU: what a cell costs there and what it gains, through the cell's own
entrypoint (:func:`gppo.backends.trl.__main__.run_cell`, outside a sweep: no Ray, no MLflow).

    python benchmarks/gpu_trl_cells.py --out runs/gpu-trl [--cases testbed-fp32 ...] [--seeds 0 1 2]

Cases (each one cell, tv/mc, planned by ``load_plan`` from a preset with only the hardware changed):

* ``real-bf16``: the ``testbed: false`` route (``configs/trl-gpu-example.yaml``'s settings) on a
  randomly initialised Qwen2 shaped like Qwen2.5-0.5B (24 layers, hidden 896, 14 heads, 2 KV heads;
  the verl smoke assets' 259-token tokenizer and ``smoke`` data: nothing downloaded), bfloat16,
  2 steps of 2 prompts x G 4 with 256-token completions. Checks the GPU route runs end to end
  (model on the GPU, bf16 generation, evaluation, the final save); its scores mean nothing.
* ``testbed-fp32``: ``configs/trl-cpu-testbed.yaml`` as it is (float32, 60 steps) with
  ``num_gpus: 1``: the shipped base and the testbed's evaluator, so its gain reads against the CPU
  figures in docs/studies/cross-trainer.md (TRL tv/mc +16.2 [+12.8, +19.7] over 5 seeds).
* ``testbed-bf16``: the same in bfloat16 (TRL's default precision).

``--seeds`` applies to the testbed cases; a second table gives each testbed case's gain over the
base with a 95 % t-interval over its seeds.

Prints one table: per case, wall time (imports excluded, the two evaluations included), seconds
per step (between the 5th and the last step's log lines), the peak GPU memory (``torch.cuda``) and
process RSS, and the scores. Each finished case is also appended to ``<out>/results.jsonl``, so a
run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import re
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CASES = ("real-bf16", "testbed-fp32", "testbed-bf16")
#: Qwen2.5-0.5B's shape (its config.json), with the smoke tokenizer's vocabulary.
QWEN_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
}
STEP_LINE = re.compile(r"\[trl\] step (\d+) score \S+ ([\d.]+)s")


class Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy (the cell's step lines are parsed from it)."""

    def __init__(self, out: Any) -> None:
        self.out, self.buf = out, io.StringIO()

    def write(self, s: str) -> int:
        self.out.write(s)
        self.out.flush()
        return self.buf.write(s)


def random_qwen(assets: Any, path: Path) -> Path:
    """A random Qwen2 of Qwen2.5-0.5B's shape beside the smoke tokenizer, saved in bfloat16."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    if (path / "config.json").is_file():
        return path
    tok = AutoTokenizer.from_pretrained(assets.model_dir)
    config = Qwen2Config(
        vocab_size=272,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **QWEN_05B,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def spec_for(case: str, seed: int, work: Path, steps: int | None, gpus: int) -> dict[str, Any]:
    """The case's grid spec: a preset with ``num_gpus: 1`` (and its route's data), tv/mc, one seed."""
    if case == "real-bf16":
        from gppo.backends.verl.smoke import build_smoke_assets

        assets = build_smoke_assets(work / "smoke")
        spec = yaml.safe_load((ROOT / "configs/trl-gpu-example.yaml").read_text())
        spec["trl"].update(
            model_path=str(random_qwen(assets, work / "qwen-0.5b-random")),
            train_file=str(assets.train_file),
            val_files={"smoke": str(assets.val_file)},
            steps=2,
            prompts_per_step=2,
            group_size=4,
            minibatches=2,
            max_new_tokens=256,
            eval_prompts=8,
            save_every=2,
            dtype="bfloat16",
        )
        spec["eval"] = {"k": 2}
    else:
        spec = yaml.safe_load((ROOT / "configs/trl-cpu-testbed.yaml").read_text())
        spec["trl"]["dtype"] = "bfloat16" if case == "testbed-bf16" else "float32"
    spec["name"] = f"gpu-{case}"
    spec["grid"] = {"divergences": ["tv"], "estimators": ["mc"]}
    spec["seeds"] = [seed]
    spec.pop("baselines", None)
    spec["trl"].update(num_gpus=gpus, checkpoint_dir=str(work / "ckpt" / case))
    if steps is not None:
        spec["trl"].update(steps=steps, save_every=steps)
    return spec


def run_case(case: str, seed: int, work: Path, steps: int | None, gpus: int) -> dict[str, Any]:
    """Plan the case's one cell and run it; its costs and scores."""
    import torch

    from gppo.backends.trl.__main__ import run_cell
    from gppo.grid.load import load_plan

    path = work / f"{case}-s{seed}.yaml"
    path.write_text(yaml.safe_dump(spec_for(case, seed, work, steps, gpus)))
    (cell,) = load_plan(path).cells
    if gpus:  # the peak of this cell alone (the last cell's model freed)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    tee = Tee(sys.stdout)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(tee):
        scores = run_cell(cell, None)
    wall = time.perf_counter() - t0
    base = re.search(r"\[trl\] step 0 avg@\d+: (\{.*\})", tee.buf.getvalue())
    steps = {int(s): float(t) for s, t in STEP_LINE.findall(tee.buf.getvalue())}
    last = max(steps) if steps else 0
    per_step = (steps[last] - steps[5]) / (last - 5) if last > 5 and 5 in steps else None
    return {
        "case": case,
        "seed": seed,
        "cell": cell.id,
        "steps": cell.settings["steps"],
        "wall_s": round(wall, 1),
        "s_per_step": round(per_step, 3) if per_step else None,
        "gpu_peak_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if gpus else None,
        "rss_peak_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "base": yaml.safe_load(base.group(1).replace("'", '"')) if base else None,
        "final": scores,
    }


def avg(scores: dict[str, float] | None) -> str:
    if not scores:
        return "-"
    return f"{100 * sum(scores.values()) / len(scores):.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("runs/gpu-trl"))
    p.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds of the testbed cases")
    p.add_argument("--steps", type=int, help="steps of every case (default: each preset's)")
    p.add_argument("--cpu", action="store_true", help="a dry run of the script on the CPU")
    args = p.parse_args(argv)

    import torch

    gpus = 0 if args.cpu else 1
    if gpus and not torch.cuda.is_available():
        p.error("no CUDA GPU: this benchmark measures TRL cells on one (--cpu: a dry run)")
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for case in args.cases:
        for seed in args.seeds if case.startswith("testbed") else [0]:
            result = run_case(case, seed, args.out, args.steps, gpus)
            results.append(result)
            with (args.out / "results.jsonl").open("a") as f:
                f.write(json.dumps(result) + "\n")
    device = torch.cuda.get_device_name() if gpus else "CPU (dry run)"
    print(f"\n{device}, torch {torch.__version__}\n")
    print(
        "| case | seed | steps | wall (s) | s/step | GPU peak (GB) | RSS peak (GB) | base | final |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['case']} | {r['seed']} | {r['steps']} | {r['wall_s']} | {r['s_per_step']} | "
            f"{r['gpu_peak_gb']} | {r['rss_peak_gb']} | {avg(r['base'])} | {avg(r['final'])} |"
        )
    print_gains(results)
    return 0


def print_gains(results: list[dict[str, Any]]) -> None:
    """Per testbed case over its seeds: the mean final Avg. and its gain over the base, with a
    95 % t-interval (the unit is one seed's run)."""
    from scipy import stats

    print("\n| case | seeds | base | final (mean) | gain | 95 % interval |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in CASES:
        runs = [r for r in results if r["case"] == case and r["base"]]
        if not runs or not case.startswith("testbed"):
            continue
        gains = [float(avg(r["final"])) - float(avg(r["base"])) for r in runs]
        mean = statistics.mean(gains)
        half = (
            stats.t.ppf(0.975, len(gains) - 1) * statistics.stdev(gains) / len(gains) ** 0.5
            if len(gains) > 1
            else float("nan")
        )
        print(
            f"| {case} | {len(runs)} | {avg(runs[0]['base'])} | "
            f"{statistics.mean(float(avg(r['final'])) for r in runs):.1f} | {mean:+.1f} | "
            f"[{mean - half:+.1f}, {mean + half:+.1f}] |"
        )


if __name__ == "__main__":
    sys.exit(main())
