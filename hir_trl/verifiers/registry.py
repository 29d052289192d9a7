"""Your own hard constraints: `register_verifier` adds a checker function to a verifier family of your own.

A registered ``(family, instruction_id)`` is a rule verifier like the built-in ones: rows name it as
``{"family": ..., "instruction_id": ..., "kwargs": {...}, "text": ...}`` (`hir_trl.data`'s native format), data
loading validates its ``kwargs`` against the function's signature, `hir_trl.verifiers.verify_constraint` checks it
(a checker that raises or returns something other than a bool gives a recorded failed `Verdict` whose ``error``
holds the reason), training rewards it, a replay's q' keeps it when the completion met it, ``hir-trl synth``
samples it when it has a description, and ``hir-trl eval`` scores it (strict, and loose when ``check_loose`` is
given). Nothing else names the family: `register_verifier` adds it to `hir_trl.verifiers.FAMILIES`, the one list
every part of hir-trl reads.

Example::

    from hir_trl import register_verifier

    @register_verifier("acme", "max_lines", description="Answer in at most {n} lines.")
    def max_lines(response: str, n: int) -> bool:
        return len(response.strip().splitlines()) <= n

``recipe.yaml`` / the command line reach such a module with ``verifier_modules: [my_pkg.constraints]``
(`import_verifier_modules`).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import io
import logging
import os
import re
import sys
import types
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from pathlib import Path
from typing import Any, ClassVar

from .base import Checker
from .family import VerifierFamily, strict_only

#: Family name -> family module (each has ``FAMILY``, ``REGISTRY``, ``VERIFIER`` and ``VERIFIER``'s ``build_checker``,
#: ``check`` and ``check_loose``): the built-in families (added by `hir_trl.verifiers` on import), then those
#: `register_verifier` created. The one list of families that data loading, training, ``hir-trl synth`` and
#: ``hir-trl eval`` read.
FAMILIES: dict[str, types.ModuleType] = {}
#: The names of the built-in families.
BUILTIN_FAMILIES: tuple[str, ...] = ("ifeval", "ifbench", "muldimif")

#: A checker function: ``check(response, **kwargs) -> bool`` (plus ``prompt=`` when it accepts that argument).
CheckFunction = Callable[..., bool]

logger = logging.getLogger(__name__)

_BAD_NAME = re.compile(r"[:\s]")
_BAD_ID = re.compile(r"\s|^:|:$")

#: ``(family, instruction_id)`` -> ``[number of failed calls, the first failure]`` of registered checkers that
#: raised or returned something other than a bool in this process (`checker_failures`).
_FAILURES: dict[tuple[str, str], list[Any]] = {}


class RegisteredChecker(Checker):
    """Base of the `Checker` classes `register_verifier` builds around a checker function.

    The constructor validates the constraint's ``kwargs`` against ``check``'s signature (a missing or unexpected
    argument raises TypeError naming it, which data loading reports with the row); `check_following` calls
    ``check(response, **kwargs)`` (and ``prompt=`` when ``check`` accepts it) and raises TypeError when the result
    is not a bool (``numpy.bool_`` counts as one); a failure is logged once per id and counted for the run summary
    (`checker_failures`); `build_description` formats or calls ``description``.
    """

    family: ClassVar[str]
    check: ClassVar[CheckFunction]
    loose: ClassVar[CheckFunction | None] = None
    description: ClassVar[str | Callable[..., str] | None] = None
    sample_kwargs: ClassVar[Callable[..., dict[str, Any]] | None] = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for function in (type(self).check, type(self).loose):
            if function is not None:
                _call_arguments(function, self.instruction_id, kwargs, "", None)

    def build_description(self) -> str:
        """The constraint text for these kwargs: ``description.format(**kwargs)`` for a string,
        ``description(**kwargs)`` for a callable.

        Raises:
            NotImplementedError: the verifier was registered without ``description``.
        """
        description = type(self).description
        if description is None:
            raise NotImplementedError(f"{self.family}/{self.instruction_id} has no description builder "
                                      "(register_verifier(..., description=...))")
        text = description.format(**self.kwargs) if isinstance(description, str) else description(**self.kwargs)
        if not isinstance(text, str):
            raise TypeError(f"{self.family}/{self.instruction_id}: description returned "
                            f"{type(text).__name__}, not a string")
        return text

    def check_following(self, response: str, prompt: str | None = None) -> bool:
        return self._run(type(self).check, response, prompt)

    def check_following_loose(self, response: str, prompt: str | None = None) -> bool:
        """The loose verdict: ``check_loose`` when it was registered, else the strict one."""
        return self._run(type(self).loose or type(self).check, response, prompt)

    def _run(self, function: CheckFunction, response: str, prompt: str | None) -> bool:
        args, kwargs = _call_arguments(function, self.instruction_id, self.kwargs, response, prompt)
        try:
            result = function(*args, **kwargs)
            if _is_numpy_bool(result):  # np.all(...), array comparisons: a bool as numpy spells it
                result = bool(result)
            if not isinstance(result, bool):
                raise TypeError(f"{self.family}/{self.instruction_id}: the checker returned {type(result).__name__} "
                                f"{_short(result)}, not a bool")
        except Exception as exc:
            _record_failure(self.family, self.instruction_id, exc)
            raise
        return result


def _is_numpy_bool(value: Any) -> bool:
    numpy = sys.modules.get("numpy")  # a numpy result implies numpy is imported
    return numpy is not None and isinstance(value, numpy.bool_)


def _record_failure(family: str, instruction_id: str, exc: BaseException) -> None:
    """Count a failed call of a registered checker; warn on the first one of each ``(family, instruction_id)``."""
    entry = _FAILURES.setdefault((family, instruction_id), [0, f"{type(exc).__name__}: {exc}"])
    entry[0] += 1
    if entry[0] == 1:
        logger.warning("verifier %s/%s failed (%s); each such verdict counts as a failed constraint (verify/errors); "
                       "further failures of it are counted, not shown, and named in the run summary", family,
                       instruction_id, _short(entry[1], 200))


def checker_failures() -> dict[tuple[str, str], tuple[int, str]]:
    """``(family, instruction_id)`` -> ``(failed calls, first failure)`` of the registered checkers that raised or
    returned no bool in this process, for the run summary."""
    return {key: (count, first) for key, (count, first) in _FAILURES.items()}


def _short(value: Any, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _accepts_prompt(function: CheckFunction) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature: call it with the kwargs only
        return False
    return "prompt" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _call_arguments(function: CheckFunction, instruction_id: str, kwargs: dict[str, Any], response: str,
                    prompt: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` of one call of a checker function, checked against its signature.

    Raises:
        TypeError: a kwarg the function does not take, or one it needs that is missing (named).
    """
    call = dict(kwargs)
    if "prompt" in call:
        raise TypeError(f"{instruction_id}: 'prompt' is reserved (the instruction text is passed as prompt=)")
    if _accepts_prompt(function):
        call["prompt"] = prompt
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return (response,), call
    try:
        signature.bind(response, **call)
    except TypeError as exc:
        raise TypeError(f"{instruction_id}: {exc}") from None
    return (response,), call


def _check_name(what: str, name: Any, builtin: bool = False) -> None:
    """Refuse an empty name, or one with whitespace or a colon: an id of a built-in family may hold a colon
    inside (IFEval's and IFBench's ids are ``group:name``), so that ``replace=True`` can register over it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    if builtin:
        if _BAD_ID.search(name):
            raise ValueError(f"{what} {name!r} must not contain whitespace, nor start or end with a colon")
    elif _BAD_NAME.search(name):
        raise ValueError(f"{what} {name!r} must not contain a colon or whitespace"
                         + (" (a colon is fine only in an id of a built-in family: ifeval, ifbench, muldimif)"
                            if what == "instruction_id" else ""))


def _family_module(family: str) -> types.ModuleType:
    """A family module of the built-ins' shape (``FAMILY``, ``REGISTRY``, ``VERIFIER`` and its three methods)."""
    module = types.ModuleType(f"hir_trl.verifiers.registered.{family}",
                              f"Verifier family {family!r}, registered with hir_trl.register_verifier.")
    module.FAMILY = family
    module.REGISTRY = {}
    module.VERIFIER = VerifierFamily(name=family, label=family, registry=module.REGISTRY,
                                     loose_variants=strict_only)
    module.build_checker = module.VERIFIER.build_checker
    module.check = module.VERIFIER.check
    module.check_loose = module.VERIFIER.check_loose
    return module


def register_verifier(family: str, instruction_id: str, check: CheckFunction | None = None, *,
                      description: str | Callable[..., str] | None = None,
                      check_loose: CheckFunction | None = None,
                      sample_kwargs: Callable[..., dict[str, Any]] | None = None, replace: bool = False):
    """Register ``check`` as the rule verifier of ``(family, instruction_id)``; usable as a decorator.

    ``check(response: str, **kwargs) -> bool`` gets the row's constraint ``kwargs`` as keyword arguments, plus
    ``prompt=`` (the instruction text, the final user turn; q' for a replay) when it accepts that argument. As for
    every family, an all-whitespace response fails without calling it.

    Args:
        family: the family name rows give (``"acme"``); a new family is created on first use.
        instruction_id: the id within the family (``"json_schema"``).
        check: the checker function; omit it to use ``register_verifier(...)`` as a decorator.
        description: builds the constraint text from the kwargs (what ``hir-trl synth`` writes): a string,
            formatted with ``str.format(**kwargs)``, or a function ``description(**kwargs) -> str``. Without one,
            ``hir-trl synth`` skips the id.
        check_loose: the loose verdict (``check``'s signature), scored by ``hir-trl eval``'s loose figures; without
            one, the loose verdict is the strict one.
        sample_kwargs: ``sample_kwargs(rng: random.Random, task: str) -> dict``, the kwargs ``hir-trl synth`` draws
            for this id; without it, synth uses the id only when ``check`` needs no kwargs.
        replace: allow registering over an id that exists (a built-in id, or one registered before).

    Returns:
        ``check`` (so that the decorator leaves the function as it is), or the decorator when ``check`` is None.

    Raises:
        ValueError: ``family`` or ``instruction_id`` is empty or holds whitespace or a colon (an id of a built-in
            family may hold one inside: IFEval's and IFBench's ids are ``"group:name"``); the id exists (built in,
            or registered before) and ``replace`` is False.
        TypeError: ``check``, ``check_loose``, ``sample_kwargs`` or ``description`` is not callable (a string for
            ``description``).
    """
    _check_name("family", family)
    _check_name("instruction_id", instruction_id, builtin=family in BUILTIN_FAMILIES)
    if check is None:
        return lambda function: register_verifier(family, instruction_id, function, description=description,
                                                  check_loose=check_loose, sample_kwargs=sample_kwargs,
                                                  replace=replace)
    for name, value in (("check", check), ("check_loose", check_loose), ("sample_kwargs", sample_kwargs)):
        if value is not None and not callable(value):
            raise TypeError(f"{name} must be a function, got {type(value).__name__}")
    if description is not None and not (isinstance(description, str) or callable(description)):
        raise TypeError(f"description must be a string or a function (**kwargs) -> str, got "
                        f"{type(description).__name__}")
    module = FAMILIES.get(family)
    registry: MutableMapping[str, type[Checker]] | None = None if module is None else module.REGISTRY
    if registry is not None and instruction_id in registry and not replace:
        where = "a built-in verifier" if family in BUILTIN_FAMILIES else "already registered"
        raise ValueError(f"{family}/{instruction_id} is {where}; pass replace=True to register over it")
    checker = type(f"Registered_{family}_{instruction_id}", (RegisteredChecker,), {
        "__doc__": getattr(check, "__doc__", None), "__module__": getattr(check, "__module__", __name__),
        "family": family, "instruction_id": instruction_id, "check": staticmethod(check),
        "loose": None if check_loose is None else staticmethod(check_loose), "description": description,
        "sample_kwargs": None if sample_kwargs is None else staticmethod(sample_kwargs),
    })
    if module is None:
        module = FAMILIES[family] = _family_module(family)
    module.REGISTRY[instruction_id] = checker
    return check


def own_loose_check(family: str | None, instruction_id: str | None) -> bool:
    """True when ``(family, instruction_id)`` was registered with a ``check_loose`` of its own."""
    module = FAMILIES.get(family) if family else None
    cls = None if module is None else module.REGISTRY.get(instruction_id)
    return isinstance(cls, type) and issubclass(cls, RegisteredChecker) and cls.loose is not None


def registered_id(name: str) -> tuple[str, str] | None:
    """``(family, instruction_id)`` for ``"family:instruction_id"`` naming an id of a registered family (how an
    IFEval-format benchmark row lists it in ``instruction_id_list``), else None."""
    family, _, instruction_id = name.partition(":")
    if family not in registered_families() or instruction_id not in FAMILIES[family].REGISTRY:
        return None
    return family, instruction_id


def registered_families() -> list[str]:
    """The families created with `register_verifier` (not the built-in ones), in registration order."""
    return [name for name in FAMILIES if name not in BUILTIN_FAMILIES]


class VerifierModuleError(ValueError):
    """A module named in ``verifier_modules`` cannot be imported; the message names it and says why."""


@contextlib.contextmanager
def _as_plain_import(name: str) -> Iterator[None]:
    """Import a verifier module as a plain ``import`` would see the process: ``sys.argv`` is ``[name]`` during the
    import (a module that parses the command line at import sees none of hir-trl's options, and cannot take
    them over), restored afterwards; what it prints is shown after the import, unless it exits (argparse's usage
    block then gives way to `import_verifier_modules`'s one-line error)."""
    argv, out, err = sys.argv, io.StringIO(), io.StringIO()
    sys.argv = [name]
    exited = False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield
    except SystemExit:  # argparse printed its usage block: the one-line error replaces it
        exited = True
        raise
    finally:
        sys.argv = argv
        if not exited:  # what the module printed while importing, shown as it would have been
            sys.stdout.write(out.getvalue())
            sys.stderr.write(err.getvalue())


def _import_one(name: str) -> types.ModuleType:
    if name.endswith(".py"):
        path = Path(name).expanduser().resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no file {path}")
        key = "hir_trl_verifier_module_" + re.sub(r"\W", "_", str(path))
        module = sys.modules.get(key)  # imported once per process, as a dotted name is
        if module is None:
            spec = importlib.util.spec_from_file_location(key, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[key] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[key]
                raise
        return module
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    finally:
        if added:
            sys.path.remove(os.getcwd())


def import_verifier_modules(names: Iterable[str] | str | None) -> list[types.ModuleType]:
    """Import the modules that register verifiers (``verifier_modules`` of a recipe, ``--verifier_modules``).

    Each name is a dotted module name (``my_pkg.constraints``), looked up on ``sys.path`` and in the current
    directory (as ``python -m`` would), or a path to a ``.py`` file. Importing runs its `register_verifier` calls.

    During the import ``sys.argv`` holds only the module's name, so a module that parses the command line at import
    cannot take over ``hir-trl``'s options.

    Raises:
        VerifierModuleError: (a `ValueError`) a module that cannot be imported, named, with the first line of the
            reason; or one that calls ``sys.exit`` at import (argparse does, on options it does not know).
    """
    if names is None:
        return []
    if isinstance(names, str):
        names = [names]
    modules = []
    for name in names:
        try:
            with _as_plain_import(name):
                module = _import_one(name)
        except SystemExit as exc:  # sys.exit() or argparse's parse_args() at import: not the end of the run
            raise VerifierModuleError(
                f"verifier_modules: importing {name!r} called sys.exit({exc.code!r}) (a script, or argparse parsing "
                "sys.argv at import?): a verifier module may only define and register verifiers at import; put its "
                "script code under `if __name__ == \"__main__\":`") from None
        except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported as one line
            reason = (str(exc).strip().splitlines() or [""])[0]
            raise VerifierModuleError(f"verifier_modules: cannot import {name!r}: {type(exc).__name__}: "
                                      f"{reason}") from exc
        modules.append(module)
    return modules


__all__ = [
    "CheckFunction",
    "RegisteredChecker",
    "checker_failures",
    "VerifierModuleError",
    "import_verifier_modules",
    "own_loose_check",
    "register_verifier",
    "registered_families",
    "registered_id",
]
