"""Token entropies and log-probs recorded while transformers ``generate`` samples (no extra forward pass), and the
replay selection's inputs computed from them (`diversity_scores`: F_div; `completion_ended`: EOS or cut off).

HiR's F_div needs each completion token's entropy H_t under the policy pi = softmax(logits / T), and the paper's
replay ratio needs pi_old(y | q). ``generate`` computes those logits anyway, one step at a time, so a logits
processor can record both, keeping one (B, V) score tensor between steps (never (B, T, V)):

- H_t = -sum_v pi_t(v) log pi_t(v) at each step, pi_t = softmax(logits / T);
- log pi_t(y_t) of the token sampled at step t, read at step t + 1 from ``input_ids`` (the last step's from the
  returned completion ids).

(TRL's ``entropy_from_logits`` / ``selective_log_softmax`` compute the same, but their CPU path loops over rows in
Python to bound the memory of (B, T, V) tensors; on one (B, V) step one ``log_softmax`` is several times faster.)

Where the recorder sits: transformers (5.x, ``GenerationMixin._get_logits_processor``) puts user processors after
its logit *processors* (repetition penalty, suppressed or forced tokens, minimum length, ...) and before its
*warpers* (temperature, top-k, top-p, min-p, ...). The recorder therefore sees the raw logits and divides them by
the loss's temperature itself: its values are the policy's, the same numbers TRL's loss and a no-grad pass compute,
whatever top-k/top-p/min-p truncate (the token is still drawn from the truncated distribution). They differ only
when a processor before it changes the logits: `sampling_changes_policy` names such a setting, and `HiRTrainer`
then runs the pass instead. ``tests/step/test_sampling.py`` checks the placement against a full forward.

TRL 1.16 calls ``unwrapped_model.generate(**inputs, generation_config=...)`` inside ``_generate_single_turn`` and
offers no way to add a logits processor: ``GenerationConfig`` (hence ``generation_kwargs``) rejects
``logits_processor`` ("should be passed to `generate()` directly"). `record_sampling` therefore wraps the model
instance's ``generate`` for the duration of one ``super()._generate_single_turn`` call, the way transformers itself
installs a ``custom_generate`` on an instance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

# Settings of the logit processors that run before the recorder, by field: the values that leave the logits alone.
# None means "unset": transformers fills an unset field from the model's generation config, then from its global
# defaults, which are neutral for every field here. Warpers (temperature, top-k, top-p, ...) run after the recorder.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "guidance_scale": (None, 1.0),
    "bad_words_ids": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "sequence_bias": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "exponential_decay_length_penalty": (None,),
}


def sampling_changes_policy(generation_config: Any, model_generation_config: Any) -> str | None:
    """Why a `SamplingRecorder` in ``generate`` would not see the model's raw logits, or None if it would.

    Args:
        generation_config: the `GenerationConfig` TRL passes to ``generate`` (``GRPOTrainer.generation_config``).
        model_generation_config: the model's own ``generation_config`` (fills the fields left unset), or None.

    Returns:
        None, or a short reason naming the setting, e.g. ``"repetition_penalty=1.1"``.
    """
    def value(name: str) -> Any:
        own = getattr(generation_config, name, None)
        return own if own is not None else getattr(model_generation_config, name, None)

    if not value("do_sample"):
        return "do_sample is off"
    if value("num_beams") not in (None, 1):
        return f"num_beams={value('num_beams')}"
    for name, neutral in _NEUTRAL.items():
        current = value(name)
        if current not in neutral:
            return f"{name}={current!r}"
    return None


class SamplingRecorder(LogitsProcessor):
    """Logits processor that records each decoding step's policy entropy and the sampled token's log-prob.

    Pass it in ``generate``'s ``logits_processor`` list (see the module docstring for where transformers puts it).
    It returns the scores unchanged and keeps one (B, V) tensor between steps: memory O(B x V + B x T).

    Args:
        temperature: T of the policy softmax(logits / T), the loss's (``GRPOTrainer.temperature``).
        entropy: also record the per-step entropies (off: log-probs only).

    Attributes:
        steps: decoding steps seen.
        seconds: host time spent inside the processor (on CUDA, kernel launch time, not kernel time).
    """

    def __init__(self, temperature: float = 1.0, entropy: bool = True) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.temperature = temperature
        self.entropy = entropy
        self.steps = 0
        self.seconds = 0.0
        self._entropies: list[torch.Tensor] = []
        self._logps: list[torch.Tensor] = []
        self._previous: torch.Tensor | None = None  # (B, V) log pi of the last step (a new tensor, never `scores`)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        start = time.perf_counter()
        logits = scores.float() if self.temperature == 1.0 else scores.float() / self.temperature
        logp = torch.log_softmax(logits, -1)
        if self._previous is not None:  # input_ids now ends with the token sampled from the previous step
            self._logps.append(self._token_logps(input_ids[:, -1]))
        if self.entropy:
            self._entropies.append(torch.special.entr(logp.exp()).sum(-1))  # -p log p, 0 where p = 0
        self._previous = logp
        self.steps += 1
        self.seconds += time.perf_counter() - start
        return scores

    def _token_logps(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._previous.gather(1, tokens.unsqueeze(1)).squeeze(1)

    def per_row(self, completion_ids: list[list[int]]) -> dict[str, list[torch.Tensor]] | None:
        """The recorded values of each sequence, cut to its completion (EOS included, as TRL keeps it).

        Args:
            completion_ids: the B completions ``generate`` returned, in order, each cut after its first EOS.

        Returns:
            ``{"logps": [(n_i,) float32], "entropies": [(n_i,) float32] (with ``entropy``)}``, log-probs in nats
            (<= 0) and entropies in nats, or None when no step was recorded (``generate`` did not go through the
            processor, e.g. another generation backend).

        Raises:
            RuntimeError: a completion longer than the steps recorded, or a batch size that does not match.
        """
        if self.steps == 0 or self._previous is None:
            return None
        batch = self._previous.size(0)
        if batch != len(completion_ids):
            raise RuntimeError(f"the sampling recorder saw {batch} sequences but generate returned "
                               f"{len(completion_ids)} completions")
        longest = max((len(ids) for ids in completion_ids), default=0)
        if longest > self.steps:
            raise RuntimeError(f"a completion has {longest} tokens but only {self.steps} decoding steps were recorded")
        last = torch.tensor([ids[self.steps - 1] if len(ids) == self.steps else 0 for ids in completion_ids],
                            device=self._previous.device)
        logps = torch.stack([*self._logps, self._token_logps(last)], 1)
        out = {"logps": [logps[i, : len(ids)].float() for i, ids in enumerate(completion_ids)]}
        if self.entropy:
            entropies = torch.stack(self._entropies, 1)
            out["entropies"] = [entropies[i, : len(ids)].float() for i, ids in enumerate(completion_ids)]
        self._previous = None
        self._logps, self._entropies = [], []
        return out


@contextmanager
def record_sampling(model: Any, recorder: SamplingRecorder) -> Iterator[None]:
    """Within the block, ``model.generate(...)`` runs with ``recorder`` appended to its ``logits_processor`` list.

    Only this instance's ``generate`` is wrapped (an instance attribute, removed on exit); the class is untouched.
    """
    had_own = "generate" in vars(model)
    original = model.generate

    def generate(*args: Any, logits_processor: LogitsProcessorList | None = None, **kwargs: Any) -> Any:
        processors = LogitsProcessorList([*(logits_processor or []), recorder])
        return original(*args, logits_processor=processors, **kwargs)

    model.generate = generate
    try:
        yield
    finally:
        if had_own:
            model.generate = original
        else:
            del model.generate


def recorded_tensor(recorded: dict[str, Any] | None, key: str, like: torch.Tensor) -> torch.Tensor | None:
    """Recorded per-completion values (`SamplingRecorder.per_row`) of ``key`` (``logps`` or ``entropies``) as a
    (B, T) float32 tensor shaped like ``like``, zeros past each completion; None when nothing was recorded."""
    if not recorded or key not in recorded:
        return None
    out = like.new_zeros(like.shape, dtype=torch.float32)
    for i, values in enumerate(recorded[key]):
        out[i, : values.numel()] = values.to(out.device)
    return out


def sampling_logps(output: dict[str, Any], recorded: dict[str, Any] | None) -> torch.Tensor | None:
    """(B, T) log-probs of the sampled tokens under the sampling policy: recorded while sampling, else vLLM's
    ``sampling_per_token_logps``; None when neither is there or vLLM could not score some token (NaN)."""
    mask = output["completion_mask"]
    sampled = recorded_tensor(recorded, "logps", mask)
    if sampled is None:
        sampled = output.get("sampling_per_token_logps")
    if sampled is not None and torch.isnan(sampled[mask.bool()]).any():
        return None
    return sampled


def entropies_and_old_logps(output: dict[str, Any], recorded: dict[str, Any] | None,
                            pass_entropies: torch.Tensor | None, *, need_old: bool, need_f_div: bool,
                            diversity_entropy: str | None,
                            policy_pass: Callable[[bool], tuple[torch.Tensor, torch.Tensor | None]],
                            ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The token entropies behind F_div and the old log-probs under q of the B sampled rows, cheapest source first.

    - entropies, ``diversity_entropy="exact"``: TRL's own old-log-prob pass (``pass_entropies``), else recorded
      while sampling; ``"sampled"``: -log pi(y_t) from the sampling log-probs (`sampling_logps`) or TRL's
      ``old_per_token_logps``; None: not wanted (no replays).
    - old log-probs (only when ``need_old``): the sampling log-probs.
    - ``policy_pass(exact_entropy)`` (one no-grad forward: (B, T) log-probs, and entropies when asked) runs only for
      what none of these gives.

    Args:
        output: super's `_generate_and_score_completions` output.
        recorded: the values recorded while sampling (`SamplingRecorder.per_row`), or None.
        pass_entropies: (B, T) entropies from TRL's old-log-prob pass, or None.
        need_old: old log-probs are needed (replays with ``replay_old_logps="original"``, paper eq. 7-8, or
            ``kl_in_reward``) and TRL did not compute them.
        need_f_div: the selection uses F_div (``replay_selection`` curriculum or diversity).

    Returns:
        ``(entropies, old)``: (B, T) in nats each, or None where not computed.
    """
    mask = output["completion_mask"]
    sampled = sampling_logps(output, recorded)
    entropies = None
    if diversity_entropy == "exact":
        entropies = pass_entropies
        if entropies is None:
            entropies = recorded_tensor(recorded, "entropies", mask)
    elif diversity_entropy is not None:
        logps = sampled if sampled is not None else output.get("old_per_token_logps")
        entropies = None if logps is None else -logps
    old = sampled if need_old else None
    if (need_old and old is None) or (need_f_div and entropies is None):
        exact = need_f_div and entropies is None and diversity_entropy == "exact"
        logps, pass_entropies = policy_pass(exact)
        if need_old and old is None:
            old = logps
        if need_f_div and entropies is None:
            entropies = pass_entropies if exact else -logps
    return entropies, old


# ---------------------------------------------------------------- the inputs of the replay selection (Algorithm 1)
# `hir_trl.step.replay.select_rewrite` takes plain lists (no torch); these turn the step's tensors into them.


def diversity_scores(entropies: torch.Tensor, mask: torch.Tensor, aggregation: str = "mean") -> list[float]:
    """F_div per row (paper eq. "F_div"): token entropies (B, T) in nats over the loss tokens ``mask`` (B, T),
    averaged (``"mean"``, released code) or summed (``"sum"``, paper formula)."""
    mask = mask.to(entropies.dtype)
    div = (entropies * mask).sum(1)
    if aggregation == "mean":
        div = div / mask.sum(1).clamp(min=1.0)
    return div.float().cpu().tolist()


def completion_ended(completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                     eos_token_ids: Sequence[int]) -> list[bool]:
    """Per row, whether the completion ended with an EOS token (False: cut off at ``max_completion_length``)."""
    eos = torch.tensor(list(eos_token_ids), device=completion_ids.device)
    return (torch.isin(completion_ids, eos) & completion_mask.bool()).any(1).tolist()


__all__ = ["SamplingRecorder", "completion_ended", "diversity_scores", "entropies_and_old_logps", "record_sampling",
           "recorded_tensor", "sampling_logps", "sampling_changes_policy"]


def record_while_sampling(generate: Callable[..., Any], capture: Any, model: Any, temperature: float, timer: Any,
                          *args: Any) -> Any:
    """``generate(*args)`` (`GRPOTrainer._generate_single_turn`) with a `SamplingRecorder` among ``generate``'s
    logits processors when ``capture`` (a `hir_trl.step.state.HiRCapture`) asks for it (``record_logps``): per
    completion token, the sampled token's log-prob and (``record_entropies``) the policy's entropy, in nats, go to
    ``capture.recorded`` (`SamplingRecorder.per_row`); the recorder's own time to ``timer`` (``recording``). The
    whole call is timed as ``generation`` (the recorder's time included).

    Returns:
        ``generate``'s ``(completion_ids, logprobs)``, unchanged.
    """
    if capture is None or not capture.record_logps:
        with timer.timed("generation"):
            return generate(*args)
    recorder = SamplingRecorder(temperature, entropy=capture.record_entropies)
    with record_sampling(model, recorder), timer.timed("generation"):
        completion_ids, logprobs = generate(*args)
    capture.recorded = recorder.per_row(completion_ids)
    timer.seconds["recording"] += recorder.seconds
    if capture.recorded is None:
        logging.getLogger(__name__).warning("HiR's sampling recorder saw no decoding step; falling back to a no-grad "
                                            "pass")
    return completion_ids, logprobs
