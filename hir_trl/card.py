"""The HiR section of the model card (`HiRTrainer.create_model_card`) and the paper's citation."""

from __future__ import annotations

import json
import os
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


#: TRL (`GRPOConfig`) fields reported beside HiRConfig's own: those a HiR run's reward and objective depend on.
TRL_CARD_FIELDS = ("beta", "learning_rate", "temperature", "max_completion_length", "reward_weights", "loss_type",
                   "scale_rewards")


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


def card_fields(args: Any) -> list[str]:
    """The fields the card lists: every field hir-trl declares in `HiRConfig` (`hir_trl.configs.own_fields`: its own
    and the judge's, so a new one cannot be missed), then `TRL_CARD_FIELDS` and any other field of
    `hir_trl.configs.PAPER_VALUES`."""
    from .configs import PAPER_VALUES, own_fields

    own = own_fields()
    extra = [name for name in (*TRL_CARD_FIELDS, *PAPER_VALUES) if name not in own]
    return [name for name in dict.fromkeys(own + extra) if hasattr(args, name)]


def _reward_line(args: Any, reward_names: list[str] | None) -> str:
    mode = getattr(args, "reward_mode", None)
    what = {"ila": "ILA, 1 when every constraint is met", "cla": "CLA, the fraction of constraints met"}.get(mode, mode)
    names = reward_names or [mode]
    weights = getattr(args, "reward_weights", None) or [1.0] * len(names)
    terms = [f"{weights[0]:g} x constraint reward ({what}; 1 for a replay)"]
    terms += [f"{w:g} x `{name}`" for w, name in zip(weights[1:], names[1:])]
    return "- Reward of a row: " + " + ".join(terms) + (
        "; a replay's reward functions score its own (q', y)" if len(names) > 1 else "")


def hir_card_section(args: Any, dataset_name: str | None, log_history: list[dict[str, Any]],
                     reward_names: list[str] | None = None, resumed_from: str | None = None) -> str:
    """Markdown section for the model card: the reward, every HiR hyperparameter, the defaults that depart from the
    paper, the dataset and the latest metrics.

    Args:
        args: the run's `HiRConfig`.
        dataset_name: the training data's name or path, or None.
        log_history: the trainer's ``state.log_history``.
        reward_names: TRL's reward function names, the constraint reward first (``HiRTrainer.reward_func_names``).
        resumed_from: the checkpoint the run resumed from, or None; a resume keeps the checkpoint's optimizer,
            schedule and data settings (`hir_trl.run_folder.check_resume_point` refuses others), so the values listed
            held for every step.

    Only configuration values and logged metrics are written: never environment variables or keys (a judge field
    that looks like a credential is refused by `HiRConfig`).
    """
    from .configs import PAPER_VALUES

    lines = ["## HiR training", "", "Trained with Hindsight instruction Replay "
             "([arXiv:2512.23457](https://arxiv.org/abs/2512.23457)) using `hir-trl`.", ""]
    if dataset_name:
        lines += [_dataset_line(dataset_name)]
    lines += [_reward_line(args, reward_names)]
    if resumed_from:
        lines += [f"- Resumed from `{resumed_from}`, with the same optimizer, schedule and data settings: the values "
                  "below held for every step"]
    lines += [f"- `{name}`: `{getattr(args, name)}`" for name in card_fields(args)]
    lines += [f"- Sentence splitter of the rule verifiers: `{sentence_backend()}` (NLTK Punkt when installed)"]
    lines += ["", f"The {len(PAPER_VALUES)} settings where hir-trl's defaults depart from the paper (the paper recipes "
              "set the paper's values), with this run's value:", "",
              "| field | this run | paper | |", "|---|---|---|---|"]
    for name, paper in PAPER_VALUES.items():
        value = getattr(args, name, None)
        lines += [f"| `{name}` | `{value}` | `{paper}` | {'departs' if value != paper else 'as the paper'} |"]
    latest: dict[str, float] = {}
    for entry in log_history:
        for key, value in entry.items():
            if (key.startswith(("hir/", "reward/", "rewards/")) or key in ("reward", "loss")) and value is not None:
                latest[key] = value
    if latest:
        step = max((e.get("step", 0) for e in log_history), default=0)
        lines += ["", f"Latest metrics (step {step}):", "", "| metric | value |", "|---|---|"]
        lines += [f"| `{key}` | {value:.4g} |" for key, value in sorted(latest.items())
                  if isinstance(value, (int, float))]
    return "\n".join(lines) + "\n"


#: How `HiRTrainer` names a mixture of datasets (``datasets:``) in ``dataset_name``: the entries joined by it.
MIXTURE_SEPARATOR = " + "


def card_dataset_name(dataset_name: str | None) -> str | None:
    """The dataset name TRL's card records in its ``datasets:`` metadata and links to the Hub: a Hub dataset id
    (``org/name``), else None: a local file or folder, a mixture (``A + B``) or any other name that is no Hub id
    would be an invalid entry; the card's text names those (`hir_card_section`)."""
    if dataset_name is None:
        return None
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from .data.loading import _looks_local

    text = str(dataset_name)
    if os.path.exists(os.path.expanduser(text)) or _looks_local(text):
        return None
    try:
        validate_repo_id(text)
    except HFValidationError:
        return None
    return text


def _dataset_line(dataset_name: str) -> str:
    """The card's dataset line: a Hub id as it is, local files (or a mixture) each named, said to be local."""
    if card_dataset_name(dataset_name) is not None:
        return f"- Dataset: `{dataset_name}` (Hugging Face Hub)"
    parts = [part for part in str(dataset_name).split(MIXTURE_SEPARATOR) if part]
    named = ", ".join(f"`{part}`" + ("" if card_dataset_name(part) is None else " (Hub)") for part in parts)
    what = "a mixture of " if len(parts) > 1 else ""
    return f"- Dataset: {what}{named} (local files are named by their path; they are not on the Hub)"


def add_hir_section(readme: str, *, base_model: str, model_path: str, args: Any, dataset_name: str | None,
                    log_history: list[dict[str, Any]], reward_func_names: list[str],
                    resumed_from: str | None = None) -> None:
    """Rewrite TRL's model card at ``readme`` (when it exists): local paths instead of Hub links (`local_card`),
    then the "HiR training" section (`hir_card_section`)."""
    if not os.path.isfile(readme):
        return
    with open(readme, encoding="utf-8") as handle:
        text = local_card(handle.read(), base_model=base_model, model_path=model_path)
    with open(readme, "w", encoding="utf-8") as handle:
        handle.write(text + "\n" + hir_card_section(args, dataset_name, log_history, reward_func_names, resumed_from))
