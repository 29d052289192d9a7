"""The constraint reward: verification of a batch of completions, and the TRL reward function built on it.

`ConstraintReward` is the reward function `HiRTrainer` hands to TRL, first of its ``reward_funcs`` (and one a plain
`GRPOTrainer` takes too): TRL calls it once per generation batch with the dataset columns, it verifies every
(row, constraint) pair exactly once, returns ILA (or CLA, ``HiRConfig.reward_mode``, the formulas of
`hir_trl.step.rewards.REWARD_MODES`) per row, and keeps the `VerdictMatrix` so that the replay selection reuses the
same verdicts. How a trainer assembles its reward functions is `hir_trl.trainer_setup.trainer_reward`'s; the rewards of
a step's rows are `hir_trl.step.rewards`'.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .data.chat import completion_text, instruction_text
from .errors import chosen
from .judge import Judge, judge_batch  # noqa: F401 - Judge, judge_batch: public here too
from .step.log import verdict_log_entries
from .step.rewards import REWARD_MODES, cla_rewards, ila_rewards, mode_rewards
from .verifiers import Verdict, verify_constraint


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
        return ila_rewards(self.verdicts)

    def cla(self) -> list[float]:
        """Constraint-level accuracy per row: the fraction of constraints passed (paper CLA)."""
        return cla_rewards(self.verdicts)

    def rewards(self, reward_mode: str) -> list[float]:
        """Per-row reward under ``reward_mode``: `ila` (``"ila"``, binary) or `cla` (``"cla"``, fraction met).

        The formula is `hir_trl.step.rewards.mode_rewards`'s, the one place that picks it: training, supplementary
        samples and re-judged replays all use it.

        Raises:
            ValueError: ``reward_mode`` is not a key of `hir_trl.step.rewards.REWARD_MODES` (the message names the
                field and its choices).
        """
        return mode_rewards(self.verdicts, reward_mode)

    def num_errors(self) -> int:
        """How many verdicts record a checker or judge failure."""
        return sum(v.error is not None for row in self.verdicts for v in row)

    def log_entries(self, constraints: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
        """The completion log's ``verdicts`` column: per row, a JSON list with one entry per constraint, in order
        (`hir_trl.step.log.verdict_log_entries`: the constraint, its kind, the verdict's source, passed, and the
        error of a failure to check)."""
        return verdict_log_entries(self.verdicts, constraints)


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
