"""Prepare .dev/ for benchmarks/sweeps/gpu_probe_smollm2.sh: the decisive-smollm2 task folder (rows only; the GPU
machine builds the model with random weights from SmolLM2-135M-Instruct's config) and the probe's settings: the
pre-registered bench of decisive-smollm2.yaml with 4 steps (8 prompts) and 32 x 4 held-out completions, on CUDA.

Run from the repository root: ``PYTHONPATH=. python benchmarks/sweeps/gpu_probe_smollm2_prep.py`` (needs ../shared
and the converted model in outputs/SmolLM2-135M-Instruct, ``make install-smollm2``)."""

import dataclasses
import json
import shutil
from pathlib import Path

from benchmarks.learning import decisive
from benchmarks.learning.real_task import build_rows

ROOT = Path(".dev")
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")


def main() -> None:
    spec = decisive.load_preregistration("benchmarks/experiments/decisive-smollm2/preregistration.yaml")
    cfg = decisive.task_config(spec)
    data = build_rows(cfg)
    task = ROOT / "task"
    task.mkdir(parents=True, exist_ok=True)
    for name, rows in (("rl_prompts.jsonl", data["rl"]), ("eval_rows.jsonl", data["eval"]),
                       ("eval_prompts.jsonl", data["eval"])):
        (task / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (task / "meta.json").write_text(json.dumps({"kind": "real", "config": dataclasses.asdict(cfg), "sft": None,
                                                "note": "GPU cost probe: random-init weights, not the real model"}))
    bench = dataclasses.asdict(decisive.bench_config(spec, ["hir_cla", "rl_cr"], [0]))
    bench.update(device="cuda", prompts=8, eval_every=4, eval_prompts=32, preregistration="", jobs=1, threads=4)
    (ROOT / "bench.json").write_text(json.dumps(bench))
    config = ROOT / "smol-config"
    config.mkdir(exist_ok=True)
    for name in MODEL_FILES:
        shutil.copy(Path("outputs/SmolLM2-135M-Instruct") / name, config / name)
    print(f"{len(data['rl'])} training rows, {len(data['eval'])} held-out rows; settings in {ROOT / 'bench.json'}")


if __name__ == "__main__":
    main()
