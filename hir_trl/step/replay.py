"""The select-then-rewrite replay strategy of HiR, as plain functions (no torch, no TRL).

Read next to the paper's Algorithm 1 (``Select-Rewrite(G, k)``) and Algorithm 2 (HiR):

- `curriculum_lambda`:   lambda_s = lambda_0 * (1 + eta)^s, capped at LAMBDA_MAX      (paper eq. "lambda")
- `replay_candidates`:   failed responses (ILA = 0) with enough satisfied constraints (§3.2; released code)
- `curriculum_scores`:   F(y) = F_div(y) + lambda * F_int(y)                         (Alg. 1 line 4, eq. "selection")
- `select_top_k`:        T = top-k candidates by F                                    (Alg. 1 line 6)
- `select_replays`:      Algorithm 1 Select (lines 1-6) over a generation batch: a score of `SELECTIONS` (the
                         curriculum, the paper's random-replay ablation, single-term scores), taken per group
                         (paper) or batch-wide, top-(k x G) (the released code), `SCOPES`.
                         `select_group_replays` is the same call for one group.
- `hindsight_instruction`/`hindsight_messages`: q' keeps only the satisfied constraints (Alg. 1 lines 7-11)
- `rewrite`:             a selected response with its q'                             (Alg. 1 lines 7-11)
- `hindsight_constraints`: the constraint records of q' (satisfied ones, and with ``HiRConfig.hindsight_relabel=
                         "achieved"`` failed counted ones relabelled to the bound the response achieved)
- `select_rewrite`:      the whole of Algorithm 1, Select-Rewrite(G, k): the one path the trainer calls.
- `allocate_shortfall`:  how many supplementary samples each group needs when it has fewer than k replays
                         (paper §3.2: "we additionally generate k - z supplementary samples").
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..data.templates import join_instruction
from ..errors import chosen

#: Cap on the curriculum weight lambda_s. lambda_0 * (1 + eta)^s overflows a float (OverflowError at step 14,548
#: with the paper's lambda_0 = 2, eta = 0.05; at step 397 with eta = 5), so lambda_s stops growing here. The cap
#: changes no selection: an integrity step of at least 1/#constraints times 1e6 dwarfs any difference of F_div (the
#: mean token entropy is at most ln |V|, about 11-12 nats; the 'sum' aggregation stays below 1e5 for completions under
#: 8k tokens with at most 10 constraints), so from the cap on candidates are ranked by integrity, ties by entropy,
#: as the uncapped formula ranks them in exact arithmetic (and better than float arithmetic, where 1e300 + H == 1e300
#: drops the entropy tie-break). Reached at step 269 with the paper's defaults.
LAMBDA_MAX = 1e6


def curriculum_lambda(step: int, lambda_0: float, eta: float) -> float:
    """Curriculum weight on constraint integrity at training step ``step``.

    lambda_s = min(lambda_0 * (1 + eta)^s, max(lambda_0, LAMBDA_MAX)) (paper eq. "lambda"; Algorithm 2 last line;
    the cap is ours, see `LAMBDA_MAX`). ``step`` is the optimizer step s (0 for the first step, so lambda_0 is used
    first, as Algorithm 2 initialises it). Finite for every step.

    Raises:
        ValueError: ``step < 0`` or ``eta < 0``.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if eta < 0:
        raise ValueError(f"eta must be >= 0, got {eta}")
    cap = max(lambda_0, LAMBDA_MAX)
    if lambda_0 <= 0 or eta == 0:
        return lambda_0
    # compare in log space: (1 + eta) ** step itself overflows long before the product is compared with the cap
    if math.log(lambda_0) + step * math.log1p(eta) >= math.log(cap):
        return cap
    return lambda_0 * (1.0 + eta) ** step


def constraint_integrity(verdicts: Sequence[bool]) -> float:
    """F_int(y) = CLA = fraction of the instruction's constraints that y satisfies (paper eq. "F_int").

    Raises:
        ValueError: an instruction with no constraints (CLA is undefined).
    """
    if not verdicts:
        raise ValueError("constraint integrity is undefined for an instruction with no constraints")
    return sum(bool(v) for v in verdicts) / len(verdicts)


def replay_candidates(verdicts: Sequence[Sequence[bool]], min_satisfied: int = 1,
                      eligible: Sequence[bool] | None = None) -> list[int]:
    """Indices of the responses that may be replayed.

    A candidate failed its instruction (ILA = 0: some constraint unmet) and still satisfied at least
    ``min_satisfied`` constraints (the released code requires 0 < CLA < 1, i.e. ``min_satisfied=1``).

    Args:
        verdicts: per response, its per-constraint verdicts I(q, y, c_i).
        min_satisfied: the fewest satisfied constraints a candidate needs (>= 0).
        eligible: per response, whether it may be replayed at all (e.g. False for a completion cut off at
            the length limit, see ``HiRConfig.replay_truncated_completions``); None: every response.

    Returns:
        Candidate indices in increasing order.

    Raises:
        ValueError: ``min_satisfied < 0``, or ``eligible`` of another length than ``verdicts``.
    """
    if min_satisfied < 0:
        raise ValueError(f"min_satisfied must be >= 0, got {min_satisfied}")
    if eligible is not None and len(eligible) != len(verdicts):
        raise ValueError(f"{len(verdicts)} verdict rows but {len(eligible)} eligibility flags")
    out = []
    for i, row in enumerate(verdicts):
        satisfied = sum(bool(v) for v in row)
        if satisfied < len(row) and satisfied >= min_satisfied and (eligible is None or eligible[i]):
            out.append(i)
    return out


def curriculum_scores(diversity: Sequence[float], integrity: Sequence[float], lam: float) -> list[float]:
    """F(y) = F_div(y) + lambda * F_int(y) for each response (Algorithm 1 line 4).

    Args:
        diversity: F_div per response, the response's token entropy under the policy (nats; token mean
            or sum, see ``HiRConfig.diversity_aggregation``).
        integrity: F_int per response, in [0, 1].
        lam: the curriculum weight lambda_s.
    """
    if len(diversity) != len(integrity):
        raise ValueError(f"diversity has {len(diversity)} values but integrity has {len(integrity)}")
    return [float(d) + lam * float(f) for d, f in zip(diversity, integrity)]


def select_top_k(scores: Sequence[float], candidates: Sequence[int], k: int) -> list[int]:
    """The ``k`` candidates with the highest score (Algorithm 1 line 6), best first.

    Ties keep the lower index first, so the choice is deterministic. Fewer than ``k`` are returned
    when there are fewer candidates. NaN scores rank last.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")

    def key(i: int) -> tuple[float, int]:
        s = scores[i]
        return (math.inf if math.isnan(s) else -s, i)

    return sorted(candidates, key=key)[:k]


def hindsight_instruction(task: str, constraints: Sequence[str], verdicts: Sequence[bool], template: str) -> str:
    """The hindsight instruction q': x joined with only the satisfied constraints, in original order.

    Paper §3.2: q' = x ⊙ c_1 ⊙ ... ⊙ c_j with C' = {c in C | I(q, y, c) = 1}.

    Raises:
        ValueError: ``constraints`` and ``verdicts`` differ in length.
        KeyError: unknown template.
    """
    if len(constraints) != len(verdicts):
        raise ValueError(f"{len(constraints)} constraints but {len(verdicts)} verdicts")
    kept = [c for c, ok in zip(constraints, verdicts) if ok]
    return join_instruction(task, kept, template)


def hindsight_messages(messages: Sequence[dict[str, Any]], instruction: str) -> list[dict[str, Any]]:
    """Replace the final user turn's content with ``instruction``; the system message and earlier turns stay.

    Raises:
        ValueError: the conversation does not end with a user turn.
    """
    if not messages or messages[-1].get("role") != "user":
        raise ValueError("the prompt must end with a user turn to be rewritten")
    return [dict(m) for m in messages[:-1]] + [{**messages[-1], "content": instruction}]


@dataclass(frozen=True)
class ReplayChoice:
    """One selected response: its index in its group, score parts, satisfied mask and (after the rewrite) q'.

    ``relabelled``: empty (the paper's rewrite), or one entry per constraint: the relabelled constraint record of a
    failed constraint that q' keeps with the bound the response achieved (``HiRConfig.hindsight_relabel=
    "achieved"``), else None.
    """

    index: int
    score: float
    diversity: float
    integrity: float
    satisfied: tuple[bool, ...]
    q_prime: Any = None
    relabelled: tuple[dict[str, Any] | None, ...] = ()

    @property
    def kept(self) -> tuple[bool, ...]:
        """(n,) whether q' keeps each constraint: satisfied, or relabelled."""
        if not self.relabelled:
            return self.satisfied
        return tuple(ok or new is not None for ok, new in zip(self.satisfied, self.relabelled, strict=True))


def hindsight_constraints(constraints: Sequence[Any], choice: ReplayChoice) -> list[Any]:
    """The constraints of q', in original order: the satisfied ones as they are and the relabelled ones as
    relabelled (paper §3.2's C' = {c in C | I(q, y, c) = 1}, plus the relabelled ones).

    Raises:
        ValueError: ``constraints`` and the choice's verdicts differ in length.
    """
    if len(constraints) != len(choice.satisfied):
        raise ValueError(f"{len(constraints)} constraints but {len(choice.satisfied)} verdicts")
    relabelled = choice.relabelled or (None,) * len(constraints)
    return [new if new is not None else c
            for c, ok, new in zip(constraints, choice.satisfied, relabelled) if ok or new is not None]


def random_selection(diversity: Sequence[float], integrity: Sequence[float], lam: float) -> None:
    """``"random"`` (paper Table 3 ablation): no score; the candidates are drawn uniformly with the replay RNG."""
    return None


def integrity_selection(diversity: Sequence[float], integrity: Sequence[float], lam: float) -> list[float]:
    """``"integrity"``: F_int only."""
    return [float(f) for f in integrity]


def diversity_selection(diversity: Sequence[float], integrity: Sequence[float], lam: float) -> list[float]:
    """``"diversity"``: F_div only."""
    return [float(d) for d in diversity]


#: ``HiRConfig.replay_selection``: each choice and its score function ``(diversity (B,), integrity (B,), lam) ->
#: (B,) scores``, or None for no score (candidates drawn uniformly with the replay RNG).
SELECTIONS: dict[str, Callable[[Sequence[float], Sequence[float], float], list[float] | None]] = {
    "curriculum": curriculum_scores,
    "random": random_selection,
    "integrity": integrity_selection,
    "diversity": diversity_selection,
}


#: ``pick(pool, budget)``: Algorithm 1 line 6, the rows of ``pool`` (batch indices) a scope keeps, at most ``budget``.
Pick = Callable[[list[int], int], list[int]]


def group_scope(candidates: list[int], groups: int, group_size: int, k: int, pick: Pick) -> list[list[int]]:
    """``"group"`` (paper Algorithm 1): ``pick`` k of each group's candidates."""
    return [pick([i for i in candidates if g * group_size <= i < (g + 1) * group_size], k) for g in range(groups)]


def batch_scope(candidates: list[int], groups: int, group_size: int, k: int, pick: Pick) -> list[list[int]]:
    """``"batch"`` (released code): ``pick`` k x groups of the whole batch's candidates, each kept in its group (so a
    group may get more or fewer than k)."""
    out: list[list[int]] = [[] for _ in range(groups)]
    for i in pick(candidates, k * groups):
        out[i // group_size].append(i)
    return out


#: ``HiRConfig.replay_scope``: each choice and its function ``(candidates, groups, group_size, k, pick) -> per group,
#: its picked rows (batch indices)``, `Pick` being line 6's top-k (or uniform draw).
SCOPES: dict[str, Callable[[list[int], int, int, int, Pick], list[list[int]]]] = {
    "group": group_scope,
    "batch": batch_scope,
}


def select_replays(
    verdicts: Sequence[Sequence[bool]],
    diversity: Sequence[float],
    group_size: int,
    k: int,
    lam: float,
    *,
    scope: str = "group",
    selection: str = "curriculum",
    min_satisfied: int = 1,
    rng: random.Random | None = None,
    eligible: Sequence[bool] | None = None,
) -> list[list[ReplayChoice]]:
    """Algorithm 1, Select (lines 1-6), over a generation batch of consecutive groups of ``group_size`` responses.

    Args:
        verdicts: (B, n_i) per-response, per-constraint verdicts; B = groups x ``group_size``.
        diversity: (B,) F_div per response.
        group_size: m, responses per instruction.
        k: replays per group; with ``scope="batch"`` the budget is k x groups over the whole batch.
        lam: lambda_s.
        scope: a key of `SCOPES`: ``"group"``: top-k in each group (paper Algorithm 1). ``"batch"``: top-(k x
            groups) over the batch (released code), so a group may get more or fewer than k.
        selection: a key of `SELECTIONS`; ``"random"`` samples candidates uniformly with ``rng``.
        min_satisfied: see `replay_candidates`.
        rng: the replay RNG, required for ``selection="random"``.
        eligible: (B,) whether each response may be replayed (see `replay_candidates`); None: all.

    Returns:
        For each group, its choices (``index`` is the row's index within the group), best first; ``q_prime`` unset.

    Raises:
        ValueError: B is not a multiple of ``group_size``, an unknown scope/selection, or no ``rng`` for random.
    """
    if group_size <= 0 or len(verdicts) % group_size:
        raise ValueError(f"{len(verdicts)} responses do not form whole groups of {group_size}")
    within = chosen(SCOPES, "replay_scope", scope)
    score = chosen(SELECTIONS, "replay_selection", selection)
    if len(verdicts) != len(diversity):
        raise ValueError(f"{len(verdicts)} verdict rows but {len(diversity)} diversity values")
    groups = len(verdicts) // group_size
    candidates = replay_candidates(verdicts, min_satisfied, eligible)                       # line 3: failures
    integrity = [constraint_integrity(v) if v else 0.0 for v in verdicts]                   # F_int
    scores = score(diversity, integrity, lam)                                               # line 4: F
    drawn = scores is None  # no score: a uniform draw (the paper's random-replay ablation)
    if drawn and rng is None:
        raise ValueError("random replay selection needs an rng")
    scores = [0.0] * len(verdicts) if drawn else scores

    def pick(pool: list[int], budget: int) -> list[int]:                                    # line 6: top-k
        if drawn:
            return rng.sample(pool, min(budget, len(pool)))
        return select_top_k(scores, pool, budget)

    return [[ReplayChoice(i % group_size, scores[i], float(diversity[i]), integrity[i],
                          tuple(bool(v) for v in verdicts[i])) for i in rows]
            for rows in within(candidates, groups, group_size, k, pick)]


def rewrite(choice: ReplayChoice, prompt: Any, task: str, constraints: Sequence[str], template: str) -> ReplayChoice:
    """Algorithm 1, Rewrite (lines 7-11): the choice with its hindsight prompt q'.

    Args:
        choice: a selected response.
        prompt: its original prompt: a string, or chat messages ending with the user turn (whose content becomes q').
        task: the instruction's task text x; ``constraints``: its constraint texts, in order; ``template``: how x
            and the constraints are joined (`hir_trl.data.templates`).

    Returns:
        ``choice`` with ``q_prime`` = `hindsight_instruction` (a string prompt) or `hindsight_messages` (messages);
        a relabelled constraint (``choice.relabelled``) enters q' with its relabelled text.

    Raises:
        ValueError: ``constraints`` and the choice's verdicts differ in length, or messages not ending with a user
            turn. KeyError: unknown template.
    """
    if choice.relabelled:
        if len(constraints) != len(choice.relabelled):
            raise ValueError(f"{len(constraints)} constraints but {len(choice.relabelled)} relabelling entries")
        constraints = [new["text"] if new is not None else text for text, new in zip(constraints, choice.relabelled)]
    q_prime = hindsight_instruction(task, constraints, choice.kept, template)
    if isinstance(prompt, list):
        q_prime = hindsight_messages(prompt, q_prime)
    return replace(choice, q_prime=q_prime)


def select_rewrite(
    verdicts: Sequence[Sequence[bool]],
    diversity: Sequence[float],
    group_size: int,
    k: int,
    lam: float,
    *,
    prompts: Sequence[Any],
    inputs: Sequence[dict[str, Any]],
    relabel: Callable[[int, int], dict[str, Any] | None] | None = None,
    **options: Any,
) -> list[list[ReplayChoice]]:
    """Algorithm 1, ``Select-Rewrite(G, k)``, over a generation batch: `select_replays` then `rewrite` each choice.

    Args:
        verdicts, diversity, group_size, k, lam, **options: as for `select_replays`.
        prompts: (B,) each response's prompt (string or messages).
        inputs: (B,) each response's dataset row, with ``task``, ``constraints`` (dicts with ``text``) and
            ``template`` (`hir_trl.load_hir_dataset`'s columns).
        relabel: None (the paper's rewrite: q' drops every failed constraint), or ``relabel(i, j)``: the relabelled
            record of response i's failed constraint j, or None to drop it (``HiRConfig.hindsight_relabel``);
            called only for the selected responses' failed constraints.

    Returns:
        For each group, its choices, best first, each with its ``q_prime`` (and ``relabelled`` when ``relabel``).
    """
    picked = select_replays(verdicts, diversity, group_size, k, lam, **options)
    out = []
    for g, choices in enumerate(picked):
        rewritten = []
        for c in choices:
            i = g * group_size + c.index
            if relabel is not None:
                c = replace(c, relabelled=tuple(None if ok else relabel(i, j) for j, ok in enumerate(c.satisfied)))
            texts = [constraint["text"] for constraint in inputs[i]["constraints"]]
            rewritten.append(rewrite(c, prompts[i], inputs[i]["task"], texts, inputs[i]["template"]))
        out.append(rewritten)
    return out


def select_group_replays(
    verdicts: Sequence[Sequence[bool]],
    diversity: Sequence[float],
    k: int,
    lam: float,
    min_satisfied: int = 1,
) -> list[ReplayChoice]:
    """Algorithm 1, Select, for one sampling group of m responses: `select_replays` with one group.

    Args:
        verdicts: (m, n) per-response, per-constraint verdicts.
        diversity: (m,) F_div per response.
        k: the number of replays per group.
        lam: lambda_s.
        min_satisfied: see `replay_candidates`.

    Returns:
        Up to ``k`` choices, best first (fewer when the group has fewer candidates).
    """
    if len(verdicts) != len(diversity):
        raise ValueError(f"{len(verdicts)} verdict rows but {len(diversity)} diversity values")
    if not verdicts:
        return []
    return select_replays(verdicts, diversity, len(verdicts), k, lam, min_satisfied=min_satisfied)[0]


def allocate_shortfall(replays_per_group: Sequence[int], k: int) -> list[int]:
    """Supplementary samples per group so that the batch regains k rows per group beyond its m samples.

    With per-group selection each group simply gets ``k - z_g``. With batch-wide selection a group may hold
    more than k replays; the batch is then short of ``k x groups - sum(z)`` rows, which go to the groups with
    the largest deficit (k - z_g), one at a time, lower index first on ties.

    Returns:
        (groups,) non-negative counts summing to ``max(0, k x groups - sum(replays_per_group))``.
    """
    deficits = [max(0, k - z) for z in replays_per_group]
    budget = max(0, k * len(replays_per_group) - sum(replays_per_group))
    out = [0] * len(replays_per_group)
    while budget > 0:
        g = max(range(len(deficits)), key=lambda i: (deficits[i] - out[i], -i))
        if deficits[g] - out[g] <= 0:
            break
        out[g] += 1
        budget -= 1
    return out


#: The file beside each checkpoint holding the replay RNG's state (`save_checkpoint_state`).
HIR_STATE_FILE = "hir_state.json"


def save_replay_rng(path: str, rng: random.Random, settings: dict | None = None) -> None:
    """Write the replay RNG's state (``replay_selection="random"``) as JSON to ``path`` (``hir_state.json`` of a
    checkpoint), with ``settings`` (`hir_trl.run_folder.resume_settings`, which a resume checks) when given."""
    version, internal, gauss = rng.getstate()
    record = {"replay_rng": [version, list(internal), gauss]}
    if settings is not None:
        record["settings"] = settings
    with open(path, "w") as handle:
        json.dump(record, handle)


def load_replay_rng(path: str, rng: random.Random) -> bool:
    """Restore ``rng`` from a file `save_replay_rng` wrote; False (``rng`` untouched) when ``path`` does not exist."""
    if not os.path.isfile(path):
        return False
    with open(path) as handle:
        version, internal, gauss = json.load(handle)["replay_rng"]
    rng.setstate((version, tuple(internal), gauss))
    return True


def save_checkpoint_state(folder: str, rng: random.Random, model_card: str, settings: dict | None = None) -> None:
    """Beside a checkpoint in ``folder``: ``hir_state.json`` (the replay RNG and the run's ``settings``,
    `save_replay_rng`) and a copy of the model card at ``model_card`` when it exists (TRL writes the card to
    ``output_dir`` only). Nothing when ``folder`` is not a directory."""
    import shutil

    if os.path.isdir(folder):
        save_replay_rng(os.path.join(folder, HIR_STATE_FILE), rng, settings)
        if os.path.isfile(model_card):
            shutil.copyfile(model_card, os.path.join(folder, "README.md"))


def restore_checkpoint_state(checkpoint: str | None, rng: random.Random, seed: int) -> None:
    """On resume from ``checkpoint``, restore the replay RNG from its ``hir_state.json``; a checkpoint without one
    (saved by another trainer, or copied without it) resumes with a warning: the replay RNG
    (``replay_selection="random"`` only) restarts from ``seed``."""
    if checkpoint is not None and not load_replay_rng(os.path.join(checkpoint, HIR_STATE_FILE), rng):
        import logging

        logging.getLogger(__name__).warning(
            "%s has no %s: resuming, but the replay RNG (used by replay_selection='random') restarts from seed=%d; "
            "lambda, the model, the optimizer and the step counter resume exactly", checkpoint, HIR_STATE_FILE, seed)
