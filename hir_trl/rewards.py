"""Constraint verification for a batch of completions, and the TRL reward function built on it.

`ConstraintReward` is the reward function `HiRTrainer` hands to TRL: TRL calls it once per generation
batch with the dataset columns, it verifies every (row, constraint) pair exactly once, returns ILA (or CLA)
per row, and keeps the `VerdictMatrix` so that the replay selection reuses the same verdicts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .judge import JudgeError
from .verifiers import Verdict, verify_constraint

#: A judge for soft constraints: given (instruction, response, constraint text) triples, one Verdict each.
Judge = Callable[[Sequence[tuple[str, str, str]]], Sequence[Verdict]]


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the contents of a list of assistant messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, Mapping))
    raise TypeError(f"unsupported completion type {type(completion).__name__}")


def instruction_text(prompt: Any) -> str:
    """The instruction q: the final user turn of a conversational prompt, or the prompt string itself."""
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else completion_text([message])
    raise ValueError("prompt has no user turn")


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

    def num_errors(self) -> int:
        """How many verdicts record a checker or judge failure."""
        return sum(v.error is not None for row in self.verdicts for v in row)


class ConstraintReward:
    """TRL reward function: verify each completion's constraints once and return ILA (or CLA).

    TRL calls it as ``reward(prompts=..., completions=..., completion_ids=..., constraints=..., **columns)``
    where ``constraints`` is the dataset column of normalized constraints (see `hir_trl.data`).

    Args:
        judge: called once per batch with the (instruction, response, constraint) triples of all soft
            constraints (e.g. `hir_trl.judge.LiteLLMJudge`). Without a judge, a soft constraint gets a failed
            verdict whose ``error`` says so; so does every soft constraint of the batch when the judge raises,
            except `hir_trl.judge.JudgeError`, which propagates (``judge_failure_policy="raise"``).
        reward_mode: ``"ila"`` (binary all-constraints-met reward, HiR and RL-IR) or ``"cla"`` (fraction met,
            RL-CR).

    Attributes:
        last_verdicts: the `VerdictMatrix` of the latest call (rows in the order TRL passed them).
        num_checks: total constraint checks run so far (each (row, constraint) once per call).
    """

    def __init__(self, judge: Judge | None = None, reward_mode: str = "ila") -> None:
        if reward_mode not in ("ila", "cla"):
            raise ValueError(f"reward_mode must be 'ila' or 'cla', got {reward_mode!r}")
        self.judge = judge
        self.reward_mode = reward_mode
        self.__name__ = reward_mode  # TRL names the reward column after the callable
        self.last_verdicts: VerdictMatrix | None = None
        self.num_checks = 0

    def verify(self, prompts: Sequence[Any], completions: Sequence[Any],
               constraints: Sequence[Sequence[Mapping[str, Any]]]) -> VerdictMatrix:
        """Verify every (row, constraint) pair once.

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
        rows: list[list[Verdict | None]] = []
        soft: list[tuple[int, int, tuple[str, str, str]]] = []
        for r, (prompt, completion, items) in enumerate(zip(prompts, completions, constraints)):
            instruction, response = instruction_text(prompt), completion_text(completion)
            row: list[Verdict | None] = []
            for j, c in enumerate(items):
                if c["kind"] == "soft":
                    row.append(None)
                    soft.append((r, j, (instruction, response, c["text"])))
                    continue
                kwargs = json.loads(c["kwargs"]) if isinstance(c["kwargs"], str) else c["kwargs"]
                row.append(verify_constraint(c["family"], c["instruction_id"], kwargs, response, instruction))
            rows.append(row)
            self.num_checks += len(items)
        if soft:
            for (r, j, _), verdict in zip(soft, self._judge([t for _, _, t in soft])):
                rows[r][j] = verdict
        return VerdictMatrix([list(row) for row in rows])  # every soft cell was filled by _judge

    def _judge(self, triples: list[tuple[str, str, str]]) -> list[Verdict]:
        if self.judge is None:
            return [Verdict(False, error="RuntimeError: soft constraint but no judge is configured", source="judge")
                    for _ in triples]
        try:
            verdicts = list(self.judge(triples))
        except JudgeError:  # failure_policy="raise": the user asked to stop
            raise
        except Exception as exc:  # noqa: BLE001 - a judge failure is a recorded verdict
            return [Verdict(False, error=f"{type(exc).__name__}: {exc}", source="judge") for _ in triples]
        if len(verdicts) != len(triples):
            return [Verdict(False, error=f"RuntimeError: judge returned {len(verdicts)} verdicts for "
                            f"{len(triples)} constraints", source="judge") for _ in triples]
        return verdicts

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], constraints=None,
                 **kwargs: Any) -> list[float]:
        if constraints is None:
            raise ValueError("the dataset has no 'constraints' column; load it with hir_trl.load_hir_dataset")
        matrix = self.verify(prompts, completions, constraints)
        self.last_verdicts = matrix
        return matrix.ila() if self.reward_mode == "ila" else matrix.cla()
