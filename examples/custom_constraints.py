"""Bring your own constraints and rewards, end to end: register a checker, train HiR on rows that use it, evaluate.

Runs on CPU in well under a minute with a random-init tiny model built locally (nothing is downloaded)::

    python examples/custom_constraints.py --workdir outputs/custom-constraints

1. ``register_verifier`` adds two rules of a family of our own, ``acme``: ``mentions`` (the product's name, exact
   case; its loose check ignores case) and ``no_exclamation``.
2. Three native rows use them beside an IFEval rule; ``load_hir_dataset`` validates their kwargs.
3. ``HiRTrainer`` trains the tiny model two steps on them, with a TRL-style reward function (``brevity``) beside the
   constraint reward; a replay keeps the constraints its completion met, and ``brevity`` scores the replay's own
   (q', y).
4. The trained model answers the rows, and ``hir_trl.evaluation`` scores the answers: ILA and CLA, strict and loose
   (``acme/mentions`` has a loose check).

The same family reaches the command line through a module: ``verifier_modules: [my_pkg.constraints]`` in a recipe,
``hir-trl eval score --verifier_modules my_pkg.constraints ...``, ``hir-trl synth --verifier_modules ...``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hir_trl import HiRConfig, HiRTrainer, load_hir_dataset, register_verifier
from hir_trl.evaluation import GenerationSettings, format_report, generate_responses, load_benchmark, score
from hir_trl.models.tiny import build_tiny_model


def register_acme() -> None:
    """The ``acme`` family: two rules of our own."""

    @register_verifier("acme", "mentions", description="Mention {product} by name.",
                       check_loose=lambda response, product: product.lower() in response.lower())
    def mentions(response: str, product: str) -> bool:
        return product in response

    @register_verifier("acme", "no_exclamation", description="Do not use exclamation marks.")
    def no_exclamation(response: str) -> bool:
        return "!" not in response


def brevity(prompts, completions, **kwargs) -> list[float]:
    """A TRL reward function: minus the completion's length in hundreds of characters."""
    return [-len(completion[0]["content"]) / 100 for completion in completions]


ROWS = [("Describe our new kettle.", "AcmeBoil"), ("Advertise our toaster.", "AcmeToast"),
        ("Review our blender.", "AcmeWhirl")]


def write_rows(path: Path) -> list[dict]:
    rows = [{"id": f"acme-{i}", "task": task, "constraints": [
        {"text": f"Mention {product} by name.", "family": "acme", "instruction_id": "mentions",
         "kwargs": {"product": product}},
        {"text": "Do not use exclamation marks.", "family": "acme", "instruction_id": "no_exclamation"},
        {"text": "Do not use any commas.", "family": "ifeval", "instruction_id": "punctuation:no_comma"}]}
        for i, (task, product) in enumerate(ROWS)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="outputs/custom-constraints")
    parser.add_argument("--max_steps", type=int, default=2)
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)

    register_acme()
    data = work / "acme.jsonl"
    rows = write_rows(data)
    dataset = load_hir_dataset(data)
    texts = [row["task"] for row in rows] + [c["text"] for row in rows for c in row["constraints"]]
    model = build_tiny_model(work / "tiny-model", texts, vocab_size=300)

    config = HiRConfig(output_dir=str(work / "hir"), max_steps=args.max_steps, per_device_train_batch_size=8,
                       num_generations=4, num_replays=2, max_completion_length=16, reward_weights=[1.0, 0.5],
                       replay_truncated_completions=True,  # a random tiny model rarely stops
                       use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1)
    trainer = HiRTrainer(model=str(model), args=config, train_dataset=dataset, reward_funcs=[brevity],
                         dataset_name=str(data))
    trainer.train()
    trainer.save_model(config.output_dir)
    trainer.create_model_card()
    replay = trainer.last_replay
    for row, reward in zip(replay.new_rows, replay.rewards[-len(replay.new_rows):]):
        if row.kind == "replay":
            print(f"replay reward {reward:+.3f} (1 + 0.5 x brevity of its own (q', y)); "
                  f"q' = {row.q_prime[-1]['content']!r}")

    benchmark = load_benchmark(data, format="hir", name="acme")
    settings = GenerationSettings(model=config.output_dir, max_tokens=16, temperature=1.0, backend="transformers")
    responses, _ = generate_responses([row.messages for row in benchmark.rows], settings, progress=False)
    report = score([benchmark], {row.prompt: samples for row, samples in zip(benchmark.rows, responses)},
                   run_name="acme-hir")
    print(format_report(report))
    return report


if __name__ == "__main__":
    main()
