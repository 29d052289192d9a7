"""The one verifier protocol (`hir_trl.verifiers.family`): every family answers the same calls.

Every registered family exposes the same record fields and the record's ``build_checker`` / ``check`` /
``check_loose``; for every instruction id of every family, with a minimal valid ``kwargs``, the shared strict
and loose checks (direct and through `verify_constraint`) give a verdict without an error, loose never fails
where strict passes, and MulDimIF's loose verdict is its strict one.
"""

from __future__ import annotations

import dataclasses

import pytest

from hir_trl.verifiers import FAMILIES, VerifierFamily, ifbench, ifeval, iftrain, muldimif, verify_constraint
from hir_trl.verifiers.base import Checker
from hir_trl.verifiers.family import loose_variants, strict_only

from .utils import IFEVAL_EXAMPLE_KWARGS, IFTRAIN_EXAMPLE_KWARGS, ifbench_example_kwargs

#: One requirement that parses, per MulDimIF checker class (every id of the class shares it).
MULDIMIF_REQUIREMENTS = {
    muldimif.KeywordsChecker: "The response must include the keyword 'ocean'.",
    muldimif.EnglishCaseChecker: "The response must be written in all uppercase letters.",
    muldimif.WordCountChecker: "The response must contain no more than 150 words.",
    muldimif.SentenceCountChecker: "The response must contain at least 2 sentences.",
    muldimif.ParagraphCountChecker: "The response must have at most 5 paragraphs.",
    muldimif.EndingPunctuationChecker: "The response must end with a period.",
    muldimif.TableChecker: "Any table included must not exceed three columns.",
    muldimif.MarkdownChecker: "The answer must include a level 2 heading.",
    muldimif.JsonChecker: "Object nesting levels must not exceed 3",
    muldimif.XmlAttributesChecker: "Each XML element must have no more than three attributes",
    muldimif.ChineseChecker: "The answer must be provided in Simplified Chinese",
    muldimif.IdentifierChecker: "The answer must start with the identifier 'Answer:'",
    muldimif.PlainTextChecker: "No bullet points",
    muldimif.BlurbChecker: "the response should be concise, resembling a short blurb",
}

RESPONSES = [
    "The ocean is wide and deep. Many fish live there, and ships cross it every day.\n"
    "Sailors have told stories about it for centuries.\nIt covers most of the planet.",
    "**Answer:** yes.\n* one point here\n* another point here",
]


def _muldimif_kwargs(instruction_id: str) -> dict:
    cls = muldimif.REGISTRY[instruction_id]
    base = next(base for base in MULDIMIF_REQUIREMENTS if issubclass(cls, base))
    return {"requirement": MULDIMIF_REQUIREMENTS[base]}


def _kwargs(family: str, instruction_id: str) -> dict:
    if family == "muldimif":
        return _muldimif_kwargs(instruction_id)
    if family == "ifeval":
        return IFEVAL_EXAMPLE_KWARGS[instruction_id]
    if instruction_id in iftrain.REGISTRY:
        return IFTRAIN_EXAMPLE_KWARGS[instruction_id]
    return ifbench_example_kwargs()[instruction_id]


CONSTRAINTS = [(family, instruction_id) for family in FAMILIES for instruction_id in FAMILIES[family].REGISTRY]


def test_every_family_exposes_the_same_record_and_calls():
    assert set(FAMILIES) == {"ifeval", "ifbench", "muldimif"}
    fields = [field.name for field in dataclasses.fields(VerifierFamily)]
    for name, module in FAMILIES.items():
        record = module.VERIFIER
        assert isinstance(record, VerifierFamily)
        assert record.name == name == module.FAMILY
        assert record.registry is module.REGISTRY
        assert all(getattr(record, field) is not None for field in fields)
        assert record.readings[0] == "official"
        for call in ("build_checker", "check", "check_loose"):
            bound = getattr(module, call)
            assert bound.__self__ is record and bound.__func__ is getattr(VerifierFamily, call)
        for instruction_id, cls in record.registry.items():
            assert issubclass(cls, Checker) and cls.instruction_id == instruction_id
    assert ifeval.VERIFIER.loose_variants is loose_variants is ifbench.VERIFIER.loose_variants
    assert muldimif.VERIFIER.loose_variants is strict_only
    assert ifbench.VERIFIER.readings == ifbench.READINGS


def test_every_id_has_a_minimal_kwargs_here():
    assert len(CONSTRAINTS) == 25 + 29 + 58 + 36
    for family, instruction_id in CONSTRAINTS:
        checker = FAMILIES[family].build_checker(instruction_id, _kwargs(family, instruction_id), prompt="Prompt.")
        assert type(checker) is FAMILIES[family].REGISTRY[instruction_id]
        assert checker.reading == "official"


@pytest.mark.parametrize(("family", "instruction_id"), CONSTRAINTS, ids=[f"{f}/{i}" for f, i in CONSTRAINTS])
def test_every_family_answers_strict_and_loose_for_every_id(family, instruction_id):
    kwargs = _kwargs(family, instruction_id)
    record = FAMILIES[family].VERIFIER
    for response in RESPONSES:
        strict = verify_constraint(family, instruction_id, kwargs, response, "Prompt.")
        loose = verify_constraint(family, instruction_id, kwargs, response, "Prompt.", loose=True)
        assert strict.error is None and loose.error is None, (strict.error, loose.error)
        assert strict.passed == record.check(instruction_id, kwargs, response, "Prompt.")
        assert loose.passed == record.check_loose(instruction_id, kwargs, response, "Prompt.")
        assert loose.passed or not strict.passed  # the response itself is the first loose variant
        if family == "muldimif":
            assert loose.passed == strict.passed
        assert not record.check(instruction_id, kwargs, "  \n ", "Prompt.")
        assert not record.check_loose(instruction_id, kwargs, "", "Prompt.")


def test_shared_errors_are_the_same_for_every_family():
    for name, module in FAMILIES.items():
        any_id = next(iter(module.REGISTRY))
        with pytest.raises(KeyError, match="unknown .* instruction id 'no:such_id'"):
            module.check("no:such_id", {}, "text")
        with pytest.raises(KeyError, match="no:such_id"):
            module.check_loose("no:such_id", {}, "text")
        with pytest.raises(ValueError, match="reading must be one of"):
            module.check(any_id, _kwargs(name, any_id), "text", reading="nope")
        with pytest.raises(TypeError, match="response must be a string"):
            module.check_loose(any_id, _kwargs(name, any_id), None)
        verdict = verify_constraint(name, "no:such_id", {}, "text", loose=True)
        assert not verdict.passed and verdict.error.startswith("KeyError")


def test_muldimif_loose_equals_strict_where_ifeval_loose_differs():
    # IFEval's loose variants drop the first line, so a comma there is excused.
    response = "Header, with comma\nBody without one"
    assert ifeval.check("punctuation:no_comma", {}, response) is False
    assert ifeval.check_loose("punctuation:no_comma", {}, response) is True
    # MulDimIF has no loose mode: dropping the long first line would pass, yet loose fails as strict does.
    response = " ".join(["word"] * 15) + "\nfive short words right here"
    requirement = {"requirement": "The response must contain no more than 10 words."}
    assert muldimif.check("Length_Words", requirement, "\n".join(response.split("\n")[1:])) is True
    assert muldimif.check("Length_Words", requirement, response) is False
    assert muldimif.check_loose("Length_Words", requirement, response) is False
