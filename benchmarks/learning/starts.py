"""Stored starting checkpoints of the synthetic task, kept by content instead of rebuilt on each machine.

The task's SFT checkpoint (``benchmarks/learning/task.py``) is not bit-reproducible across CPU vendors: torch's BLAS
(MKL) takes other kernels on an Intel Xeon than on an AMD EPYC, so the same ``TaskConfig`` rebuilds into another
model there, and runs from it pair with no record of the registered rounds. A stored start fixes the weights: the
task cache (``task-<key>/``: ``model/``, the prompt files, ``meta.json``) is packed into one deterministic
``.tar.gz`` named by its own sha256 (``starts/<sha256>.tar.gz``), and ``starts/registry.json`` maps the task key to
that archive, the sha256 of every file in it and the SFT loss the records name.

- ``task.ensure_sft_model`` unpacks a stored start (checked file by file against the registry) before it would
  rebuild, so every machine that reads this checkout starts from the same bytes.
- ``python -m benchmarks.learning.rounds start-check FOLDER --rebuild`` rebuilds the task here too and reports
  whether the rebuild equals the stored start (file by file) or names the files that differ.
- ``python -m benchmarks.learning.rounds store-start FOLDER`` stores this machine's task cache, once it is the
  checkpoint every record in FOLDER starts from.

No torch import: plain files and hashes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

STARTS_DIR = Path(__file__).resolve().parent / "starts"
REGISTRY_NAME = "registry.json"
#: Files of a task cache that are not part of the checkpoint's identity: ``meta.json`` holds wall times that differ
#: on every build (it is stored, and its SFT loss is checked separately).
NOT_IDENTITY = frozenset({"meta.json"})


class StoredStartError(RuntimeError):
    """A stored start that cannot be used: its archive is missing, or its bytes are not the registered ones."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest(folder: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under a task cache ``folder`` that makes the checkpoint's identity
    (every file but ``meta.json``; paths with ``/``, sorted)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {p.relative_to(folder).as_posix(): _sha256(p) for p in files
            if p.relative_to(folder).as_posix() not in NOT_IDENTITY}


def fingerprint(files: dict[str, str]) -> str:
    """One sha256 over a manifest (its sorted ``path sha256`` lines): the checkpoint's content id."""
    return hashlib.sha256("".join(f"{k} {files[k]}\n" for k in sorted(files)).encode()).hexdigest()


def differences(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """One line per file whose content differs, or that only one side has; empty when the manifests are equal."""
    lines = []
    for name in sorted(set(expected) | set(actual)):
        if name not in actual:
            lines.append(f"{name}: missing (stored sha256 {expected[name][:12]})")
        elif name not in expected:
            lines.append(f"{name}: not in the stored start (sha256 {actual[name][:12]})")
        elif expected[name] != actual[name]:
            lines.append(f"{name}: sha256 {actual[name][:12]}, stored {expected[name][:12]}")
    return lines


def read_registry(starts_dir: Path | None = None) -> dict[str, Any]:
    path = (starts_dir or STARTS_DIR) / REGISTRY_NAME
    return json.loads(path.read_text()) if path.is_file() else {}


def stored_entry(key: str, starts_dir: Path | None = None) -> dict[str, Any] | None:
    """The registry entry of task ``key`` (``TaskConfig.key()``), or None when no start of it is stored."""
    return read_registry(starts_dir).get(key)


def _archive_bytes(folder: Path) -> bytes:
    """A deterministic .tar.gz of ``folder``'s files: sorted names, no owners, times or modes of this machine."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                info = tarfile.TarInfo(path.relative_to(folder).as_posix())
                info.size, info.mtime, info.mode = path.stat().st_size, 0, 0o644
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return buffer.getvalue()


def store(folder: Path, key: str, sft_final_loss: float | None, starts_dir: Path | None = None,
          machine: str | None = None) -> dict[str, Any]:
    """Pack the task cache ``folder`` as ``<starts_dir>/<sha256>.tar.gz`` and register it under ``key``.

    Returns the registry entry: ``archive`` (file name), ``sha256`` (of the archive), ``fingerprint`` (of the
    manifest), ``files`` (the manifest), ``sft_final_loss`` and ``machine`` (where it was built).
    """
    starts_dir = starts_dir or STARTS_DIR
    starts_dir.mkdir(parents=True, exist_ok=True)
    blob = _archive_bytes(folder)
    sha = hashlib.sha256(blob).hexdigest()
    archive = starts_dir / f"{sha}.tar.gz"
    if not archive.is_file():
        archive.write_bytes(blob)
    files = manifest(folder)
    entry = {"archive": archive.name, "sha256": sha, "bytes": len(blob), "fingerprint": fingerprint(files),
             "files": files, "sft_final_loss": sft_final_loss, "machine": machine}
    registry = read_registry(starts_dir)
    registry[key] = entry
    (starts_dir / REGISTRY_NAME).write_text(json.dumps(registry, indent=2, sort_keys=True) + "\n")
    return entry


def restore(key: str, out: Path, starts_dir: Path | None = None) -> dict[str, Any] | None:
    """Unpack the stored start of ``key`` into ``out`` (absent, or a build that did not finish) and check it; None
    when none is stored.

    The archive's sha256 and every unpacked file's sha256 must equal the registry's; the files appear in ``out``
    only once they do (unpacked beside it, then renamed).

    Raises:
        StoredStartError: the archive is missing, or its bytes or files are not the registered ones.
    """
    starts_dir = starts_dir or STARTS_DIR
    entry = stored_entry(key, starts_dir)
    if entry is None:
        return None
    archive = starts_dir / entry["archive"]
    if not archive.is_file():
        raise StoredStartError(f"{archive}: the stored start of task-{key} is registered but its archive is missing")
    if _sha256(archive) != entry["sha256"]:
        raise StoredStartError(f"{archive}: sha256 {_sha256(archive)[:12]}, registered {entry['sha256'][:12]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        lines = differences(entry["files"], manifest(staging))
        if lines:
            raise StoredStartError(f"{archive}: unpacked files differ from the registry: " + "; ".join(lines))
        if out.exists():
            shutil.rmtree(out)  # a build that did not finish (no meta.json): its files are replaced
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entry
