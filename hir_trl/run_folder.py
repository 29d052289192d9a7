"""An ``output_dir`` holds one run (docs/scale-out.md "Resume and re-run"): who may write it, what a resume continues,
and when a run is finished.

- A run holds its folder (`holding_run_folder`, `claim_run_folder`): an OS lock on ``output_dir/_hir-trl.lock``
  (the `filelock` library's ``flock``), taken by the main process only and released by the operating system when the
  process ends, however it ends; a second run on the folder is refused, naming the holder's pid.
- A fresh run into a folder that holds another run is refused unless ``--overwrite_output_dir``, which deletes what
  that run wrote (`run_outputs`) and never a path this run reads (`check_output_dir`'s ``keep``, `paths_read`).
- The checkpoint resumed from is complete (`check_resume`) and fits this run (`check_resume_point`): it has its
  model weights, the same LoRA/full choice, the optimizer and data settings it restores, and it sits at a boundary
  of TRL's generation cycle.
- Resuming from an earlier checkpoint of the folder moves the later line aside (`set_aside_later_line`), so that
  ``--resume_from_checkpoint true`` never continues it.
- A final model counts as written only when its marker, written last (`mark_final_save`), lists every file of the
  save with its size (`final_model`); only then is a re-run "already finished" (`check_finished`).
- An upload of the folder to the Hub (``push_to_hub``) carries the completion logs TRL keeps in it
  (`COMPLETIONS_PATTERNS`) unless ``push_completions: false`` (`hub_upload`); a run says which at start
  (`warn_hub_upload`).
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import one_line

logger = logging.getLogger(__name__)

#: The lock file a run holds in its ``output_dir`` (its content names the holder: pid, host, start time).
LOCK_FILE = "_hir-trl.lock"
#: The final save's marker, written after the model, the trainer state and the model card: the files and their sizes.
FINAL_MARK = "hir_final_model.json"
#: Where `set_aside_later_line` moves the checkpoints, completion logs and final files of an abandoned line.
ABANDONED = "_abandoned"
#: What ``push_completions: false`` leaves out of an upload of ``output_dir``: TRL's completion logs
#: (``completions/completions_<step>.parquet``, written by `trl.GRPOTrainer.log`).
COMPLETIONS_PATTERNS = ("completions/*",)
#: Settings a checkpoint keeps (recorded in its ``hir_state.json``; `check_resume_point`): the optimizer's and the
#: scheduler's, which resuming restores from the checkpoint whatever the run sets, and those the data order and TRL's
#: generation schedule follow, which resuming with other values would shift.
RESUME_SETTINGS = ("learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "optim",
                   "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "warmup_ratio", "seed",
                   "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                   "num_iterations", "num_generations")

#: The `RESUME_SETTINGS` that the optimizer's and the scheduler's state restore (a checkpoint without optimizer
#: state, ``save_only_model: true``, restores none of them: a new value is then honoured).
_OPTIMIZER_SETTINGS = frozenset(RESUME_SETTINGS[:10])


def _main_process(writer: bool | None = None) -> bool:
    """Whether this process writes ``output_dir``: ``writer`` when given (the run's ``args.should_save``: global rank
    0, or with ``save_on_each_node`` the first process of each node, whose node holds a folder of its own), else
    global rank 0 (``RANK``)."""
    return os.environ.get("RANK", "0") == "0" if writer is None else bool(writer)


# ------------------------------------------------------------------------------------------ checkpoints


def _step_of(path: Path) -> int:
    return int(path.name.split("-")[-1])


def _checkpoint_folders(folder: Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``folder``, by N (the one glob of checkpoints)."""
    found = [p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and p.is_dir()]
    return sorted(found, key=_step_of)


def _complete_checkpoints(output_dir: str) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir`` that were saved completely (have trainer_state.json), by N."""
    return [p for p in _checkpoint_folders(Path(output_dir)) if (p / "trainer_state.json").is_file()]


#: Largest torch file (zip format) whose every member's CRC is checked before resuming; larger ones are only opened.
_CRC_CHECK_BYTES = 2 << 30


def checkpoint_file_problem(path: Path) -> str | None:
    """Why a checkpoint file cannot be read, or None: a JSON file (``trainer_state.json``, ``hir_state.json``, ...)
    that does not parse, a ``.safetensors`` file whose header or size is wrong, or a torch file (``optimizer.pt``,
    ``scheduler.pt``, ``rng_state.pth``, ``*.bin``: torch's zip format) that is truncated or fails its CRCs."""
    import zipfile

    if path.suffix not in _READ_ON_RESUME:  # the model card, a tokenizer's text files: resuming reads none of them
        return None
    try:
        if path.stat().st_size == 0:
            return "the file is empty"
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                handle.keys()
        elif path.suffix in (".pt", ".pth", ".bin"):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip() if path.stat().st_size <= _CRC_CHECK_BYTES else None
            if bad is not None:
                return f"member {bad} fails its CRC check"
    except Exception as exc:  # noqa: BLE001 - json, zipfile, safetensors (SafetensorError), OS errors: unreadable
        return one_line(exc)
    return None


#: The kinds of checkpoint file a resume reads (the trainer's, HiR's and the model's state).
_READ_ON_RESUME = (".json", ".safetensors", ".pt", ".pth", ".bin")


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint folder ``path`` cannot be resumed from, or None: no ``trainer_state.json`` (interrupted
    while saving), a file a resume reads that cannot be read (`checkpoint_file_problem`), or no model weights
    (`_weights_problem`). The one test of a usable checkpoint: Ctrl-C's message (`last_checkpoint`) and the resume
    check (`check_resume`) both apply it."""
    if not (path / "trainer_state.json").is_file():
        return f"{path} is not a complete checkpoint (no trainer_state.json; was it interrupted while saving?)"
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        problem = checkpoint_file_problem(file)
        if problem is not None:
            return f"{file} is truncated or corrupt ({problem})"
    return _weights_problem(path)


def _latest_usable(output_dir: str, other_than: Path | None = None) -> Path | None:
    """The latest ``checkpoint-N`` of ``output_dir`` (but ``other_than``) without a `checkpoint_problem`, checked
    from the newest back (each check reads the checkpoint's files), or None."""
    for path in reversed(_complete_checkpoints(output_dir)):
        if (other_than is None or path.name != other_than.name) and checkpoint_problem(path) is None:
            return path
    return None


#: The model weights a checkpoint may hold: full (one file or an index of shards) or a LoRA adapter.
_FULL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
_ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def _weights_problem(path: Path) -> str | None:
    """Why the checkpoint ``path`` holds no usable model weights (none at all, or a shard its index names is
    missing), or None. DeepSpeed (``global_step*``) and FSDP (``pytorch_model_fsdp*``) checkpoints pass."""
    if any(path.glob("global_step*")) or any(path.glob("pytorch_model_fsdp*")):
        return None
    present = [name for name in (*_FULL_WEIGHTS, *_ADAPTER_WEIGHTS) if (path / name).is_file()]
    if not present:
        return (f"{path} holds no model weights (no model.safetensors, sharded model or LoRA adapter): it was saved "
                "incompletely or copied without them")
    for index in (name for name in present if name.endswith(".index.json")):
        try:
            shards = set(json.loads((path / index).read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"{path / index} is not a weights index (no weight_map)"
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            return f"{path} lacks {', '.join(missing)}, which {index} names"
    return None


def check_resume(resume_from_checkpoint, output_dir: str) -> str | None:
    """Resolve ``resume_from_checkpoint`` to a checkpoint folder, refusing one that is no complete checkpoint (before
    any model is loaded).

    ``true`` (as the recipe's boolean or the command line's string, as a scheduler's requeue passes it) means the
    latest usable ``checkpoint-N`` of ``output_dir`` (`checkpoint_problem`: one interrupted while it was saved, or
    truncated, is passed over; `set_aside_later_line` then moves it aside), or None when there is none (the run was
    interrupted before its first checkpoint: it starts again, `set_aside_later_line` with ``from_start``);
    ``false``, an empty string or None mean a fresh run.

    Returns:
        The checkpoint folder to resume from, or None for a fresh run.

    Raises:
        ValueError: a named folder does not exist or has no trainer_state.json (a checkpoint interrupted while it
            was being saved); a file of the named checkpoint that cannot be read (`checkpoint_file_problem`), or no
            model weights (`_weights_problem`), named with an earlier checkpoint to resume from.
    """
    if resume_from_checkpoint in (None, False, "", "false", "False"):
        return None
    if resume_from_checkpoint in (True, "true", "True"):
        usable = _latest_usable(output_dir) if os.path.isdir(output_dir) else None
        return None if usable is None else str(usable)
    path = Path(str(resume_from_checkpoint))
    if not path.is_dir():
        raise ValueError(f"resume_from_checkpoint: {path} is not a folder")
    problem = checkpoint_problem(path)
    if problem is not None:
        earlier = _latest_usable(str(path.parent), other_than=path)
        hint = f"; resume from {earlier} instead" if earlier else ""
        if earlier and not (path / "trainer_state.json").is_file():
            hint += f", or delete {path}"
        raise ValueError(f"resume_from_checkpoint: {problem}{hint}")
    return str(path)


def _state(path: Path) -> dict:
    try:
        state = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


# ------------------------------------------------------------------------------------------ what a checkpoint keeps


def _plain(value: Any) -> Any:
    """A setting as JSON holds it (an enum by its value, a tuple as a list)."""
    if isinstance(value, enum.Enum):
        value = value.value
    return json.loads(json.dumps(value, default=str))


def resume_settings(args: Any) -> dict[str, Any]:
    """The `RESUME_SETTINGS` of ``args`` (a `HiRConfig`), as recorded in a checkpoint's ``hir_state.json``."""
    return {name: _plain(getattr(args, name)) for name in RESUME_SETTINGS if hasattr(args, name)}


def _recorded_settings(checkpoint: Path) -> dict[str, Any]:
    """The settings ``checkpoint`` was trained with: its ``hir_state.json`` record, else (a checkpoint of another
    trainer or an older hir-trl) what its ``optimizer.pt`` holds (learning rate, weight decay, Adam's betas and
    epsilon), read memory-mapped without the optimizer's tensors."""
    try:
        record = json.loads((checkpoint / "hir_state.json").read_text(encoding="utf-8")).get("settings")
    except (OSError, ValueError, AttributeError):
        record = None
    if isinstance(record, dict):
        return record
    if not (checkpoint / "optimizer.pt").is_file():
        return {}
    try:
        import torch

        groups = torch.load(checkpoint / "optimizer.pt", map_location="cpu", weights_only=True,
                            mmap=True).get("param_groups") or []
    except Exception:  # noqa: BLE001 - an optimizer file torch cannot read: nothing recorded (transformers will say)
        return {}
    found: dict[str, Any] = {}
    if groups and all("initial_lr" in g for g in groups):
        found["learning_rate"] = max(g["initial_lr"] for g in groups)
    if groups and all("weight_decay" in g for g in groups):
        found["weight_decay"] = max(g["weight_decay"] for g in groups)
    if groups and "betas" in groups[0]:
        found["adam_beta1"], found["adam_beta2"] = (float(b) for b in groups[0]["betas"])
    if groups and "eps" in groups[0]:
        found["adam_epsilon"] = groups[0]["eps"]
    return found


def _flag_value(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list)) else str(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return a == b


def _generation_cycle(args: Any) -> int:
    """Optimizer steps per TRL generation: TRL generates once every ``steps_per_generation x num_iterations``
    micro-batches (`GRPOTrainer._prepare_inputs`); 1 when every step generates anew."""
    every = int(getattr(args, "steps_per_generation", None) or 1) * int(getattr(args, "num_iterations", 1) or 1)
    accumulation = int(getattr(args, "gradient_accumulation_steps", 1) or 1)
    return every // math.gcd(every, accumulation)


def _all_linear(spec: Any) -> bool:
    """``spec`` (``lora_target_modules``) is peft's shorthand for every linear layer but the output layer."""
    items = [spec] if isinstance(spec, str) else list(spec) if isinstance(spec, (list, tuple, set)) else []
    return len(items) == 1 and str(items[0]).lower() == "all-linear"


def _adapted_modules(model: str | None, specs: Sequence[Any]) -> list[set[str]] | None:
    """The linear layers of ``model`` (a local folder or a cached Hub id, built on the meta device from its config:
    no weights read) that each ``lora_target_modules`` spec of ``specs`` adapts, as peft resolves it
    (`peft.tuners.tuners_utils.check_target_module_exists`; ``all-linear``: every ``nn.Linear`` but the output
    layer); None when the config cannot be read offline."""
    if not model:
        return None
    try:
        import torch
        from accelerate import init_empty_weights
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model)
        with init_empty_weights():
            built = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - no config offline, an architecture transformers lacks: peft's load decides
        return None
    output = built.get_output_embeddings()
    linear = {name for name, module in built.named_modules() if isinstance(module, torch.nn.Linear)
              and module is not output}
    resolved = []
    for spec in specs:
        if _all_linear(spec):
            resolved.append(linear)
        elif isinstance(spec, str):
            resolved.append({name for name in linear if re.fullmatch(spec, name)})
        else:
            targets = [str(t) for t in spec]
            resolved.append({name for name in linear if any(name == t or name.endswith(f".{t}") for t in targets)})
    return resolved


def _lora_problem(checkpoint: Path, lora: Mapping[str, Any] | None) -> str | None:
    full = any((checkpoint / name).is_file() for name in _FULL_WEIGHTS)
    adapter = next((name for name in _ADAPTER_WEIGHTS if (checkpoint / name).is_file()), None)
    if lora is None and adapter and not full:
        return (f"{checkpoint} holds a LoRA adapter ({adapter}), and this run trains the whole model: pass "
                "--use_peft true with the adapter's settings (its adapter_config.json), or resume from a checkpoint "
                "of a full run")
    if lora is None or not (full or adapter):
        return None
    if full and not adapter:
        return (f"{checkpoint} holds a whole model (no adapter_model.safetensors), and this run trains a LoRA "
                "adapter (use_peft: true): pass --use_peft false, or resume from a checkpoint of a LoRA run")
    try:
        saved = json.loads((checkpoint / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    differ = []
    for name, flag in (("r", "lora_r"), ("lora_alpha", "lora_alpha"), ("target_modules", "lora_target_modules")):
        want, have = lora.get(name), saved.get(name) if isinstance(saved, dict) else None
        if want is None or have is None:
            continue
        if name == "target_modules" and _all_linear(want) != _all_linear(have):  # peft saves all-linear expanded
            adapted = _adapted_modules(lora.get("model"), [want, have])
            if adapted is None or adapted[0] == adapted[1]:  # the same layers (or the base cannot tell: peft loads)
                continue
            want, have = sorted(adapted[0]), sorted(adapted[1])
        if isinstance(want, (list, tuple, set)) and isinstance(have, (list, tuple, set)):
            want, have = sorted(map(str, want)), sorted(map(str, have))
        if not _same(want, have):
            differ.append(f"{flag} {have} (this run: {want})")
    if differ:
        return (f"{checkpoint} holds a LoRA adapter with {', '.join(differ)}: pass the checkpoint's values, or "
                "start a new run from the base model")
    from .models.adapter_base import resume_base_problem

    return resume_base_problem(checkpoint, lora.get("base"))  # the base it was trained on, _hir_adapter_base.json


def check_resume_point(checkpoint: str | None, args: Any, lora: Mapping[str, Any] | None = None) -> None:
    """Refuse a checkpoint that this run would resume from wrongly, before any model is loaded.

    Args:
        checkpoint: the checkpoint folder (`check_resume`), or None (nothing to check).
        args: the run's `HiRConfig`.
        lora: the run's LoRA settings (``r``, ``lora_alpha``, ``target_modules``; ``base``, the model's
            `hir_trl.models.adapter_base.trained_base`, when the model is loaded; ``model``, its path or Hub id, to
            compare ``all-linear`` with the layer names peft saved it as), or None for a full model.

    Raises:
        ValueError: one line naming the checkpoint and the fix, when
            - it holds no model weights, or a LoRA adapter for a full run, a whole model for a LoRA run, or an
              adapter of another rank, alpha or target modules, or trained on another base than ``lora``'s
              ``base`` (`hir_trl.models.adapter_base.resume_base_problem`);
            - the run sets a `RESUME_SETTINGS` value other than the checkpoint's (``transformers`` would restore the
              optimizer's and scheduler's from the checkpoint and drop the new ones silently; the others would
              shift the data order or TRL's generation schedule);
            - it sits inside a generation cycle (``num_iterations > 1`` or ``steps_per_generation`` above
              ``gradient_accumulation_steps``: TRL reuses one generation for several steps and, resumed mid-cycle,
              generates anew and shifts the schedule); the message names the checkpoints at a boundary.
    """
    if checkpoint is None:
        return
    path = Path(checkpoint)
    problem = _weights_problem(path) or _lora_problem(path, lora)
    if problem is not None:
        raise ValueError(f"resume_from_checkpoint: {problem}")
    recorded, current = _recorded_settings(path), resume_settings(args)
    if optimizer_restart_note(str(path)) is not None:  # no optimizer state: the optimizer and schedule start anew
        recorded = {k: v for k, v in recorded.items() if k not in _OPTIMIZER_SETTINGS}
    changed = [name for name in RESUME_SETTINGS if name in recorded and name in current
               and not _same(_plain(recorded[name]), current[name])]
    if changed:
        theirs = " ".join(f"--{name} {_flag_value(recorded[name])}" for name in changed)
        shown = ", ".join(f"{name} {recorded[name]} (this run: {current[name]})" for name in changed)
        raise ValueError(f"resume_from_checkpoint: {path} was trained with {shown}; resuming keeps the checkpoint's "
                         f"optimizer, schedule and data order, so pass its values ({theirs}), or start a new run "
                         f"from its weights (--model_name_or_path {path} --output_dir another/folder)")
    step = _state(path).get("global_step")
    cycle = _generation_cycle(args)
    if cycle > 1 and isinstance(step, int) and step % cycle:
        boundaries = [str(p) for p in _complete_checkpoints(str(path.parent)) if _step_of(p) % cycle == 0]
        where = (f"resume from a checkpoint at a cycle boundary ({', '.join(boundaries)})" if boundaries else
                 "no checkpoint of this folder is at a cycle boundary: train again")
        raise ValueError(f"resume_from_checkpoint: {path} is at step {step}, inside a generation cycle: TRL generates "
                         f"once every {cycle} steps here (steps_per_generation {args.steps_per_generation} x "
                         f"num_iterations {args.num_iterations}, gradient_accumulation_steps "
                         f"{args.gradient_accumulation_steps}), and resuming mid-cycle would generate anew and shift "
                         f"the schedule; {where}, and set save_steps to a multiple of {cycle}")


# ------------------------------------------------------------------------------------------ the final model


#: Files a run writes at the top of its ``output_dir`` besides its model: `Trainer.save_state`, ``save_model``'s
#: pickled arguments, results files, the replay RNG, and the final save's marker.
_RUN_FILES = ("trainer_state.json", "training_args.bin", "all_results.json", "train_results.json",
              "eval_results.json", "hir_state.json", FINAL_MARK)
#: What `Trainer.save_model` writes beside ``training_args.bin`` (model, tokenizer, model card): removed with the run
#: only when ``training_args.bin`` marks the top of ``output_dir`` as a run's final model.
_MODEL_FILES = re.compile(
    r"(?:config|generation_config|tokenizer|tokenizer_config|special_tokens_map|added_tokens|vocab|"
    r"preprocessor_config|processor_config|chat_template|adapter_config|_hir_adapter_base)\.(?:json|jinja)"
    r"|(?:model|pytorch_model|adapter_model)(?:-\d+-of-\d+)?\.(?:safetensors|bin)"
    r"|(?:model|pytorch_model)\.(?:safetensors|bin)\.index\.json|merges\.txt|vocab\.txt|tokenizer\.model|README\.md")
#: A HiR model card (`hir_trl.card.hir_card_section`): a README.md that is a run's output, not the user's.
_CARD_MARK = "## HiR training"


def start_final_save(output_dir: str, writer: bool | None = None) -> None:
    """Before the final save: remove the marker of an earlier one, so that a save interrupted from here on leaves
    no final model that counts (on the process that writes ``output_dir``, `_main_process`)."""
    if _main_process(writer):
        (Path(output_dir) / FINAL_MARK).unlink(missing_ok=True)


def mark_final_save(output_dir: str, global_step: int, max_steps: int) -> None:
    """After the final save (model, trainer state, model card): write `FINAL_MARK`, the step and every file of the
    save with its size, atomically (a temporary file renamed)."""
    folder = Path(output_dir)
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir())
             if p.is_file() and p.name != FINAL_MARK and (p.name in _RUN_FILES or _MODEL_FILES.fullmatch(p.name))}
    temporary = folder / f".{FINAL_MARK}.tmp"
    temporary.write_text(json.dumps({"global_step": global_step, "max_steps": max_steps, "files": files}, indent=1),
                         encoding="utf-8")
    os.replace(temporary, folder / FINAL_MARK)


def final_model(output_dir: str) -> tuple[dict | None, str]:
    """The final save's record in ``output_dir`` when all of it is there (every file `mark_final_save` listed, with
    its size, and model weights among them), else None; and why not (or "" when it is)."""
    folder = Path(output_dir)
    try:
        record = json.loads((folder / FINAL_MARK).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no {FINAL_MARK}: the final save did not complete" if (folder / "training_args.bin").exists() \
            else "no final model"
    except (OSError, ValueError) as exc:
        return None, f"{FINAL_MARK} cannot be read ({one_line(exc)})"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not isinstance(record.get("global_step"), int):
        return None, f"{FINAL_MARK} is not a final save's record"
    for name, size in files.items():
        actual = (folder / name).stat().st_size if (folder / name).is_file() else None
        if actual != size:
            return None, (f"{name} is missing" if actual is None else f"{name} has {actual} bytes, the save wrote "
                          f"{size}")
    if not any(name in files for name in (*_FULL_WEIGHTS, *_ADAPTER_WEIGHTS)):
        return None, f"{FINAL_MARK} lists no model weights"
    return record, ""


class AlreadyFinished(Exception):
    """``--resume_from_checkpoint`` names a run that already reached ``max_steps`` and saved all of its final model:
    nothing to train (exit 0)."""


def check_finished(resume_from_checkpoint: str | None, requested, output_dir: str, max_steps: int) -> str | None:
    """Refuse to resume a run that already finished (`AlreadyFinished`), before any model is loaded: resuming it
    would train past ``max_steps`` and overwrite its final model.

    A run is finished when ``output_dir`` holds its whole final model (`final_model`) at ``max_steps`` or later
    (the checkpoint's own ``max_steps`` when the run trains by epochs, ``max_steps: -1``), and either
    ``--resume_from_checkpoint true`` is given or the checkpoint named is itself at that step. A checkpoint at
    ``max_steps`` whose final save did not complete (a full disk, a kill, Ctrl-C while saving) is no finished run:
    its final model is written from the checkpoint (`complete_final_save`).

    Returns:
        Why the final model is to be written from the checkpoint (it is at ``max_steps``, the final save is not
        whole), else None.

    Raises:
        AlreadyFinished: one line naming the step, the checkpoint, and how to train further.
    """
    if resume_from_checkpoint is None:
        return None
    step = _state(Path(resume_from_checkpoint)).get("global_step")
    target = max_steps if max_steps > 0 else _state(Path(resume_from_checkpoint)).get("max_steps")
    if not (isinstance(target, int) and target > 0):
        return None
    record, why = final_model(output_dir)
    at_end = isinstance(step, int) and step >= target
    if record is not None and record["global_step"] >= target and (at_end or requested in (True, "true", "True")):
        where = resume_from_checkpoint if at_end else f"{Path(output_dir) / FINAL_MARK}"
        shown = step if at_end else record["global_step"]
        raise AlreadyFinished(
            f"{output_dir} already finished: {where} is at step {shown} of max_steps {target}, so "
            "--resume_from_checkpoint has nothing to train and the final model is left as it is (raise "
            "--max_steps to train further, or pass --overwrite_output_dir true to start again)")
    if at_end:
        return (f"{resume_from_checkpoint} is at step {step} of max_steps {target}, but {output_dir} holds no whole "
                f"final model ({why})")
    return None


def check_not_finished(output_dir: str) -> None:
    """``--resume_from_checkpoint true`` into ``output_dir`` without a usable checkpoint (`check_resume`) starts the
    run again, unless ``output_dir`` holds a whole final model (`final_model`): a run that finished without keeping
    checkpoints (``save_strategy: no``), which starting again would overwrite.

    Raises:
        AlreadyFinished: one line naming the final model's step and how to train anew.
    """
    record, _ = final_model(output_dir)
    if record is not None:
        raise AlreadyFinished(
            f"{output_dir} already finished: it holds its final model (step {record['global_step']}) and no "
            "checkpoint, so --resume_from_checkpoint has nothing to continue and the final model is left as it is "
            "(pass --overwrite_output_dir true to start again)")


def complete_final_save(checkpoint: str, output_dir: str, note: str, writer: bool | None = None) -> str:
    """Write the final model of a run whose last checkpoint is at ``max_steps`` but whose final save did not
    complete (`check_finished`'s ``note``): the checkpoint's model files, ``training_args.bin``,
    ``trainer_state.json`` and model card, copied into ``output_dir`` (what the final save writes at that step), then
    the marker. No model is loaded and no step trained (resuming through `Trainer.train` would train one more step).
    Written by the process that writes ``output_dir`` (`_main_process`; ``writer``: the run's ``should_save``).

    Returns:
        The line to print (the run then ends with exit status 0).

    Raises:
        ValueError: the checkpoint holds its model only in DeepSpeed's or FSDP's shards.
    """
    import shutil

    source, folder = Path(checkpoint), Path(output_dir)
    files = [p for p in sorted(source.iterdir()) if p.is_file()
             and (p.name in ("trainer_state.json", "training_args.bin") or _MODEL_FILES.fullmatch(p.name))]
    if not any(p.name in (*_FULL_WEIGHTS, *_ADAPTER_WEIGHTS) for p in files):
        raise ValueError(f"{note}, and {source} holds its model only in DeepSpeed's or FSDP's shards: convert it "
                         f"into {output_dir} (DeepSpeed's zero_to_fp32.py), or raise --max_steps to train on")
    if _main_process(writer):
        start_final_save(output_dir, writer)
        for path in files:
            shutil.copyfile(path, folder / path.name)
        step = _state(source).get("global_step")
        mark_final_save(output_dir, step, _state(source).get("max_steps") or step)
    return f"{note}: wrote it from the checkpoint (no step left to train)"


# ------------------------------------------------------------------------------------------ one run per folder


def _previous_run(output_dir: str) -> list[str]:
    """What in ``output_dir`` shows an earlier run: its ``checkpoint-N`` folders, ``completions/`` and
    ``trainer_state.json``, else ``training_args.bin`` (a final model alone); names relative to ``output_dir``."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    found = [p.name for p in _checkpoint_folders(folder)]
    if (folder / "completions").is_dir() and any((folder / "completions").iterdir()):
        found.append("completions/")
    if (folder / "trainer_state.json").is_file():
        found.append("trainer_state.json")
    if not found and (folder / "training_args.bin").is_file():  # a final model only (save_strategy: no, no logs)
        found.append("training_args.bin")
    if not found and (folder / ABANDONED).is_dir():
        found.append(f"{ABANDONED}/")
    return found


def run_outputs(output_dir: str) -> list[Path]:
    """Every path of ``output_dir`` that an earlier run wrote, which ``--overwrite_output_dir`` removes: its
    ``checkpoint-N`` folders, ``completions/``, ``_abandoned/``, TensorBoard's ``runs/``, `_RUN_FILES`, its HiR model
    card, and its final model (`_MODEL_FILES`, only when ``training_args.bin`` is there). Nothing else: a folder or
    file of the user's (a model or data kept inside ``output_dir``) stays."""
    folder = Path(output_dir)
    if not folder.is_dir():
        return []
    paths = _checkpoint_folders(folder)
    for name in ("completions", ABANDONED):
        if (folder / name).is_dir():
            paths.append(folder / name)
    runs = folder / "runs"
    if runs.is_dir() and any(runs.rglob("events.out.tfevents*")):
        paths.append(runs)
    paths += [folder / name for name in _RUN_FILES if (folder / name).is_file()]
    saved_model = (folder / "training_args.bin").is_file()
    for path in sorted(folder.iterdir()):
        if not path.is_file() or path in paths or not _MODEL_FILES.fullmatch(path.name):
            continue
        if path.name == "README.md":
            if saved_model or _CARD_MARK in path.read_text(encoding="utf-8", errors="replace"):
                paths.append(path)
        elif saved_model:
            paths.append(path)
    return paths


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except OSError:
        return False


#: Fields that name what a run writes or calls itself, never a path it reads (`paths_read`).
_WRITTEN_FIELDS = frozenset({"output_dir", "logging_dir", "run_name", "hub_model_id", "resume_from_checkpoint",
                             "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id"})


def paths_read(*configs: Any, recipe: str | None = None) -> dict[str, str]:
    """Every existing file or folder a run reads, by the field that names it: each string (or list of strings, or
    dataclass in a list, as TRL's ``datasets`` mixture) of the dataclasses ``configs`` that names an existing path
    (the model, the datasets, a judge cache, a chat template, a DeepSpeed config, ...), fields of what the run writes
    aside (`_WRITTEN_FIELDS`), and the recipe itself."""
    found: dict[str, str] = {"config": recipe} if recipe else {}
    for config in configs:
        for field in dataclasses.fields(config):
            value = getattr(config, field.name, None)
            if field.name in _WRITTEN_FIELDS:
                continue
            items = list(enumerate(value)) if isinstance(value, (list, tuple)) else []
            values = [(field.name, value)] if isinstance(value, (str, os.PathLike)) else [
                (f"{field.name}[{i}]", v) for i, v in items if isinstance(v, (str, os.PathLike))]
            for i, item in items:
                if dataclasses.is_dataclass(item) and not isinstance(item, type):
                    found.update({f"{field.name}[{i}].{k}": v for k, v in paths_read(item).items()})
            for label, candidate in values:
                try:
                    if str(candidate) and "\n" not in str(candidate) and Path(candidate).expanduser().exists():
                        found[label] = str(candidate)
                except (OSError, ValueError):  # a long or odd string (a system prompt) is no path
                    continue
    return found


def _same_path(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError):
        return False


def model_files(output_dir: str | os.PathLike[str]) -> list[str]:
    """The files of a model that is no run's output at the top of ``output_dir``: a config (``config.json`` or
    ``adapter_config.json``) with weight files (``*.safetensors``, ``*.bin`` but ``training_args.bin``, ``*.gguf``),
    in a folder that shows no run (no lock file of hir-trl, no ``training_args.bin``, no checkpoints, completion logs
    or trainer state: `_previous_run`); empty when there is none."""
    folder = Path(output_dir)
    if not folder.is_dir() or (folder / LOCK_FILE).exists() or _previous_run(str(folder)):
        return []
    configs = [name for name in ("config.json", "adapter_config.json") if (folder / name).is_file()]
    weights = sorted(p.name for p in folder.iterdir() if p.is_file() and (
        p.suffix in (".safetensors", ".gguf") or (p.suffix == ".bin" and p.name != "training_args.bin")))
    return [*configs, *weights] if configs and weights else []


def output_model_problem(output_dir: str, model_name_or_path: str | None) -> str | None:
    """Why training into ``output_dir`` would write over a model that is not this run's, or None: ``output_dir`` is
    the model this run trains from (``model_name_or_path``, however spelled; also while ``build_model`` is still to
    build it there), or holds a model folder of its own (`model_files`). Checked before anything is written, resumed
    or not; ``--overwrite_output_dir`` deletes only a run's outputs, so it does not apply. A folder that holds a run
    (`_previous_run`) is left to `check_output_dir` (another run, or what an overwrite would delete)."""
    if _previous_run(str(output_dir)):
        return None
    if model_name_or_path and _same_path(output_dir, model_name_or_path):
        return (f"output_dir {output_dir} is the model this run trains from (model_name_or_path "
                f"{model_name_or_path}): saving would write over it; choose another output_dir")
    found = model_files(output_dir)
    if found:
        shown = ", ".join(found if len(found) <= 4 else [*found[:3], "..."])
        return (f"output_dir {output_dir} holds a model that is not this run's ({shown}): saving would write over "
                "it; choose another output_dir (a new or empty folder), or move the model out of it")
    return None


def check_output_dir(output_dir: str, resume_from_checkpoint: str | None, overwrite: bool,
                     keep: Sequence[str | None] | Mapping[str, str | None] = (), writer: bool | None = None) -> None:
    """Keep two runs from mixing in one ``output_dir`` (before any model is loaded).

    A fresh run (no ``resume_from_checkpoint``) into a folder that holds another run's checkpoints, completion logs,
    trainer state or final model (`_previous_run`) is refused, unless ``overwrite`` (``--overwrite_output_dir``),
    which deletes everything that run wrote (`run_outputs`; on the main process only) and nothing else. Resuming
    from a checkpoint of another folder into an ``output_dir`` that holds a run is refused the same way.

    Args:
        output_dir: the run's folder.
        resume_from_checkpoint: the checkpoint folder resumed from (`check_resume`), or None.
        overwrite: ``--overwrite_output_dir``.
        keep: paths the run reads (`paths_read`: the model, the data, the recipe, ...), by field name or as a list:
            ``overwrite`` never deletes them, nor anything inside them, however they are spelled (relative,
            absolute, through a symlink, ``output_dir`` itself).
        writer: whether this process deletes (the run's ``should_save``; None: global rank 0, `_main_process`).

    Raises:
        ValueError: ``output_dir`` is a file; it holds a model that is not a run's (`output_model_problem`);
            ``overwrite`` together with ``resume_from_checkpoint``; ``output_dir`` holds another run and neither
            ``overwrite`` nor a checkpoint of it is resumed from; ``overwrite`` would delete a path of ``keep`` or
            part of it.
    """
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir {output_dir} is a file, not a folder: give the path of a folder (it is created "
                         "when missing), or move the file away")
    problem = output_model_problem(output_dir, None)
    if problem is not None:
        raise ValueError(problem)
    if overwrite and resume_from_checkpoint is not None:
        raise ValueError(f"overwrite_output_dir: true deletes the previous run of {output_dir}, "
                         f"resume_from_checkpoint ({resume_from_checkpoint}) continues one: pass one of them, not both")
    previous = _previous_run(output_dir)
    shown = ", ".join(previous if len(previous) <= 4 else [*previous[:2], "...", *previous[-2:]])
    if resume_from_checkpoint is not None:
        if previous and not _inside(Path(resume_from_checkpoint), folder):
            raise ValueError(f"output_dir {output_dir} holds another run ({shown}), and resume_from_checkpoint "
                             f"{resume_from_checkpoint} is a checkpoint of another folder: the two runs would mix; "
                             "resume into an empty output_dir, or from a checkpoint of this one")
        return
    if not previous:
        return
    if not overwrite:
        raise ValueError(f"output_dir {output_dir} holds another run ({shown}): pass --overwrite_output_dir true to "
                         "replace it, --resume_from_checkpoint true to continue it, or choose another output_dir")
    doomed = run_outputs(output_dir)
    named = keep.items() if isinstance(keep, Mapping) else ((None, p) for p in keep)
    for label, kept in ((label, Path(p).expanduser()) for label, p in named if p):
        hit = next((d for d in doomed if kept.exists() and (_inside(kept, d) or _inside(d, kept))), None)
        if hit is not None:
            what = f"{label} {kept}" if label else str(kept)
            part = "" if _inside(kept, hit) else f" (it deletes {hit})"
            raise ValueError(f"overwrite_output_dir: true would delete {what}{part}, which this run reads (the "
                             f"previous run's output in {output_dir}); copy it elsewhere first, or choose another "
                             "output_dir")
    if _main_process(writer):  # one process per folder deletes (all of them check before anything is written)
        import shutil

        for path in doomed:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def set_aside_later_line(resume_from_checkpoint: str | None, output_dir: str, keep: Sequence[str | None] = (),
                         writer: bool | None = None, from_start: bool = False) -> tuple[Path | None, list[str]]:
    """Before resuming from ``checkpoint-N`` of ``output_dir``, move the later line aside into
    ``output_dir/_abandoned/after-checkpoint-N`` (``-2``, ``-3``, ... when taken): the ``checkpoint-M`` folders with
    M > N, the completion logs of steps after N, and a final model, trainer state and marker of a later step (files
    of ``keep``, which this run reads, stay). So ``--resume_from_checkpoint true`` and Ctrl-C's message never point
    at the abandoned line, and a later final model is not "already finished". ``from_start`` (``true`` found no
    usable checkpoint, `check_resume`): the whole earlier line goes, into ``_abandoned/after-step-0``, and the run
    starts again. Moved by the process that writes ``output_dir`` (`_main_process`; ``writer``: the run's
    ``should_save``).

    Returns:
        ``(folder moved into or None, names of what was moved, relative to output_dir)``.
    """
    folder = Path(output_dir)
    if from_start:
        step = 0
        if not folder.is_dir():
            return None, []
    else:
        if resume_from_checkpoint is None or not _inside(Path(resume_from_checkpoint), folder):
            return None, []
        step = _state(Path(resume_from_checkpoint)).get("global_step")
        if not isinstance(step, int):
            return None, []
    moving = [p for p in _checkpoint_folders(folder) if _step_of(p) > step]
    moving += [p for p in sorted((folder / "completions").glob("completions_*.parquet"))
               if p.stem.split("_")[-1].isdigit() and int(p.stem.split("_")[-1]) > step]
    try:
        final_step = json.loads((folder / FINAL_MARK).read_text(encoding="utf-8")).get("global_step")
    except (OSError, ValueError, AttributeError):
        final_step = _state(folder).get("global_step")
    if from_start or isinstance(final_step, int) and final_step > step:  # a final model of the later line: its
        kept = [Path(p) for p in keep if p]  # files, but the model files this run reads (model_name_or_path: output_dir)
        moving += [p for p in run_outputs(output_dir) if p.is_file() and p.parent.resolve() == folder.resolve()
                   and not (p.name not in _RUN_FILES and any(_inside(p, k) for k in kept))]
    if not moving:
        return None, []
    base = folder / ABANDONED / (f"after-checkpoint-{step}" if not from_start else "after-step-0")
    target, n = base, 1
    while target.exists():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    names = [str(p.relative_to(folder)) for p in moving]
    if _main_process(writer):
        for path, name in zip(moving, names):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target / name)
    return target, names


def last_checkpoint(output_dir: str, resumed_from: str | None = None) -> str | None:
    """The checkpoint to resume from after an interruption: the latest usable ``checkpoint-N`` of ``output_dir``
    (`checkpoint_problem`: a checkpoint interrupted while it was written is skipped; the later line of a resume was
    moved aside, `set_aside_later_line`), else the checkpoint this run resumed from, else None."""
    usable = _latest_usable(output_dir)
    return str(usable) if usable is not None else resumed_from


def optimizer_restart_note(resume_from_checkpoint: str | None) -> str | None:
    """A line saying that resuming from this checkpoint restarts the optimizer and learning-rate schedule (it has no
    ``optimizer.pt``: saved with ``save_only_model: true``), or None."""
    if resume_from_checkpoint is None:
        return None
    folder = Path(resume_from_checkpoint)
    if any((folder / name).exists() for name in ("optimizer.pt", "optimizer.bin")) or any(folder.glob("global_step*")):
        return None
    return (f"{folder} holds no optimizer state (saved with save_only_model: true): training resumes from its "
            "weights, but the optimizer (Adam moments) and the learning-rate schedule start again from scratch")


def unwritable(exc: BaseException) -> str | None:
    """The first line of the error in ``exc``'s chain that says a file could not be written for want of permission
    (a folder turned read-only, a read-only file system: ``EACCES``, ``EPERM``, ``EROFS``, or torch's and
    safetensors' wording of it), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if (isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)) or any(
                mark in text for mark in ("Permission denied", "PermissionDenied", "Read-only file system")):
            return (text.strip().splitlines() or [type(exc).__name__])[0][:200]
        exc = exc.__cause__ or exc.__context__
    return None


# ------------------------------------------------------------------------------------------ the folder's lock


#: Folders this process holds: resolved path -> [lock, whether the claim created the folder, claims].
_HELD: dict[str, list] = {}


def _launch() -> str | None:
    """This process's multi-process launch, as its rendezvous address (``MASTER_ADDR:MASTER_PORT``, set by torchrun
    and accelerate on every rank of every node), or None outside one. Two launches alive at once never share it."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    return f"{addr}:{port}" if addr and port else None


def _lock_record(lock_path: Path) -> dict:
    try:
        record = json.loads(lock_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _holder(lock_path: Path) -> str:
    record = _lock_record(lock_path)
    if not isinstance(record.get("pid"), int):
        return "another process"
    import socket

    host = record.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    since = f", since {record['started']}" if record.get("started") else ""
    return f"pid {record['pid']}{where}{since}"


def claim_run_folder(output_dir: str, main_process: bool | None = None) -> None:
    """Hold ``output_dir`` for this run (created when missing): an OS lock on `LOCK_FILE`, which the operating system
    releases when the process ends (a crash or a kill leaves nothing stuck), holding this process's pid, host and
    start time, and the launch and node it belongs to (``MASTER_ADDR:MASTER_PORT``, ``GROUP_RANK``). Only the
    process that writes the folder holds it (``main_process``: the run's ``args.should_save``, so with
    ``save_on_each_node`` the first process of every node holds its node's folder; None: ``RANK`` 0); the others
    return at once. A second claim by the same process counts up (`release_run_folder` counts down).

    Raises:
        ValueError: another process holds the folder (named by its pid when known; when it is another node of the
            same launch, the message says that ``save_on_each_node`` needs a folder of each node's own); the folder
            cannot be created or written.
    """
    if not (_main_process() if main_process is None else main_process):
        return
    folder = Path(output_dir)
    key = str(folder.resolve())
    if key in _HELD:
        _HELD[key][2] += 1
        return
    from filelock import FileLock, Timeout

    created = not folder.exists()
    lock_path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(lock_path), timeout=0)
        lock.acquire()
    except Timeout:
        record = _lock_record(lock_path)
        if _launch() is not None and record.get("launch") == _launch():
            raise ValueError(f"output_dir {output_dir} is held by node {record.get('node', '?')} of this same run "
                             f"({_holder(lock_path)}): save_on_each_node: true makes each node save into its own "
                             "output_dir, so it needs storage of each node's own; on storage the nodes share, set "
                             "save_on_each_node: false (the first process saves for all)") from None
        raise ValueError(f"output_dir {output_dir} is in use by another run ({_holder(lock_path)}), which holds "
                         f"{lock_path}: wait for it to end, or choose another output_dir") from None
    except OSError as exc:
        raise ValueError(f"output_dir {output_dir} cannot be written ({one_line(exc)}): make it writable, or choose "
                         "another output_dir") from None
    import socket
    from datetime import datetime, timezone

    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    with open(lock_path, "w", encoding="utf-8") as handle:  # the same inode the lock is on: a record, not the lock
        json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started": started, "launch": _launch(),
                   "node": os.environ.get("GROUP_RANK")}, handle)
    _HELD[key] = [lock, created, 1]


def release_run_folder(output_dir: str | None = None) -> None:
    """Release this process's claim on ``output_dir`` (every folder it holds when None). A folder the claim created
    that holds no file but the lock (a run refused before writing anything) is removed again."""
    keys = list(_HELD) if output_dir is None else [str(Path(output_dir).resolve())]
    for key in keys:
        held = _HELD.get(key)
        if held is None:
            continue
        held[2] = 0 if output_dir is None else held[2] - 1
        if held[2] > 0:
            continue
        lock, created, _ = _HELD.pop(key)
        folder = Path(key)
        try:
            if created and [p.name for p in folder.rglob("*") if not p.is_dir()] == [LOCK_FILE]:
                import shutil

                shutil.rmtree(folder)  # the lock and empty folders (the Trainer's, TRL's completions/) only
        except OSError:
            pass
        finally:
            lock.release()


@contextmanager
def holding_run_folder(output_dir: str, main_process: bool | None = None) -> Iterator[None]:
    """`claim_run_folder` for the body of a ``with``, released after it however it ends."""
    claim_run_folder(output_dir, main_process)
    try:
        yield
    finally:
        if (_main_process() if main_process is None else main_process):
            release_run_folder(output_dir)


def _trainer_lora(model: Any) -> dict[str, Any] | None:
    """The LoRA settings of a PEFT model's active adapter (``r``, ``lora_alpha``, ``target_modules``), or None."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, Mapping) or not configs:
        return None
    config = configs.get("default", next(iter(configs.values())))
    from .models.adapter_base import trained_base

    return {**{name: getattr(config, name, None) for name in ("r", "lora_alpha", "target_modules")},
            "base": trained_base(model)}


@contextmanager
def training_run(trainer: Any, resume_from_checkpoint: str | bool | None) -> Iterator[str | None]:
    """The body of `HiRTrainer.train`: hold ``trainer.args.output_dir`` (`holding_run_folder`, on the process that
    writes it: ``args.should_save``)
    and yield the checkpoint to resume from, resolved (`check_resume`: ``True`` is the latest complete one) and
    checked against the trainer (`check_resume_point`, with the model's LoRA settings), or None.

    Raises:
        ValueError: ``output_dir`` is the model trained from or holds another model (`output_model_problem`), the
            folder is held by another run, or the checkpoint does not fit (see those functions).
    """
    output_dir = trainer.args.output_dir
    model = getattr(trainer.model, "get_base_model", lambda: trainer.model)()
    problem = output_model_problem(output_dir, getattr(model, "name_or_path", None) or None)
    if problem is not None:  # before the folder is held (its lock file is a run's mark)
        raise ValueError(problem)
    with holding_run_folder(output_dir, trainer.args.should_save):
        checkpoint = check_resume(resume_from_checkpoint, output_dir)
        check_resume_point(checkpoint, trainer.args, _trainer_lora(trainer.model))
        yield checkpoint


# ------------------------------------------------------------------------------------------ uploads to the Hub


def hub_upload_note(args: Any) -> str | None:
    """One line when an upload (``push_to_hub``) will carry the completion logs (``log_completions``, kept in
    ``output_dir/completions/``), or leave them out (``push_completions: false``); None without both.

    Args:
        args: the run's `hir_trl.HiRConfig` (``push_to_hub``, ``log_completions``, ``push_completions``,
            ``output_dir``).
    """
    if not (args.push_to_hub and args.log_completions):
        return None
    if getattr(args, "push_completions", True):
        return (f"push_to_hub uploads the completion logs ({args.output_dir}/completions/: every prompt and "
                "completion of training) with the model; pass --push_completions false to leave them out")
    return f"push_to_hub leaves the completion logs ({args.output_dir}/completions/) out of every upload"


def warn_hub_upload(args: Any, main_process: bool) -> str | None:
    """Log `hub_upload_note` as a warning (``hir-trl: <note>``) on the main process. Returns the note, or None."""
    note = hub_upload_note(args)
    if note is not None and main_process:
        logger.warning("hir-trl: %s", note)
    return note


@contextmanager
def hub_upload(args: Any) -> Iterator[None]:
    """Within this context, transformers' uploads of ``output_dir`` (`transformers.Trainer.push_to_hub` and
    `transformers.Trainer._push_from_checkpoint`, which call ``transformers.trainer.hf_api().upload_folder`` with
    ``ignore_patterns=["_*", "checkpoint-*"]``) also leave out `COMPLETIONS_PATTERNS` when ``push_completions`` is
    off (and ``log_completions`` on); otherwise nothing changes. The patterns are bound when ``upload_folder`` is
    called, so an upload that runs on afterwards in the background (``hub_strategy: every_save``) keeps them.

    Args:
        args: the run's `hir_trl.HiRConfig` (``push_completions``, ``log_completions``).
    """
    if getattr(args, "push_completions", True) or not args.log_completions:
        yield
        return
    import transformers.trainer as trainer_module

    original = trainer_module.hf_api

    class LeavingOut:
        def __init__(self, api: Any) -> None:
            self.api = api

        def __getattr__(self, name: str) -> Any:
            return getattr(self.api, name)

        def upload_folder(self, *args: Any, ignore_patterns: Any = None, **kwargs: Any) -> Any:
            patterns = [ignore_patterns] if isinstance(ignore_patterns, str) else list(ignore_patterns or [])
            return self.api.upload_folder(*args, ignore_patterns=[*patterns, *COMPLETIONS_PATTERNS], **kwargs)

    trainer_module.hf_api = lambda *args, **kwargs: LeavingOut(original(*args, **kwargs))
    try:
        yield
    finally:
        trainer_module.hf_api = original


__all__ = ["ABANDONED", "COMPLETIONS_PATTERNS", "FINAL_MARK", "LOCK_FILE", "RESUME_SETTINGS", "AlreadyFinished",
           "check_finished", "check_output_dir", "check_resume", "check_resume_point", "checkpoint_file_problem",
           "claim_run_folder", "complete_final_save", "final_model", "holding_run_folder", "hub_upload",
           "hub_upload_note", "last_checkpoint", "mark_final_save", "model_files", "output_model_problem",
           "optimizer_restart_note", "paths_read", "release_run_folder", "resume_settings", "run_outputs",
           "set_aside_later_line", "start_final_save", "training_run", "unwritable", "warn_hub_upload"]
