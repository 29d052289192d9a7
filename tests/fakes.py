"""Fakes shared by the test modules: `FakePasses` (a HiR step with no model) and a stand-in ``vllm`` module.

The scripted OpenAI-compatible judge server is `tests.judge_server.FakeJudgeServer`, a module of its own (it also
runs as a script)."""

from __future__ import annotations

import sys
import types


def install_fake_vllm(monkeypatch, llm_class) -> types.ModuleType:
    """Put a module ``vllm`` in ``sys.modules`` (for this test) whose ``LLM`` is ``llm_class`` and whose
    ``SamplingParams(**kwargs)`` keeps its arguments in ``.kwargs``: the generation code's vLLM path without vLLM."""
    import importlib.machinery

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    fake = types.ModuleType("vllm")
    fake.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    fake.LLM, fake.SamplingParams = llm_class, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", fake)
    return fake


# =====================================================================================================================
# A HiR step with no model: `FakePasses`, the `hir_trl.step.StepPasses` of tests/step/test_step.py
# =====================================================================================================================
# `hir_trl.step.complete_groups` (Algorithm 2, lines 12-20) reaches the trainer only through `StepPasses`. `FakePasses`
# implements that protocol on CPU tensors, with no model and no tokenizer, so that a test drives the step and predicts
# every number it returns:
#
# - tokens: one token per whitespace-separated word (`WordTokenizer`, ids from 2 in order of first appearance;
#   ``PAD`` 0, ``EOS`` 1); a chat prompt is a role token ``<role>`` before each message's words, then ``<assistant>``
#   (the generation prompt). A completion that ended carries ``EOS`` after its words.
# - the policy: log pi(token | prompt) = `fake_logp` (token id and prompt length in tokens, so a completion's log-probs
#   differ under q and q'), entropy `fake_entropy`; the reference model: `fake_ref_logp`.
# - TRL's generation and reward call (Algorithm 2, lines 7-10): `FakePasses.generate_and_score` turns scripted
#   completion texts into ``(inputs, output, capture)`` as `GRPOTrainer._generate_and_score_completions` and HiR's
#   hooks leave them, verified by the real `hir_trl.ConstraintReward` (rule verifiers), so verdicts are real.
# - supplementary samples (``replay_shortfall="resample"``): scripted texts per group (``supplementary``), scored the
#   same way.
# - one rank: ``gather`` is the identity, ``gather_object`` a copy; what the step logs is kept in ``metrics``,
#   ``eval_metrics``, ``hindsight_rows`` and ``log_columns``, and every pass in ``calls``.

PAD, EOS = 0, 1


def fake_logp(token: int, prompt_length: int) -> float:
    """log pi(token | a prompt of ``prompt_length`` tokens) of `FakePasses`' policy."""
    return -0.1 * (1 + token % 7) - 0.01 * prompt_length


def fake_ref_logp(token: int, prompt_length: int) -> float:
    """log pi_ref(token | a prompt of ``prompt_length`` tokens) of `FakePasses`' reference model."""
    return -0.1 * (1 + token % 5) - 0.02 * prompt_length


def fake_entropy(token: int) -> float:
    """The policy's entropy (nats) at a completion token of `FakePasses`."""
    return 0.25 * (1 + token % 4)


def _token_values(formula, ids, prompt_mask):
    """(N, T) float32 ``formula(token, prompt length)`` of every position of ``ids`` (padding included, as a real
    forward pass gives values everywhere)."""
    import torch

    lengths = prompt_mask.sum(1).tolist()
    return torch.tensor([[formula(int(t), int(n)) for t in row] for row, n in zip(ids.tolist(), lengths)],
                        dtype=torch.float32, device=ids.device)


class WordTokenizer:
    """One token per whitespace-separated word; ids from 2, in order of first appearance (``PAD`` 0, ``EOS`` 1)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        return [self.vocab.setdefault(word, len(self.vocab) + 2) for word in text.split()]

    def prompt_ids(self, prompt) -> list[int]:
        """A prompt's ids: a text's words, or each message's ``<role>`` token and words, then ``<assistant>``."""
        if isinstance(prompt, str):
            return self.encode(prompt)
        ids = []
        for message in prompt:
            ids += self.encode(f"<{message['role']}>") + self.encode(message["content"])
        return ids + self.encode("<assistant>")

    def completion_ids(self, text: str, ended: bool = True) -> list[int]:
        return self.encode(text) + ([EOS] if ended else [])


class FakePasses:
    """`hir_trl.step.StepPasses` with no model (see this section's comment).

    Args:
        args: a real `hir_trl.HiRConfig` (m = ``num_generations``, k, every replay setting; ``beta`` with
            ``kl_in_reward`` is the KL-in-reward coefficient, else TRL's KL loss coefficient, which makes TRL's output
            hold reference log-probs).
        global_step: the optimizer step s (lambda_s).
        extra_reward_funcs: TRL-style reward functions beside the constraint reward.
        judge: the soft-constraint judge (`ConstraintReward`'s and ``rejudge_replays``'), or None.
        supplementary: per group, the completion texts its supplementary samples get, in order.
    """

    def __init__(self, args, *, global_step: int = 0, extra_reward_funcs=(), judge=None,
                 supplementary: dict[int, list[str]] | None = None) -> None:
        import random
        from collections import defaultdict

        import torch

        from hir_trl.step.log import StepTimer

        self.args = args
        self.num_generations = args.num_generations
        self.kl_coef = float(args.beta) if args.kl_in_reward else 0.0
        self.trl_beta = 0.0 if args.kl_in_reward else float(args.beta)  # as `move_kl_to_reward` leaves TRL's beta
        self.timer = StepTimer()
        self.replay_rng = random.Random(args.seed)
        self.model = "policy"
        self.global_step = global_step
        self.eos_token_ids = [EOS]
        self.pad_token_id = PAD
        self.pad_to_multiple_of = args.pad_to_multiple_of
        self.scale_rewards = args.scale_rewards
        self.extra_reward_funcs = list(extra_reward_funcs)
        self.reward_weights = ([float(w) for w in args.reward_weights] if args.reward_weights is not None
                               else [1.0] * (1 + len(self.extra_reward_funcs)))
        self.judge = judge
        self.device = torch.device("cpu")
        self.tokenizer = WordTokenizer()
        self.supplementary = {g: list(texts) for g, texts in (supplementary or {}).items()}
        # records
        self.calls: list[tuple] = []
        self.metrics: dict[str, list[float]] = defaultdict(list)
        self.eval_metrics: dict[str, list[float]] = defaultdict(list)
        self.hindsight_rows: list[dict] = []
        self.log_columns: dict[str, list] = defaultdict(list)
        self.extra_reward_calls: list[dict] = []

    # ---------------------------------------------------------------- TRL's generation and reward call (lines 7-10)
    def generate_and_score(self, rows, completions, *, ended=True, entropies=None, record: bool = True,
                           old_logps: bool = False, vllm: bool = False):
        """``(inputs, output, capture)`` of one generation batch, as HiR's step receives them.

        Args:
            rows: G dataset rows (`tests.step.utils.dataset_row`); each becomes m consecutive inputs.
            completions: G lists of m completion texts.
            ended: whether every completion ended with EOS, or G lists of m flags (False: cut off at the limit).
            entropies: None (recorded entropies are `fake_entropy` of each token), or G lists of m numbers: the
                entropy at every token of that completion (so F_div "mean" is the number itself), recorded while
                sampling, or with ``record=False`` returned by TRL's own old-log-prob pass (``capture.entropies``,
                as HiR shares that pass when nothing records).
            record: the sampling recorder ran (``capture.recorded``: each completion's `fake_logp` and entropies);
                False: nothing recorded (vLLM, or a logit processor before the recorder).
            old_logps: TRL ran its own old-log-prob pass (``output["old_per_token_logps"]``, `fake_logp` under q).
            vllm: TRL's vLLM keys: ``sampling_per_token_logps`` (`fake_logp` under q minus 0.5) and, with
                ``old_logps``, ``importance_sampling_ratio`` (0.5 + 0.25 x (row % 3)).
        """
        import torch

        from hir_trl.step.state import HiRCapture

        m = self.num_generations
        if len(rows) != len(completions) or any(len(texts) != m for texts in completions):
            raise ValueError(f"{len(rows)} rows need as many lists of m = {m} completions")
        inputs = [row for row in rows for _ in range(m)]
        texts = [text for group in completions for text in group]
        flags = [ended] * len(texts) if isinstance(ended, bool) else [flag for group in ended for flag in group]
        scored = self._score(inputs, texts, flags, old_logps=old_logps)
        output = scored["tensors"]
        output["num_items_in_batch"] = output["completion_mask"].sum()
        if vllm:
            output["sampling_per_token_logps"] = _token_values(fake_logp, output["completion_ids"],
                                                               output["prompt_mask"]) - 0.5
            if old_logps:
                ratio = torch.tensor([0.5 + 0.25 * (i % 3) for i in range(len(texts))])
                output["importance_sampling_ratio"] = ratio.unsqueeze(1).expand_as(output["completion_mask"]).clone()
        recorded = None
        if record:
            lengths = output["completion_mask"].sum(1).tolist()
            logps = _token_values(fake_logp, output["completion_ids"], output["prompt_mask"])
            per_token = ([torch.tensor([fake_entropy(int(t)) for t in row])
                          for row in output["completion_ids"].tolist()] if entropies is None else
                         [torch.full((output["completion_ids"].size(1),), float(h))
                          for group in entropies for h in group])
            recorded = {"logps": [logps[i, :n] for i, n in enumerate(lengths)],
                        "entropies": [per_token[i][:n].float() for i, n in enumerate(lengths)]}
        shared = None
        if not record and entropies is not None:
            values = torch.tensor([float(h) for group in entropies for h in group]).unsqueeze(1)
            shared = values.expand(output["completion_ids"].shape).clone()
        capture = HiRCapture(prompts=scored["prompts"], completions=scored["completions"], verdicts=scored["verdicts"],
                             rewards_per_func=scored["rewards_per_func"], recorded=recorded, entropies=shared)
        return inputs, output, capture

    def _score(self, inputs, texts, ended, old_logps):
        """Tokens, verdicts and rewards of completions ``texts`` of ``inputs``, as TRL's call gives them."""
        import torch
        from trl.trainer.utils import pad

        from hir_trl import ConstraintReward
        from hir_trl.step.rewards import extra_rewards

        prompts = [row["prompt"] for row in inputs]
        completions = [[{"role": "assistant", "content": text}] for text in texts]
        verdicts = ConstraintReward(judge=self.judge).verify(prompts, completions, [r["constraints"] for r in inputs])
        prompt_ids = [torch.tensor(self.tokenizer.prompt_ids(p)) for p in prompts]
        completion_ids = [self.tokenizer.completion_ids(t, e) for t, e in zip(texts, ended, strict=True)]
        columns = {key: [row[key] for row in inputs] for key in inputs[0] if key != "prompt"}
        extras = extra_rewards(self.extra_reward_funcs, prompts, completions, completion_ids, columns) \
            if self.extra_reward_funcs else [[] for _ in texts]
        rewards_per_func = [[r, *e] for r, e in zip(verdicts.rewards(self.args.reward_mode), extras, strict=True)]
        tensors = {
            "prompt_ids": pad(prompt_ids, padding_value=PAD, padding_side="left"),
            "prompt_mask": pad([torch.ones_like(p) for p in prompt_ids], padding_value=0, padding_side="left"),
            "completion_ids": pad([torch.tensor(c, dtype=torch.long) for c in completion_ids], padding_value=PAD),
            "completion_mask": pad([torch.ones(len(c), dtype=torch.long) for c in completion_ids], padding_value=0),
            "advantages": torch.zeros(len(texts)),  # TRL's own; the step replaces them
        }
        if old_logps:
            tensors["old_per_token_logps"] = _token_values(fake_logp, tensors["completion_ids"],
                                                           tensors["prompt_mask"])
        if self.trl_beta:
            tensors["ref_per_token_logps"] = _token_values(fake_ref_logp, tensors["completion_ids"],
                                                           tensors["prompt_mask"])
        return {"tensors": tensors, "prompts": prompts, "completions": completions, "verdicts": verdicts,
                "rewards_per_func": rewards_per_func}

    # ---------------------------------------------------------------- StepPasses: passes
    def policy_pass(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask, entropy=False, timer=None):
        import contextlib

        self.calls.append(("policy_pass", model, completion_ids.size(0), entropy, timer))
        with self.timer.timed(timer) if timer else contextlib.nullcontext():
            logps = _token_values(fake_logp, completion_ids, prompt_mask)
            entropies = _token_values(lambda t, n: fake_entropy(t), completion_ids, prompt_mask) if entropy else None
        return logps, entropies

    def reference_logps(self, prompt_ids, prompt_mask, completion_ids, completion_mask):
        self.calls.append(("reference_logps", completion_ids.size(0)))
        return _token_values(fake_ref_logp, completion_ids, prompt_mask)

    def supplementary_samples(self, inputs, fill, need_old_logps):
        from hir_trl.step.state import SupplementarySamples

        self.calls.append(("supplementary_samples", list(fill), need_old_logps))
        if sum(fill) == 0:
            return None
        m = self.num_generations
        rows = [inputs[g * m] for g, n in enumerate(fill) for _ in range(n)]
        texts = [self.supplementary[g].pop(0) for g, n in enumerate(fill) for _ in range(n)]
        scored = self._score(rows, texts, [True] * len(texts), old_logps=need_old_logps)
        return SupplementarySamples(tensors=scored["tensors"], prompts=scored["prompts"],
                                    completions=scored["completions"], verdicts=scored["verdicts"],
                                    rewards_per_func=scored["rewards_per_func"], fillers=0,
                                    generated_tokens=int(scored["tensors"]["completion_mask"].sum()))

    def extra_rewards(self, capture, new_rows, prompts, completions, completion_ids, rows):
        from hir_trl.step.rewards import extra_rewards

        self.extra_reward_calls.append(dict(prompts=list(prompts), completions=list(completions),
                                            completion_ids=[list(ids) for ids in completion_ids], rows=list(rows)))
        columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"} if rows else {}
        return extra_rewards(self.extra_reward_funcs, prompts, completions, completion_ids, columns)

    def tokenize_prompts(self, prompts):
        self.calls.append(("tokenize_prompts", len(prompts)))
        return [self.tokenizer.prompt_ids(p) for p in prompts]

    # ---------------------------------------------------------------- StepPasses: one rank, and its records
    def gather(self, tensor):
        return tensor

    def gather_object(self, values):
        return list(values)

    def log_metric(self, name, value, training=True):
        (self.metrics if training else self.eval_metrics)[name].append(value)

    def log_hindsight_rows(self, row_ids, sampled_advantages, entries, new_advantages):
        self.hindsight_rows.append(dict(row_ids=list(row_ids), sampled_advantages=list(sampled_advantages),
                                        entries=list(entries), new_advantages=list(new_advantages)))

    def has_log_columns(self, columns):
        return any(column in self.log_columns for column in columns)

    def extend_log_columns(self, values):
        for column, column_values in values.items():
            self.log_columns[column].extend(column_values)

    def pop_judge_metrics(self):
        return self.judge.pop_metrics() if hasattr(self.judge, "pop_metrics") else None
