"""The ``hir-trl`` command line.

``hir-trl train --config recipe.yaml [--field value ...]`` trains with `HiRTrainer`. The recipe and the
command line take the fields of `HiRScriptArguments`, `HiRConfig` and TRL's `ModelConfig`, parsed by
TRL's `TrlParser` exactly as ``trl grpo`` does (an ``env:`` block in the YAML sets environment variables;
unknown keys fail; command-line values override the recipe).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = """usage: hir-trl <command> [options]

commands:
  train   train a model with Hindsight instruction Replay (hir-trl train --config recipe.yaml)
  synth   attach random verifiable constraints to plain prompts
          (hir-trl synth --dataset_name prompts.jsonl --output out.jsonl --num_constraints 3 --seed 0)
  eval    evaluate instruction following: hir-trl eval score|generate|compare ... (hir-trl eval --help)
"""


def make_train_parser():
    """The `TrlParser` of ``hir-trl train``: (HiRScriptArguments, HiRConfig, ModelConfig)."""
    from trl import ModelConfig, TrlParser

    from .configs import HiRConfig, HiRScriptArguments

    return TrlParser((HiRScriptArguments, HiRConfig, ModelConfig), prog="hir-trl train")


def _training_texts(dataset) -> list[str]:
    texts = []
    for row in dataset:
        texts.extend(str(m["content"]) for m in row["prompt"])
        texts.extend(c["text"] for c in row["constraints"])
    return texts


def train(script_args, training_args, model_args) -> None:
    """Run one HiR training job: load the data, (optionally) build the model (``build_model``), train, save, push.

    Raises:
        ValueError: no ``dataset_name``; see also `hir_trl.load_hir_dataset` and `HiRTrainer`.
        MissingDependencyError: ``build_model: smollm2`` without its packages (`hir_trl.models`).
    """
    import transformers
    from packaging.version import Version
    from trl import get_peft_config, get_quantization_config

    from .data import load_hir_dataset
    from .trainer import HiRTrainer

    if not script_args.dataset_name:
        raise ValueError("dataset_name is required: a Hub dataset id or a local .json/.jsonl/.parquet path")
    dataset = load_hir_dataset(script_args.dataset_name, split=script_args.dataset_train_split,
                               name=script_args.dataset_config, max_rows=script_args.dataset_max_rows,
                               on_unverifiable=script_args.dataset_on_unverifiable)
    if script_args.build_model == "tiny":
        from .tiny import ensure_tiny_model

        ensure_tiny_model(model_args.model_name_or_path, lambda: _training_texts(dataset))
    elif script_args.build_model == "smollm2":
        from .models import ensure_smollm2_model

        ensure_smollm2_model(model_args.model_name_or_path)

    model_init_kwargs = dict(revision=model_args.model_revision, trust_remote_code=training_args.trust_remote_code,
                             attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    model_init_kwargs = {k: v for k, v in model_init_kwargs.items() if v is not None}
    if training_args.model_init_kwargs is not None:
        model_init_kwargs.update(training_args.model_init_kwargs)
    training_args.model_init_kwargs = model_init_kwargs

    trainer = HiRTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset,
                         peft_config=get_peft_config(model_args),
                         quantization_config=get_quantization_config(model_args), dataset_name=str(script_args.dataset_name))
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json (log history with the hir/* metrics) beside the model
    trainer.create_model_card()  # also when push_to_hub is off (rank 0 writes it)
    trainer.accelerator.print(f"Model saved to {training_args.output_dir}.")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=str(script_args.dataset_name))
    if Version(transformers.__version__) >= Version("5.18.0"):
        trainer.end()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hir-trl`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        from .models import MissingDependencyError

        script_args, training_args, model_args = make_train_parser().parse_args_and_config(rest)
        try:
            train(script_args, training_args, model_args)
        except MissingDependencyError as error:  # a user error: one line saying what to install, no traceback
            print(f"hir-trl train: error: {error}", file=sys.stderr)
            return 1
        return 0
    if command == "synth":
        from .synth import main as synth_main

        return synth_main(rest)
    if command == "eval":
        from .evaluation import main as eval_main

        return eval_main(rest)
    print(f"hir-trl: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
