"""The HiR section of the model card (`HiRTrainer.create_model_card`) and the paper's citation."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from .verifiers import sentence_backend

HIR_PAPER = {
    "title": "Replay Failures as Successes: Sample-Efficient Reinforcement Learning for Instruction Following",
    "id": "2512.23457",
    # docstyle-ignore
    "citation": textwrap.dedent("""\
        @article{hir2025,
            title        = {{Replay Failures as Successes: Sample-Efficient Reinforcement Learning for Instruction Following}},
            author       = {Kongcheng Zhang and Qi Yao and Shunyu Liu and Wenjian Zhang and Min Cen and Yang Zhou and Wenkai Fang and Yiru Zhao and Baisheng Lai and Mingli Song},
            year         = 2025,
            eprint       = {arXiv:2512.23457},
        }"""),
}


#: HiRConfig fields reported in the model card.
CARD_FIELDS = ("num_generations", "num_replays", "lambda_0", "eta", "replay_selection", "replay_scope",
               "replay_shortfall", "replay_old_logps", "replay_min_satisfied", "diversity_aggregation",
               "diversity_entropy", "advantage_estimator", "kl_in_reward", "reward_mode", "beta", "learning_rate",
               "temperature", "max_completion_length")


def local_card(text: str, base_model: str | None, model_path: str) -> str:
    """TRL's rendered model card with its Hub links to nothing replaced, for a run from a local model or not pushed.

    TRL links the base model to ``huggingface.co/<id>`` and loads the model in the quick start by its Hub id; with a
    local base model (or no Hub id) both read ``None``. The base model is then named by its path, and the quick start
    loads ``model_path`` (the Hub id when pushed, else ``output_dir``).
    """
    if base_model:
        text = text.replace("[None](https://huggingface.co/None)", f"`{base_model}` (local)")
    else:
        text = text.replace("This model is a fine-tuned version of [None](https://huggingface.co/None)",
                            "This model is a fine-tuned model")
    return text.replace('model="None"', f"model={json.dumps(str(model_path))}")


def hir_card_section(args: Any, dataset_name: str | None, log_history: list[dict[str, Any]]) -> str:
    """Markdown section for the model card: HiR hyperparameters, dataset and the latest metrics.

    Only configuration values and logged metrics are written: never environment variables or keys.
    """
    lines = ["## HiR training", "", "Trained with Hindsight instruction Replay "
             "([arXiv:2512.23457](https://arxiv.org/abs/2512.23457)) using `hir-trl`.", ""]
    if dataset_name:
        lines += [f"- Dataset: `{dataset_name}`"]
    lines += [f"- `{name}`: `{getattr(args, name)}`" for name in CARD_FIELDS if hasattr(args, name)]
    lines += [f"- Sentence splitter of the rule verifiers: `{sentence_backend()}` (NLTK Punkt when installed)"]
    latest: dict[str, float] = {}
    for entry in log_history:
        for key, value in entry.items():
            if (key.startswith(("hir/", "reward/")) or key in ("reward", "loss")) and value is not None:
                latest[key] = value
    if latest:
        step = max((e.get("step", 0) for e in log_history), default=0)
        lines += ["", f"Latest metrics (step {step}):", "", "| metric | value |", "|---|---|"]
        lines += [f"| `{key}` | {value:.4g} |" for key, value in sorted(latest.items())
                  if isinstance(value, (int, float))]
    return "\n".join(lines) + "\n"
