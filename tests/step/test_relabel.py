"""Achieved-goal relabelling of failed counted constraints in q' (``HiRConfig.hindsight_relabel="achieved"``)."""

from __future__ import annotations

import pytest

from hir_trl import HiRConfig
from hir_trl.data.templates import join_instruction
from hir_trl.step.replay import ReplayChoice, hindsight_constraints, rewrite, select_rewrite
from hir_trl.verifiers import FAMILIES, achieved_constraint, verify_constraint
from hir_trl.verifiers.base import CountedConstraint


def ifeval(instruction_id, **kwargs):
    checker = FAMILIES["ifeval"].VERIFIER.build_checker(instruction_id, kwargs)
    return {"text": checker.build_description(), "kind": "hard", "family": "ifeval",
            "instruction_id": instruction_id, "kwargs": kwargs}


WORDS_30 = " ".join(["word"] * 30)


@pytest.mark.parametrize(("constraint", "response", "achieved"), [
    (ifeval("length_constraints:number_words", relation="less than", num_words=12), WORDS_30, 31),
    (ifeval("length_constraints:number_words", relation="at least", num_words=40), WORDS_30, 30),
    (ifeval("length_constraints:number_sentences", relation="less than", num_sentences=2), "One. Two. Three.", 4),
    (ifeval("detectable_format:number_bullet_lists", num_bullets=4), "* a\n* b\n- c", 3),
    (ifeval("change_case:capital_word_frequency", capital_frequency=3, capital_relation="at least"),
     "It is SO TRULY fine.", 2),
    (ifeval("keywords:frequency", keyword="tea", frequency=3, relation="at least"), "tea and more tea", 2),
    (ifeval("keywords:letter_frequency", letter="z", let_frequency=1, let_relation="less than"), "zz top", 3),
    (ifeval("detectable_content:number_placeholders", num_placeholders=3), "Meet at [place].", 1),
    (ifeval("detectable_format:number_highlighted_sections", num_highlights=2), "A *bold* claim.", 1),
])
def test_a_failed_counted_constraint_is_relabelled_to_the_bound_the_response_achieved(constraint, response,
                                                                                        achieved):
    family, instruction_id = constraint["family"], constraint["instruction_id"]
    assert not verify_constraint(family, instruction_id, constraint["kwargs"], response).passed
    new = achieved_constraint(constraint, response)
    count_arg = FAMILIES["ifeval"].REGISTRY[instruction_id].count_arg
    assert new["kwargs"] == {**constraint["kwargs"], count_arg: achieved}  # only the bound changes
    assert verify_constraint(family, instruction_id, new["kwargs"], response).passed
    assert new["text"] == FAMILIES["ifeval"].VERIFIER.build_checker(instruction_id, new["kwargs"]).build_description()
    assert new["text"] != constraint["text"] and str(achieved) in new["text"]
    assert {k: v for k, v in new.items() if k not in ("kwargs", "text")} == \
        {k: v for k, v in constraint.items() if k not in ("kwargs", "text")}


def test_no_relabelling_without_a_meaningful_count_or_for_other_constraints():
    # "at least 0" / "exactly 0" would say nothing the instruction asked for
    assert achieved_constraint(ifeval("length_constraints:number_words", relation="at least", num_words=5), "") is None
    assert achieved_constraint(ifeval("detectable_format:number_bullet_lists", num_bullets=2), "no list") is None
    # not a count
    assert achieved_constraint(ifeval("punctuation:no_comma"), "a, b") is None
    assert achieved_constraint(ifeval("keywords:existence", keywords=["lantern"]), "no such word") is None
    # soft constraints are judged, never relabelled; broken records give None, never an exception
    assert achieved_constraint({"text": "Be kind.", "kind": "soft"}, WORDS_30) is None
    assert achieved_constraint({**ifeval("length_constraints:number_words", relation="less than", num_words=3),
                                "kwargs": {"relation": "less than"}}, WORDS_30) is None
    assert achieved_constraint({**ifeval("length_constraints:number_words", relation="less than", num_words=3),
                                "family": "nope"}, WORDS_30) is None
    stored = {**ifeval("length_constraints:number_words", relation="less than", num_words=3),
              "kwargs": '{"num_words": 3, "relation": "less than"}'}
    assert achieved_constraint(stored, WORDS_30)["kwargs"] == '{"num_words": 31, "relation": "less than"}'

    # every counted IFEval checker names a kwarg it takes
    counted = [cls for cls in FAMILIES["ifeval"].REGISTRY.values() if issubclass(cls, CountedConstraint)]
    assert len(counted) == 8
    for cls in counted:
        assert cls.count_arg in cls.arg_names and (cls.relation_arg is None or cls.relation_arg in cls.arg_names)


def test_rewrite_keeps_relabelled_constraints_in_order_with_their_new_text():
    words = ifeval("length_constraints:number_words", relation="less than", num_words=12)
    comma = ifeval("punctuation:no_comma")
    keyword = ifeval("keywords:existence", keywords=["lantern"])
    constraints = [words, comma, keyword]
    new_words = achieved_constraint(words, WORDS_30)
    choice = ReplayChoice(0, 1.0, 0.5, 1 / 3, (False, True, False), relabelled=(new_words, None, None))
    assert choice.kept == (True, True, False)
    out = rewrite(choice, "ignored", "Write a note.", [c["text"] for c in constraints], "plain")
    assert out.q_prime == join_instruction("Write a note.", [new_words["text"], comma["text"]], "plain")
    assert hindsight_constraints(constraints, choice) == [new_words, comma]
    # the paper's rewrite: no relabelling entries
    paper = ReplayChoice(0, 1.0, 0.5, 1 / 3, (False, True, False))
    assert paper.kept == paper.satisfied
    assert hindsight_constraints(constraints, paper) == [comma]
    with pytest.raises(ValueError, match="3 constraints but 2 relabelling entries"):
        rewrite(ReplayChoice(0, 1.0, 0.5, 0.5, (False, True, False), relabelled=(None, None)), "x", "t",
                [c["text"] for c in constraints], "plain")


def test_select_rewrite_asks_the_relabel_function_only_for_selected_failed_constraints():
    words = ifeval("length_constraints:number_words", relation="less than", num_words=12)
    comma = ifeval("punctuation:no_comma")
    row = {"task": "Write a note.", "constraints": [words, comma], "template": "plain"}
    verdicts = [[False, True], [True, True], [False, False], [False, True]]
    asked = []

    def relabel(i, j):
        asked.append((i, j))
        return achieved_constraint(row["constraints"][j], WORDS_30)

    picked = select_rewrite(verdicts, [0.1, 0.2, 0.3, 0.4], 4, 1, 2.0, prompts=["q"] * 4, inputs=[row] * 4,
                            relabel=relabel)
    (choice,) = picked[0]
    assert choice.index == 3  # the failure with the higher score: integrity ties, entropy 0.4 > 0.1
    assert asked == [(3, 0)]
    assert choice.relabelled[0]["kwargs"]["num_words"] == 31 and choice.relabelled[1] is None
    assert "less than 31 words" in choice.q_prime and comma["text"] in choice.q_prime


def test_config_rejects_an_unknown_relabel_mode(tmp_path):
    with pytest.raises(ValueError, match="hindsight_relabel"):
        HiRConfig(output_dir=str(tmp_path), hindsight_relabel="sometimes", use_cpu=True, report_to="none")
