"""Constraint verification for a batch of completions, and the TRL reward function built on it.

`ConstraintReward` is the reward function `HiRTrainer` hands to TRL, first of its ``reward_funcs``: TRL calls it
once per generation batch with the dataset columns, it verifies every (row, constraint) pair exactly once, returns
ILA (or CLA, ``HiRConfig.reward_mode``) per row, and keeps the `VerdictMatrix` so that the replay selection reuses
the same verdicts. `trainer_reward` assembles a trainer's reward functions (the `ConstraintReward`, then any
TRL-style functions), `extra_rewards` runs those functions on a replay's own (q', y) and `weighted_rewards` combines
a row's rewards as TRL does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..data.chat import completion_text, instruction_text
from ..errors import chosen
from ..judge import Judge, judge_batch  # noqa: F401 - Judge, judge_batch: public here too
from ..verifiers import Verdict, verify_constraint

logger = logging.getLogger(__name__)

@dataclass
class VerdictMatrix:
    """Verdicts keyed by (row, constraint): ``verdicts[row][j]`` is I(q_row, y_row, c_j).

    Rows may have different numbers of constraints. A row's verdicts never move to another row: a
    failing checker yields a failed `Verdict` with ``error`` set in its own cell.
    """

    verdicts: list[list[Verdict]]

    def __len__(self) -> int:
        return len(self.verdicts)

    def __getitem__(self, key: tuple[int, int]) -> Verdict:
        row, j = key
        return self.verdicts[row][j]

    def passed(self, row: int) -> list[bool]:
        """Per-constraint pass flags of ``row``."""
        return [v.passed for v in self.verdicts[row]]

    def ila(self) -> list[float]:
        """Instruction-level accuracy per row: 1.0 when every constraint passed (paper ILA)."""
        return [float(all(v.passed for v in row)) for row in self.verdicts]

    def cla(self) -> list[float]:
        """Constraint-level accuracy per row: the fraction of constraints passed (paper CLA)."""
        return [sum(v.passed for v in row) / len(row) if row else 0.0 for row in self.verdicts]

    def rewards(self, reward_mode: str) -> list[float]:
        """Per-row reward under ``reward_mode``: `ila` (``"ila"``, binary) or `cla` (``"cla"``, fraction met).

        The one place that picks the formula: training, supplementary samples and re-judged replays all call it.

        Raises:
            ValueError: ``reward_mode`` is not a key of `REWARD_MODES` (the message names the field and its choices).
        """
        return chosen(REWARD_MODES, "reward_mode", reward_mode)(self)

    def num_errors(self) -> int:
        """How many verdicts record a checker or judge failure."""
        return sum(v.error is not None for row in self.verdicts for v in row)

    def log_entries(self, constraints: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
        """The completion log's ``verdicts`` column: per row, a JSON list with one entry per constraint, in order.

        Each entry is ``{"constraint": instruction id (text for a soft constraint), "kind": "hard" | "soft",
        "source": "rule" | "judge", "passed": bool}``, plus ``"error"`` (the checker's or judge's redacted error text)
        when the verdict is a failure to check, so rule verdicts, judge verdicts and judge errors sit side by side.
        """
        return [json.dumps([{"constraint": c.get("instruction_id") or c.get("text"), "kind": c.get("kind"),
                             "source": v.source, "passed": bool(v.passed), **({"error": v.error} if v.error else {})}
                            for c, v in zip(items, row)], ensure_ascii=False)
                for items, row in zip(constraints, self.verdicts)]


#: ``HiRConfig.reward_mode``'s registry: the per-row reward of a `VerdictMatrix` by name (its keys are the field's
#: choices): ILA (binary, all constraints met, the paper's) or CLA (the fraction of constraints met).
REWARD_MODES: dict[str, Callable[[VerdictMatrix], list[float]]] = {"ila": VerdictMatrix.ila, "cla": VerdictMatrix.cla}


class ConstraintReward:
    """TRL reward function: verify each completion's constraints once and return ILA (or CLA).

    TRL calls it as ``reward(prompts=..., completions=..., completion_ids=..., constraints=..., **columns)``
    where ``constraints`` is the dataset column of normalized constraints (see `hir_trl.data`). When TRL passes its
    ``log_extra`` hook, every row's per-constraint verdicts (rule and judge, with any error) go to the completion log's
    ``verdicts`` column (`VerdictMatrix.log_entries`); with its ``log_metric`` hook it logs ``reward/ila`` and
    ``reward/cla`` (the mean over the batch's rows of every rank) and ``verify/errors`` (failed checks, rule or judge,
    summed over ranks).

    Args:
        judge: called once per batch with the (instruction, response, constraint) triples of all soft
            constraints (e.g. `hir_trl.judge.LiteLLMJudge`). Without a judge, a soft constraint gets a failed
            verdict whose ``error`` says so; so does every soft constraint of the batch when the judge raises,
            except `hir_trl.judge.JudgeError`, which propagates (``judge_failure_policy="raise"``).
        reward_mode: ``None`` (default): `HiRTrainer` sets ``HiRConfig.reward_mode``, the one owner of the reward
            mode (called outside `HiRTrainer` while unset, it scores ILA, the paper's reward). ``"ila"`` (binary
            all-constraints-met reward) or ``"cla"`` (fraction met) for use outside `HiRTrainer` (e.g. in a plain
            `GRPOTrainer`); `HiRTrainer` refuses a mode other than its config's, naming both.

    Attributes:
        last_verdicts: the `VerdictMatrix` of the latest call (rows in the order TRL passed them).
        num_checks: total constraint checks run so far (each (row, constraint) once per call).
        seconds: wall seconds spent since the last `pop_seconds`: ``"verification"`` (the rule verifiers) and
            ``"judge"`` (waiting for the judge once they are done), the ``hir/seconds_verification`` and
            ``hir/seconds_judge`` timings.
        overlap_judge: True (default): the batch's soft constraints go to the judge, on a thread of its own, before
            the rule verifiers run (or earlier, `judge_ahead`), so that its requests are in flight meanwhile (the
            judge is then called from that thread); False: the judge is called after the rule verifiers, on the
            calling thread. The verdicts are the same either way, in the same cells.

    Raises:
        ValueError: an unknown ``reward_mode``.
    """

    def __init__(self, judge: Judge | None = None, reward_mode: str | None = None) -> None:
        self.judge = judge
        self.reward_mode = reward_mode
        self.last_verdicts: VerdictMatrix | None = None
        self.num_checks = 0
        self.seconds = {"verification": 0.0, "judge": 0.0}
        self.overlap_judge = True
        self._ahead: tuple[list[tuple[str, str, str]], threading.Thread, dict[str, Any]] | None = None

    def judge_ahead(self, prompts: Sequence[Any], completions: Sequence[Any],
                    constraints: Sequence[Sequence[Mapping[str, Any]]]) -> bool:
        """Send the soft constraints of these rows to the judge now, on a thread of its own, so that its requests
        are in flight until the `verify` call on the same rows (same instructions, responses and soft-constraint
        texts, in order) collects the verdicts; a `verify` call on other rows waits for these to finish, drops them
        and judges its own (the judge never runs two batches at once).
        `HiRTrainer` calls it as soon as TRL has generated (`GRPOTrainer._generate`), so that the judge's wait
        overlaps TRL's old-log-prob and reference passes. Does nothing unless `overlap_judge` and a judge are set.

        Args:
            prompts, completions, constraints: (B,) each, as `verify` takes them.

        Returns:
            Whether requests were started (some row has a soft constraint).
        """
        if not self.overlap_judge:
            return False
        if self._ahead is not None:  # an earlier batch nobody collected: let it finish first
            self._ahead[1].join()
            self._ahead = None
        triples = [(instruction_text(prompt), completion_text(completion), c["text"])
                   for prompt, completion, items in zip(prompts, completions, constraints)
                   for c in items if c["kind"] == "soft"]
        waiting, judged = self._start_judge(triples)
        self._ahead = (triples, waiting, judged) if waiting is not None else None
        return waiting is not None

    def _start_judge(self, triples: list[tuple[str, str, str]]) -> tuple[threading.Thread | None, dict[str, Any]]:
        """A started thread judging ``triples`` into the returned dict (`_judge_into`); (None, {}) without a judge or
        a triple."""
        judged: dict[str, Any] = {}
        if not triples or self.judge is None:
            return None, judged
        waiting = threading.Thread(target=_judge_into, args=(self.judge, triples, judged), name="hir-judge-batch",
                                   daemon=True)
        waiting.start()
        return waiting, judged

    def pop_seconds(self) -> dict[str, float]:
        """`seconds` since the previous call (wall seconds of rule verification and judge wait), then reset."""
        seconds, self.seconds = self.seconds, {"verification": 0.0, "judge": 0.0}
        return seconds

    @property
    def reward_mode(self) -> str | None:
        """``"ila"``, ``"cla"``, or None until `HiRTrainer` sets its config's."""
        return self._reward_mode

    @reward_mode.setter
    def reward_mode(self, value: str | None) -> None:
        if value is not None:
            chosen(REWARD_MODES, "reward_mode", value)
        self._reward_mode = value
        self.__name__ = value or "ila"  # TRL names the reward column after the callable

    def verify(self, prompts: Sequence[Any], completions: Sequence[Any],
               constraints: Sequence[Sequence[Mapping[str, Any]]]) -> VerdictMatrix:
        """Verify every (row, constraint) pair once: the rule verifiers here, the soft constraints by the judge (on
        its own thread while the rules run, or collected from `judge_ahead`; see `overlap_judge`). Adds the wall
        seconds of the rules and of the wait for the judge to `seconds`.

        Args:
            prompts: (B,) prompts (conversational or plain); the final user turn is the instruction.
            completions: (B,) completions (conversational or plain).
            constraints: (B,) the rows' normalized constraint lists.

        Returns:
            A `VerdictMatrix` with B rows.

        Raises:
            ValueError: the three sequences differ in length.
            JudgeError: the judge failed and its failure policy is ``"raise"``.
        """
        if not (len(prompts) == len(completions) == len(constraints)):
            raise ValueError(f"got {len(prompts)} prompts, {len(completions)} completions and "
                             f"{len(constraints)} constraint lists")
        texts = [(instruction_text(prompt), completion_text(completion))
                 for prompt, completion in zip(prompts, completions)]
        soft = [(r, j, (texts[r][0], texts[r][1], c["text"]))
                for r, items in enumerate(constraints) for j, c in enumerate(items) if c["kind"] == "soft"]
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == [t for _, _, t in soft]:  # `judge_ahead` already asked for these
            waiting, judged = ahead[1], ahead[2]
        else:
            if ahead is not None:  # other rows were sent ahead: let them finish, so the judge runs one batch at a time
                ahead[1].join()
            waiting, judged = self._start_judge([t for _, _, t in soft]) if self.overlap_judge else (None, {})
        started = time.perf_counter()
        rows: list[list[Verdict | None]] = []
        for (instruction, response), items in zip(texts, constraints):
            row: list[Verdict | None] = []
            for c in items:
                if c["kind"] == "soft":
                    row.append(None)
                    continue
                kwargs = json.loads(c["kwargs"]) if isinstance(c["kwargs"], str) else c["kwargs"]
                row.append(verify_constraint(c["family"], c["instruction_id"], kwargs, response, instruction))
            rows.append(row)
            self.num_checks += len(items)
        verified = time.perf_counter()
        self.seconds["verification"] += verified - started
        if soft:
            if waiting is None:
                _judge_into(self.judge, [t for _, _, t in soft], judged)
            else:
                waiting.join()
            self.seconds["judge"] += time.perf_counter() - verified
            if "error" in judged:
                raise judged["error"]
            for (r, j, _), verdict in zip(soft, judged["verdicts"]):
                rows[r][j] = verdict
        return VerdictMatrix([list(row) for row in rows])  # every soft cell was filled by judge_batch

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], constraints=None,
                 **kwargs: Any) -> list[float]:
        if constraints is None:
            raise ValueError("the dataset has no 'constraints' column; load it with hir_trl.load_hir_dataset")
        matrix = self.verify(prompts, completions, constraints)
        self.last_verdicts = matrix
        log_extra = kwargs.get("log_extra")  # TRL's hook for completion-log columns (one value per row)
        if callable(log_extra):
            log_extra("verdicts", matrix.log_entries(constraints))
        log_metric = kwargs.get("log_metric")  # TRL's hook for scalar metrics (averaged over calls and ranks)
        if callable(log_metric):
            log_verdict_metrics(matrix, log_metric)
        return matrix.rewards(self.reward_mode or "ila")


def _judge_into(judge: Judge | None, triples: list[tuple[str, str, str]], out: dict[str, Any]) -> None:
    """``out["verdicts"] = judge_batch(judge, triples)``, or ``out["error"]``: what it raised (re-raised by the
    caller, on its own thread)."""
    try:
        out["verdicts"] = judge_batch(judge, triples)
    except BaseException as exc:  # noqa: BLE001 - handed to the calling thread, which raises it
        out["error"] = exc


def _num_processes() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def log_verdict_metrics(matrix: VerdictMatrix, log_metric: Callable[[str, float], None]) -> None:
    """Log ``reward/ila``, ``reward/cla`` and ``verify/errors`` of one batch through TRL's ``log_metric`` hook.

    TRL averages each metric over the values logged on every rank, so ILA and CLA are logged once per row (their
    average is the mean over all ranks' rows), and the error count once, times the number
    of ranks (its average is the sum over ranks).

    Args:
        matrix: the batch's verdicts (B rows).
        log_metric: ``log_metric(name, value)``, TRL's hook (`GRPOTrainer._log_metric`).
    """
    for ila, cla in zip(matrix.ila(), matrix.cla(), strict=True):
        log_metric("reward/ila", ila)
        log_metric("reward/cla", cla)
    log_metric("verify/errors", matrix.num_errors() * _num_processes())


def rejudge_replays(judge: Any, reward_mode: str, inputs: Sequence[dict[str, Any]], completions: Sequence[Any],
                    new_rows: Sequence[Any]) -> dict[int, float]:
    """``HiRConfig.rejudge_replays``: re-judge each replay's kept soft constraints under its q'.

    Args:
        judge: the soft-constraint judge (its ``rejudge`` method when it has one), or None.
        reward_mode: ``"ila"`` or ``"cla"``.
        inputs, completions: the B sampled rows' dataset rows and completions.
        new_rows: the new rows (`hir_trl.step.batch.NewRow`).

    Returns:
        the reward of each replay, by its offset among the new rows, when some replay keeps a soft constraint:
        `VerdictMatrix.rewards` (ILA or CLA) over its kept constraints, the rule verdicts (met by construction) and
        the new judge verdicts; {} when no replay keeps a soft constraint.
    """
    cells, triples = [], []
    replays = {offset: row for offset, row in enumerate(new_rows) if row.kind == "replay"}
    kept = {offset: [j for j, met in enumerate(row.choice.kept) if met] for offset, row in replays.items()}
    for offset, row in replays.items():
        if judge is None:
            break
        constraints = inputs[row.source]["constraints"]
        for position, j in enumerate(kept[offset]):
            if constraints[j]["kind"] == "soft":
                cells.append((offset, position))
                triples.append((instruction_text(row.q_prime), completion_text(completions[row.source]),
                                constraints[j]["text"]))
    if not triples:
        return {}
    verdicts = {offset: [Verdict(True)] * len(js) for offset, js in kept.items()}
    for (offset, position), verdict in zip(cells, judge_batch(getattr(judge, "rejudge", judge), triples)):
        verdicts[offset][position] = verdict
    return dict(zip(verdicts, VerdictMatrix(list(verdicts.values())).rewards(reward_mode)))


class SoftConstraintsWithoutJudgeError(ValueError):
    """The data has soft (LLM-judged) constraints, no judge is configured and ``soft_constraints`` is 'judge'."""


def check_soft_constraints_judged(train_dataset: Any, eval_dataset: Any = None) -> None:
    """Refuse to train when soft constraints would silently get reward 0 (HiRConfig ``soft_constraints: judge``).

    Raises:
        SoftConstraintsWithoutJudgeError: (a `ValueError`) the training or evaluation data holds soft constraints
            (or is a streaming dataset, which cannot be checked) and no judge is configured.
    """
    from ..data.loading import count_soft_constraints

    for split, dataset in (("training", train_dataset), ("evaluation", eval_dataset)):
        counts = count_soft_constraints(dataset)
        if counts is not None and counts[0] == 0:
            continue
        what = (f"{counts[0]} soft (LLM-judged) constraint(s) in {counts[1]} row(s)" if counts is not None else
                "a streaming dataset, which may hold soft (LLM-judged) constraints")
        raise SoftConstraintsWithoutJudgeError(
            f"the {split} data has {what} but no judge is configured (judge_model is empty), so they would all fail "
            "silently: set judge_model (and judge_api_key_env, the NAME of the variable holding the key; "
            "docs/judge.md), or choose explicitly with soft_constraints: fail (they count as unmet) or "
            "soft_constraints: skip (they are removed and not rewarded)")


#: Rows of a streaming dataset read before training to see whether it holds soft constraints (`judge_for`).
PEEK_ROWS = 64


def judge_for(args: Any, train_dataset: Any, eval_dataset: Any = None) -> Any:
    """The judge a built `ConstraintReward` gets: `hir_trl.judge.build_judge` of ``args`` when the data has soft
    constraints, None when it has none; for data that cannot be counted (a streaming `datasets.IterableDataset`), the
    judge when one of its first `PEEK_ROWS` rows has a soft constraint, else a `hir_trl.judge.DeferredJudge`, built
    only if a soft constraint comes (so that rule-checked data never needs the judge's key).

    Raises:
        hir_trl.judge.MissingJudgeKeyError: the judge is needed now and its key variable is unset.
    """
    import itertools

    from ..data.loading import count_soft_constraints
    from ..judge import DeferredJudge, build_judge

    unknown = False
    for dataset in (train_dataset, eval_dataset):
        for split in (dataset.values() if isinstance(dataset, Mapping) else [dataset]):
            counts = count_soft_constraints(split)
            if counts is None:
                rows = list(itertools.islice(iter(split), PEEK_ROWS))
                counts = count_soft_constraints(rows)
                unknown = True
            if counts[0] > 0:
                return build_judge(args)  # None without judge_model
    return DeferredJudge(args) if unknown and args.judge_model else None


def trainer_reward(args: Any, train_dataset: Any, eval_dataset: Any = None, reward_funcs: Any = None,
                   judge: Any = None) -> tuple[list[Any], Any, Any]:
    """The reward functions of a `HiRTrainer`, the `ConstraintReward` first, and its datasets after
    ``soft_constraints: skip``.

    Args:
        args: the `HiRConfig` (``soft_constraints``, ``reward_mode``, ``reward_weights``, the judge fields).
        train_dataset, eval_dataset: normalized datasets (`hir_trl.load_hir_dataset`), or None.
        reward_funcs: None (build the constraint reward), one reward function, or a list: at most one
            `ConstraintReward`, first, and TRL-style reward functions ``fn(prompts, completions, **kwargs) ->
            list[float | None]`` (see `extra_rewards`) or reward models (`is_reward_model`: a model id or folder,
            which `GRPOTrainer` loads as a sequence-classification model with its tokenizer, or a loaded model).
            Without a `ConstraintReward`, one is built and put first.
        judge: the soft-constraint judge for a built reward; None builds one from ``judge_model`` when the data has
            soft constraints.

    Returns:
        ``(reward_funcs, train_dataset, eval_dataset)``; ``reward_funcs[0]`` is the `ConstraintReward`, its
        ``reward_mode`` set to ``args.reward_mode``; the other functions are wrapped so that each call's result is
        checked (`hir_trl.guards.checked_reward_function`: one finite number or None per completion); reward models
        are passed on as they are, for `GRPOTrainer` to load.

    Raises:
        TypeError: a reward that is neither a function nor a reward model, or a second `ConstraintReward`.
        ValueError: ``soft_constraints: skip`` leaves no training row; a reward function TRL's call would fail on
            (`reward_call_problem`); a `ConstraintReward` whose ``reward_mode``
            differs from ``args.reward_mode`` (both named), a
            `ConstraintReward` that is not first, ``reward_weights`` of the wrong length, or extra reward functions
            with ``multi_objective_aggregation`` other than ``"sum_then_normalize"``.
        SoftConstraintsWithoutJudgeError: see `check_soft_constraints_judged`.
        KeyError: ``judge_api_key_env`` names an unset variable.
    """
    from ..data.loading import drop_soft_constraints
    from ..guards import checked_reward_function

    funcs = [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [
        reward_funcs]
    constraint = [f for f in funcs if isinstance(f, ConstraintReward)]
    if len(constraint) > 1:
        raise TypeError(f"HiRTrainer takes one ConstraintReward, got {len(constraint)}")
    if constraint and funcs[0] is not constraint[0]:
        raise ValueError("the ConstraintReward must be the first of reward_funcs (reward_weights[0] is its weight)")
    extras = funcs[1:] if constraint else funcs
    for f in extras:
        if not (is_reward_model(f) or callable(f)):
            raise TypeError("HiRTrainer adds TRL-style reward functions fn(prompts, completions, **kwargs) -> "
                            "list[float | None] and reward models (a model id or folder, or a loaded sequence-"
                            f"classification model) to the constraint reward; got {type(f).__name__} {f!r:.60}")
    if args.soft_constraints == "skip":
        train_dataset = drop_soft_constraints(train_dataset)
        eval_dataset = None if eval_dataset is None else drop_soft_constraints(eval_dataset)
        if hasattr(train_dataset, "__len__") and len(train_dataset) == 0:
            raise ValueError("soft_constraints: skip removed every row of the training data (each held only soft "
                             "constraints, which no rule verifier checks): nothing is left to train on; set "
                             "judge_model and soft_constraints: judge (docs/judge.md), or add rows with hard "
                             "constraints")
    if constraint:
        reward = constraint[0]
        if reward.reward_mode is not None and reward.reward_mode != args.reward_mode:
            raise ValueError(f"the ConstraintReward passed in has reward_mode={reward.reward_mode!r} but "
                             f"HiRConfig.reward_mode={args.reward_mode!r}: the config owns the reward mode; set "
                             "reward_mode in HiRConfig and build ConstraintReward without it")
    else:
        if judge is None:
            judge = judge_for(args, train_dataset, eval_dataset)
        reward = ConstraintReward(judge=judge)
    reward.reward_mode = args.reward_mode
    problem = extra_rewards_problem(extras, getattr(train_dataset, "column_names", None) or [],
                                    getattr(args, "reward_weights", None))
    if problem is not None:
        raise ValueError(problem)
    aggregation = getattr(args, "multi_objective_aggregation", "sum_then_normalize")
    if extras and aggregation != "sum_then_normalize":
        raise ValueError("HiRTrainer sums the weighted rewards of every row, replays included "
                         f"(multi_objective_aggregation='sum_then_normalize'), got {aggregation!r}")
    if reward.judge is None and args.soft_constraints == "judge":
        check_soft_constraints_judged(train_dataset, eval_dataset)
    return ([reward, *(f if is_reward_model(f) else checked_reward_function(f) for f in extras)], train_dataset,
            eval_dataset)


#: The reward functions ``trl grpo`` knows by name (its ``reward_funcs_registry``), each built as it builds it
#: (``get_soft_overlong_punishment`` with ``max_completion_len=1280, soft_punish_cache=256``).
TRL_REWARD_FUNCTIONS: dict[str, Callable[[], Callable[..., Any]]] = {
    "accuracy_reward": lambda: _trl_reward("accuracy_reward"),
    "reasoning_accuracy_reward": lambda: _trl_reward("reasoning_accuracy_reward"),
    "think_format_reward": lambda: _trl_reward("think_format_reward"),
    "get_soft_overlong_punishment": lambda: _trl_reward("get_soft_overlong_punishment")(max_completion_len=1280,
                                                                                          soft_punish_cache=256),
}


def _trl_reward(name: str) -> Callable[..., Any]:
    from ..trl_internals import trl_rewards

    return getattr(trl_rewards, name)


def names_reward_model(name: str) -> bool:
    """Whether a ``reward_funcs`` entry names a reward model rather than a function: a local folder, or a Hub id
    (a ``/`` in it: ``org/model``), as `GRPOTrainer` takes a string in ``reward_funcs``."""
    import os

    return os.path.isdir(os.path.expanduser(name)) or "/" in name or "\\" in name


def is_reward_model(function: Any) -> bool:
    """Whether an entry of ``reward_funcs`` is a reward model: a model id or folder (a string), or a loaded model
    (a ``torch.nn.Module``), which `GRPOTrainer` scores with ``logits[:, 0]``."""
    return isinstance(function, str) or _is_module(function)


def named_reward_functions(names: Sequence[str] | None) -> list[Any]:
    """The reward functions of ``reward_funcs`` names, as ``trl grpo`` resolves them (``trl/scripts/grpo.py``): a
    name of `TRL_REWARD_FUNCTIONS` (TRL's ``trl.rewards``), a dotted path ``module.function`` imported from
    ``sys.path`` or the current directory (``trl.rewards.think_format_reward`` too), or a reward model's Hub id or
    folder (`names_reward_model`), kept as the string `GRPOTrainer` loads. `HiRTrainer` adds them after the
    constraint reward, weighted by ``reward_weights``, and scores each replay's own (q', y) with them.

    Returns:
        The functions (a model as its id or folder), in the order of ``names`` ([] for None).

    Raises:
        ValueError: one line naming the entry: a name that is neither TRL's nor dotted, a module that cannot be
            imported (with the first line of its error), a module without that attribute, or an attribute that
            is not callable.
    """
    import importlib
    import os
    import sys

    functions: list[Any] = []
    for name in names or ():
        if name in TRL_REWARD_FUNCTIONS:
            functions.append(TRL_REWARD_FUNCTIONS[name]())
            continue
        if names_reward_model(name):
            functions.append(name)  # GRPOTrainer loads it (AutoModelForSequenceClassification, num_labels=1)
            continue
        module_name, _, attribute = name.rpartition(".")
        if not module_name or not attribute:
            raise ValueError(f"reward_funcs: {name!r} is neither a reward function TRL names "
                             f"({', '.join(TRL_REWARD_FUNCTIONS)}) nor a dotted path module.function")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as trl grpo: a module of the current directory
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported as one line
            reason = (str(exc).strip().splitlines() or [""])[0]
            raise ValueError(f"reward_funcs: {name}: cannot import module {module_name!r}: {type(exc).__name__}: "
                             f"{reason}") from exc
        function = getattr(module, attribute, None)
        if function is None:
            raise ValueError(f"reward_funcs: {name}: module {module_name!r} has no {attribute!r}")
        if not callable(function):
            raise ValueError(f"reward_funcs: {name} is a {type(function).__name__}, not a reward function "
                             "fn(prompts, completions, **kwargs) -> list[float | None]")
        functions.append(function)
    return functions


#: What TRL passes every reward function besides the dataset columns (`GRPOTrainer._calculate_rewards`).
_REWARD_CALL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


def reward_call_problem(function: Callable[..., Any], columns: Sequence[str]) -> str | None:
    """Why TRL's call of ``function`` would fail, or None: it is called with the keywords ``prompts``,
    ``completions``, ``completion_ids``, ``trainer_state``, ``log_extra``, ``log_metric`` and one per dataset column
    but ``prompt`` (`GRPOTrainer._calculate_rewards`; a replay's call, `hir_trl.trl_adapter.TRLPasses
    .replay_reward_kwargs`, passes the same); a function that cannot bind them (no ``**kwargs``, or a required
    parameter no column holds, such as ``accuracy_reward``'s ``solution``) would fail at the first step."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C callable without a signature: leave it to the call
        return None
    names = [*_REWARD_CALL_KEYWORDS, *(c for c in columns if c not in ("prompt", "completion", "completion_ids"))]
    if "environments" in signature.parameters:
        names.append("environments")
    try:
        signature.bind(**dict.fromkeys(names))
    except TypeError as exc:
        return (f"reward function {getattr(function, '__name__', function)!r} cannot take TRL's call "
                f"fn({', '.join(_REWARD_CALL_KEYWORDS[:3])}, **columns) on these rows (columns: "
                f"{', '.join(sorted(set(names) - set(_REWARD_CALL_KEYWORDS)))}): {exc}; give it **kwargs, and "
                "no required parameter the rows do not hold")
    return None


def extra_rewards_problem(functions: Sequence[Callable[..., Any]], columns: Sequence[str],
                          reward_weights: Sequence[float] | None) -> str | None:
    """The first problem of the extra reward functions of a `HiRTrainer`, as one line, or None: ``reward_weights``
    whose count is not one per reward (the constraint reward's first), or a function TRL's call would fail on
    (`reward_call_problem`). `trainer_reward` and ``hir-trl train`` (before the model loads) ask it."""
    if reward_weights is not None and len(reward_weights) != 1 + len(functions):
        return (f"reward_weights has {len(reward_weights)} weight(s) for {1 + len(functions)} reward(s): one per "
                "reward, the constraint reward first, then each of reward_funcs' functions")
    for function in functions:
        if is_reward_model(function):  # scored as GRPOTrainer scores a model: prompt + completion text
            continue
        problem = reward_call_problem(function, columns)
        if problem is not None:
            return problem
    return None


def _is_module(function: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of training
        return False
    return isinstance(function, torch.nn.Module)


def extra_rewards(functions: Sequence[Callable[..., Any]], prompts: Sequence[Any], completions: Sequence[Any],
                  completion_ids: Sequence[Sequence[int]], reward_kwargs: Mapping[str, Any],
                  run_together: Callable[[list[Awaitable[Any]]], list[Any]] | None = None) -> list[list[float]]:
    """TRL-style reward functions on new rows (a replay's (q', y)), called as TRL calls them.

    Each function is called once with every row: ``fn(prompts=..., completions=..., completion_ids=...,
    **reward_kwargs)``, where ``reward_kwargs`` are the keyword arguments `GRPOTrainer._calculate_rewards` passes
    (built by `hir_trl.trl_adapter.TRLPasses.replay_reward_kwargs`: the rows' dataset columns, ``trainer_state``,
    ``log_extra`` / ``log_metric`` and, when TRL has them, ``environments``). ``None`` becomes NaN (no reward from
    that function), as in TRL. As in TRL, the synchronous functions run one after another, then the ``async def``
    ones (any function whose call returns an awaitable) run together: ``run_together(awaitables)`` awaits them
    concurrently and returns their results in order (`hir_trl.trl_adapter.TRLPasses.run_together`, on TRL's event
    loop); without it, one ``asyncio.run`` of ``asyncio.gather``.

    Args:
        functions: the extra reward functions (the `ConstraintReward` excluded).
        prompts: (N,) the rows' prompts (q'), in the dataset's format (chat messages or text).
        completions: (N,) the completions (y), as TRL passes them.
        completion_ids: (N,) token ids of each completion, without padding.
        reward_kwargs: the other keyword arguments, one value per row for the columns.
        run_together: awaits a list of awaitables together and returns their results, in order; or None.

    Returns:
        (N, len(functions)) rewards, NaN where a function returned None; ``[]`` for no rows.

    Raises:
        hir_trl.guards.RewardFunctionError: a function returned other than N numbers or None;
        hir_trl.guards.NonFiniteTrainingError: a NaN or inf reward (both from `hir_trl.guards.check_rewards`, the
            one check of every reward function's output).
    """
    from ..guards import check_rewards

    if not prompts:
        return []
    table = [[float("nan")] * len(functions) for _ in prompts]

    def keep(i: int, function: Callable[..., Any], output: Any) -> None:
        output = check_rewards(getattr(function, "__name__", type(function).__name__), output, len(prompts))
        for row, value in zip(table, output):
            row[i] = float("nan") if value is None else float(value)

    pending = []  # (index, function, awaitable) of the async functions, run together after the others
    for i, function in enumerate(functions):
        output = function(prompts=list(prompts), completions=list(completions), completion_ids=list(completion_ids),
                          **reward_kwargs)
        if inspect.isawaitable(output):
            pending.append((i, function, output))
        else:
            keep(i, function, output)
    if pending:
        outputs = (run_together or _gathered)([awaitable for _, _, awaitable in pending])
        for (i, function, _), output in zip(pending, outputs, strict=True):
            keep(i, function, output)
    return table


def _gathered(awaitables: list[Awaitable[Any]]) -> list[Any]:
    """The results of ``awaitables``, awaited together in one ``asyncio.run``."""
    async def together() -> list[Any]:
        return list(await asyncio.gather(*awaitables))

    return asyncio.run(together())


def weighted_rewards(per_func: Sequence[Sequence[float]], weights: Sequence[float]) -> list[float]:
    """(N,) sum over reward functions of weight x reward, skipping NaN (no reward), as `GRPOTrainer` combines them
    (``multi_objective_aggregation="sum_then_normalize"``); NaN for a row no function scored.

    Args:
        per_func: (N, F) rewards, the constraint reward first.
        weights: (F,) ``reward_weights`` (all 1 when unset).
    """
    out = []
    for row in per_func:
        terms = [w * r for w, r in zip(weights, row, strict=True) if not math.isnan(r)]
        out.append(math.fsum(terms) if terms else float("nan"))
    return out


def replay_row_rewards(capture: Any, supplement: Any, new_rows: Sequence[Any], inputs: Sequence[Mapping[str, Any]],
                       output: Mapping[str, Any], *, weights: Sequence[float], reward_mode: str, judge: Any = None,
                       extra_rewards: Callable[..., list[list[float]]] | None = None,
                       timer: Any = None) -> list[float]:
    """(B + len(new_rows),) reward of every row of the extended batch (Algorithm 2, lines 9 and 16), each TRL's
    weighted sum over the reward functions (`weighted_rewards`, ``reward_weights``).

    The sampled rows' and supplementary samples' come from TRL's own reward call: their constraint reward from the
    verdicts (exact), the other functions' from TRL (float32). A replay's constraint reward is 1 (it meets every
    constraint q' keeps) or, with a ``judge`` (``rejudge_replays``), its re-judged reward (`rejudge_replays`);
    its extra rewards are computed on its own (q', y) with its kept constraints; a pad's reward is NaN.

    Args:
        capture: the `hir_trl.step.state.HiRCapture` of TRL's call (``verdicts``, ``rewards_per_func``,
            ``completions`` of the B sampled rows).
        supplement: the step's `hir_trl.step.state.SupplementarySamples`, or None.
        new_rows: the new rows (`hir_trl.step.batch.NewRow`).
        inputs: the B sampled rows' dataset rows.
        output: TRL's batch (``completion_ids`` / ``completion_mask`` (B, T), for the replays' completion ids).
        weights: (F,) ``reward_weights``; ``reward_mode``: ``"ila"`` or ``"cla"``.
        judge: the judge to re-judge the replays' soft constraints with, or None (no re-judging).
        extra_rewards: ``extra_rewards(prompts, completions, completion_ids, rows) -> (R, F - 1)`` for the R replays
            (`hir_trl.trl_adapter.TRLPasses.extra_rewards`), or None when there are no extra functions.
        timer: a `hir_trl.step.log.StepTimer`: the re-judging is timed as ``judge``, the replays' extra rewards as
            ``extra_rewards``; or None.
    """
    import contextlib

    from .batch import row_rewards
    from .replay import hindsight_constraints

    def timed(name: str):  # ``hir/seconds_<name>``
        return timer.timed(name) if timer is not None else contextlib.nullcontext()

    def per_func(verdicts, rewards_per_func):  # the constraint reward from the verdicts, the others from TRL's call
        return [[reward, *others[1:]] for reward, others in zip(verdicts.rewards(reward_mode), rewards_per_func,
                                                                 strict=True)]

    sampled = weighted_rewards(per_func(capture.verdicts, capture.rewards_per_func), weights)
    # called on every rank, with or without replays: a reward model's forward pass (and the metric's gather) is a
    # collective under DeepSpeed ZeRO-3 and several processes
    supplementary = (weighted_rewards(per_func(supplement.verdicts, supplement.rewards_per_func), weights)
                     if supplement is not None else [])
    replays = [(offset, row) for offset, row in enumerate(new_rows) if row.kind == "replay"]
    constraint = {offset: 1.0 for offset, _ in replays}
    if judge is not None:
        with timed("judge"):
            constraint.update(rejudge_replays(judge, reward_mode, inputs, capture.completions, new_rows))
    with timed("extra_rewards"):
        extras = extra_rewards(
            [row.q_prime for _, row in replays], [capture.completions[row.source] for _, row in replays],
            [output["completion_ids"][row.source][output["completion_mask"][row.source].bool()].tolist()
             for _, row in replays],
            [{**inputs[row.source], "prompt": row.q_prime,
              "constraints": hindsight_constraints(inputs[row.source]["constraints"], row.choice)}
             for _, row in replays]) if extra_rewards is not None else [[] for _ in replays]
    replay_rewards = weighted_rewards([[constraint[offset], *extra] for (offset, _), extra in zip(replays, extras)],
                                      weights)
    return row_rewards(sampled, new_rows, supplementary, dict(zip(constraint, replay_rewards)))
