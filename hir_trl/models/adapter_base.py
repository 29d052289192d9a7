"""The base a LoRA adapter was trained on, recorded twice at every save (the final model and each ``checkpoint-N``).

- ``adapter_config.json``'s ``base_model_name_or_path`` (peft's) names a base that loads elsewhere, so that a pushed
  adapter works: the Hub id of a local copy when it is known (`adapter_base_name`; the SmolLM2 conversion records
  ``HuggingFaceTB/SmolLM2-135M-Instruct``), else the local base's absolute path, else the Hub id trained on.
- `ADAPTER_BASE_RECORD` (``_hir_adapter_base.json``) beside it names the exact base trained on: the local folder's
  absolute path (``trained_on``; None for a Hub model) and the sha256 of each of its weight files (``weights``,
  `file_sha256`), so that a folder rebuilt with other weights is told apart by content, whatever their names and
  sizes (a record written before hashes holds sizes, which are compared only with the folder trained on). peft ignores the file, and its name starts with ``_``,
  which transformers' Hub uploads (``push_to_hub``, ``hub_strategy``) leave out: a local path means nothing
  elsewhere, where the Hub id applies.

`hir_trl.HiRTrainer` sets the first once TRL has loaded the model (`record_adapter_base`) and writes the second after
every save (`write_adapter_base`).

``hir-trl eval generate`` merges an adapter into its ``trained_on`` folder while that folder still holds the weights
trained on, else into the base ``adapter_config.json`` records (`hir_trl.evaluation.generation.choose_lora_base`);
``hir-trl train --resume_from_checkpoint`` refuses to resume an adapter on another base (`resume_base_problem`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: The file HiR writes beside every LoRA adapter it saves: the exact base trained on (`write_adapter_base_records`).
ADAPTER_BASE_RECORD = "_hir_adapter_base.json"
#: peft's file of a LoRA adapter, whose ``base_model_name_or_path`` names the base that loads elsewhere.
ADAPTER_CONFIG = "adapter_config.json"


def adapter_base_name(name_or_path: str) -> str:
    """What a LoRA adapter trained on ``name_or_path`` records as its ``base_model_name_or_path``: the Hub id a local
    folder is a copy of (`hir_trl.models.smollm2.hub_origin`), else a local folder's absolute path (a relative one
    loads only from the folder training ran in), else ``name_or_path`` as it is (a Hub id)."""
    from .smollm2 import hub_origin

    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        return name_or_path
    return hub_origin(path) or str(path.resolve())


def record_adapter_base(model: Any) -> dict[str, str]:
    """Set the ``base_model_name_or_path`` of each LoRA adapter of ``model`` (a peft model; anything else is left as
    it is) to `adapter_base_name` of the one recorded, which peft writes to ``adapter_config.json`` at every save.

    Returns:
        adapter name -> the base recorded, for each adapter whose record changed.
    """
    changed = {}
    for name, config in (getattr(model, "peft_config", None) or {}).items():
        recorded = getattr(config, "base_model_name_or_path", None)
        if isinstance(recorded, str) and recorded and adapter_base_name(recorded) != recorded:
            config.base_model_name_or_path = changed[name] = adapter_base_name(recorded)
    return changed


#: sha256 of a file already hashed by this process, by (resolved path, inode, size, modification time in ns), kept
#: only for files last written more than 2 s before they were hashed (a rewrite within one tick of the file system's
#: clock keeps its mtime): a base's weights are hashed once per run, not at every checkpoint.
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, as ``"sha256:<64 hex digits>"`` (read in 1 MiB chunks; remembered by this process
    while the file's inode, size and modification time stay the same, `_DIGESTS`)."""
    import hashlib
    import time

    path = Path(path)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    digest = "sha256:" + hasher.hexdigest()
    if time.time_ns() - stat.st_mtime_ns > 2_000_000_000:  # a file written just now may change within its mtime tick
        _DIGESTS[key] = digest
    return digest


def weight_files(folder: str | os.PathLike[str]) -> dict[str, str]:
    """File name -> content hash (`file_sha256`) of each weight file at the top of a model folder
    (``*.safetensors``, ``*.bin`` but ``training_args.bin``), sorted by name; empty for a folder without any."""
    path = Path(folder)
    return {
        p.name: file_sha256(p)
        for p in sorted(path.iterdir())
        if p.is_file() and (p.suffix == ".safetensors" or (p.suffix == ".bin" and p.name != "training_args.bin"))
    }


def same_weights(now: dict[str, Any], then: dict[str, Any]) -> bool:
    """Whether two `weight_files` records hold the same files with the same content: the same names and sha256
    hashes. A record written before hashes were recorded (sizes) matches nothing: sizes do not tell weights apart."""
    return bool(now) and set(now) == set(then) and all(
        isinstance(then[name], str) and now[name] == then[name] for name in now)



def base_of(name_or_path: str) -> dict[str, Any]:
    """What `ADAPTER_BASE_RECORD` records of the base ``name_or_path`` (a folder, relative to the current directory,
    or a Hub id): ``{"base_model_name_or_path": adapter_base_name(name_or_path), "trained_on": the folder's absolute
    path or None (a Hub id), "weights": weight_files(folder) or {}}``."""
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        return {"base_model_name_or_path": name_or_path, "trained_on": None, "weights": {}}
    return {
        "base_model_name_or_path": adapter_base_name(name_or_path),
        "trained_on": str(path.resolve()),
        "weights": weight_files(path),
    }


def trained_base(model: Any) -> dict[str, Any] | None:
    """`base_of` the base model of a peft ``model`` (its ``name_or_path``: the folder or Hub id it was loaded from),
    or None for a model without adapters."""
    if not getattr(model, "peft_config", None) or not hasattr(model, "get_base_model"):
        return None
    name = getattr(model.get_base_model(), "name_or_path", None)
    return base_of(name) if isinstance(name, str) and name else None


def planned_base(name_or_path: str, build_model: str | None = None) -> dict[str, Any] | None:
    """This run's base before its model is loaded (`base_of`), for the checks of ``hir-trl train`` before loading;
    None while ``build_model`` is still to build the folder (nothing to compare yet)."""
    if build_model and not Path(name_or_path).expanduser().is_dir():
        return None
    return base_of(name_or_path)


def write_adapter_base_records(folder: str | os.PathLike[str], model: Any) -> list[Path]:
    """Write `ADAPTER_BASE_RECORD` beside each adapter of ``model`` that peft saved in ``folder`` (``default`` in the
    folder itself, another adapter in ``folder/<name>``, as `PeftModel.save_pretrained` lays them out): the adapter's
    recorded ``base_model_name_or_path`` and the exact base (`trained_base`). Nothing for a model without adapters.

    Returns:
        The files written.
    """
    base = trained_base(model)
    if base is None:
        return []
    written = []
    for name, config in model.peft_config.items():
        where = Path(folder) if name == "default" else Path(folder) / name
        if not (where / ADAPTER_CONFIG).is_file():
            continue
        record = {
            **base,
            "base_model_name_or_path": getattr(config, "base_model_name_or_path", None)
            or base["base_model_name_or_path"],
        }
        (where / ADAPTER_BASE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        written.append(where / ADAPTER_BASE_RECORD)
    return written


def write_adapter_base(model: Any, args: Any, output_dir: str | None) -> list[Path]:
    """After a save into ``output_dir`` (None: ``args.output_dir``; `transformers.Trainer._save`, which the final
    save, every ``checkpoint-N`` and ``push_to_hub`` go through): `write_adapter_base_records` of ``model``, on the
    process that writes the run's files (``args.should_save``) only.

    Returns:
        The files written (none for a model without adapters, or on another process).
    """
    if not args.should_save:
        return []
    return write_adapter_base_records(output_dir or args.output_dir, model)


def read_adapter_base_record(folder: str | os.PathLike[str]) -> tuple[dict[str, Any] | None, str]:
    """The `ADAPTER_BASE_RECORD` of an adapter folder, or None with why (no such file: an adapter saved before
    hir-trl wrote it, or by another tool; or a file that is no such record)."""
    path = Path(folder) / ADAPTER_BASE_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no {ADAPTER_BASE_RECORD}"
    except (OSError, ValueError) as exc:
        return None, f"{path} cannot be read ({type(exc).__name__})"
    trained_on = record.get("trained_on") if isinstance(record, dict) else None
    if (
        not isinstance(record, dict)
        or not (trained_on is None or isinstance(trained_on, str))
        or not isinstance(record.get("weights", {}), dict)
    ):
        return None, f"{path} is no record of a base"
    return record, ""


def local_base_problem(record: dict[str, Any]) -> str | None:
    """Why the folder a `ADAPTER_BASE_RECORD` names as trained on (``trained_on``) is not that base here any more
    ("is gone", "holds no weight files", or the first weight file missing, added or whose sha256 differs from the
    one recorded), or None when it still holds the recorded weight files, byte for byte."""
    folder = Path(record["trained_on"])
    if not folder.is_dir():
        return "is gone"
    now, then = weight_files(folder), record.get("weights") or {}
    if not now:
        return "holds no weight files"
    for name in sorted(set(now) | set(then)):
        if name not in now:
            return f"no longer holds {name}"
        if name not in then:
            return f"holds {name}, which it did not when trained on"
        if isinstance(then[name], int):  # a record of sizes (before hashes were recorded): all it can tell
            if (folder / name).stat().st_size != then[name]:
                return f"holds other weights ({name}: {(folder / name).stat().st_size} bytes, trained on {then[name]})"
        elif now[name] != then[name]:
            return f"holds other weights ({name}: its content differs from the one trained on, {_short(then[name])})"
    return None


def _short(digest: Any) -> str:
    return f"{str(digest)[:19]}..." if isinstance(digest, str) else str(digest)


def resume_base_problem(checkpoint: str | os.PathLike[str], current: dict[str, Any] | None) -> str | None:
    """Why a LoRA ``checkpoint`` would resume on another base than it was trained on, or None.

    Args:
        checkpoint: a ``checkpoint-N`` folder; one without `ADAPTER_BASE_RECORD` (saved before hir-trl wrote it, or
            by another trainer) is not checked.
        current: this run's base (`trained_base` of its model), or None (no adapter).

    Returns:
        One line naming the checkpoint, both bases and the fix, when the checkpoint was trained on a local folder
        that still holds its weights and this run loads another base; when that folder is this run's base but
        holds other weights now; or when its recorded base (``base_model_name_or_path``) differs from this run's
        and this run's folder is no copy of the one trained on (`same_weights`: the same sha256 of each weight
        file); else None.
    """
    record, _ = read_adapter_base_record(checkpoint)
    if record is None or current is None:
        return None
    loads = current.get("trained_on") or current.get("base_model_name_or_path")
    was = record.get("trained_on")
    if was is not None and local_base_problem(record) is None:
        if current.get("trained_on") == was:
            return None
        return (
            f"{checkpoint} was trained on {was} ({ADAPTER_BASE_RECORD}), and this run loads {loads}: pass "
            f"--model_name_or_path {was}, or start a new run"
        )
    if was is not None and current.get("trained_on") == was:  # the same folder, its weights changed since
        return (
            f"{checkpoint} was trained on {was}, which {local_base_problem(record)} ({ADAPTER_BASE_RECORD}): "
            "put the weights trained on back there, or start a new run"
        )
    if was is not None and current.get("weights") and same_weights(current["weights"], record.get("weights") or {}):
        return None  # the folder trained on is gone or changed, and this one holds the very weights trained on
    recorded = record.get("base_model_name_or_path")
    if isinstance(recorded, str) and recorded and recorded != current.get("base_model_name_or_path"):
        return (
            f"{checkpoint} holds a LoRA adapter of {recorded}, and this run loads {loads}: pass "
            f"--model_name_or_path {recorded} (or a local copy of it), or start a new run"
        )
    return None


__all__ = [
    "ADAPTER_BASE_RECORD",
    "adapter_base_name",
    "base_of",
    "file_sha256",
    "local_base_problem",
    "planned_base",
    "read_adapter_base_record",
    "record_adapter_base",
    "resume_base_problem",
    "same_weights",
    "trained_base",
    "weight_files",
    "write_adapter_base",
    "write_adapter_base_records",
]
