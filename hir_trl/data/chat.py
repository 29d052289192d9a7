"""Chat messages: the text of a message, of a prompt's final user turn (the instruction q) and of a completion.

One reading for training (`hir_trl.rewards`), evaluation (`hir_trl.evaluation`) and data synthesis
(`hir_trl.data.synth`). A message is a mapping with ``role`` and ``content``, in TRL's conversational format; its
``content`` is a string or, in the OpenAI multimodal form, a list of parts ``{"type": "text", "text": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def message_text(message: Any) -> str | None:
    """The text of one chat message: a string ``content`` as is, a list of parts joined (each part's ``text``; a
    string part as is; parts without text add nothing), ``""`` for a missing or None content, or None when
    ``message`` is not a mapping or its content is something else (a number, a mapping)."""
    if not isinstance(message, Mapping):
        return None
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else str(part.get("text") or "")
                       for part in content if isinstance(part, (str, Mapping)))
    return None


def last_user_text(messages: Any) -> str | None:
    """The text (`message_text`) of the final ``user`` turn of chat ``messages``; None when ``messages`` is not a
    list of messages, has no user turn, or its final user turn holds no text. Turns after it (a reference answer)
    are ignored."""
    if not isinstance(messages, Sequence) or isinstance(messages, str):
        return None
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return message_text(message)
    return None


def prompt_text(prompt: Any) -> str | None:
    """The instruction text of a prompt: the prompt string itself, or the text of the final user turn of a
    conversational prompt (`last_user_text`); None when it has none."""
    return prompt if isinstance(prompt, str) else last_user_text(prompt)


def instruction_text(prompt: Any) -> str:
    """The instruction q: the prompt string itself, or the text of the final user turn of a conversational prompt.

    Raises:
        ValueError: a conversational prompt with no user turn, or whose final user turn holds no text.
    """
    text = prompt_text(prompt)
    if text is None:
        raise ValueError("prompt has no user turn with text content")
    return text


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the contents of a list of assistant messages, concatenated.

    Raises:
        TypeError: ``completion`` is neither a string nor a list.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(message_text(m) or "" for m in completion)
    raise TypeError(f"unsupported completion type {type(completion).__name__}")


def with_system_prompt(messages: Sequence[Mapping[str, Any]], system_prompt: str) -> list[dict[str, Any]]:
    """``messages`` with ``system_prompt`` as their system turn: put first, or replacing a first turn whose role is
    ``system`` (``system_prompt`` of ``hir-trl train``)."""
    rest = list(messages[1:] if messages and messages[0].get("role") == "system" else messages)
    return [{"role": "system", "content": system_prompt}, *map(dict, rest)]


def chat_template_text(value: str) -> str:
    """The Jinja text of ``chat_template`` (``hir-trl train``): a ``.jinja``/``.j2`` file; the name of a template
    TRL ships (``trl/chat_templates/<name>.jinja``, e.g. ``qwen2_5``); a tokenizer folder or Hub model id, whose
    template is taken (as TRL's ``chat_template_path`` / `trl.clone_chat_template` read it, without adding tokens);
    or, holding ``{{`` or ``{%``, the template itself.

    Raises:
        ValueError: one line: a template file that does not exist or cannot be read, a template that does not parse
            as Jinja (`template_problem`: the line and Jinja's message), or a value none of the above reads (with the
            tokenizer's error).
    """
    from pathlib import Path

    import trl

    if "{{" in value or "{%" in value:
        return _parsed(value, "the template given")
    path = Path(value).expanduser()
    if path.suffix in (".jinja", ".j2"):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"chat_template: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        return _parsed(text, str(path))
    shipped = Path(trl.__file__).parent / "chat_templates" / f"{value}.jinja"
    if "/" not in value and shipped.is_file():
        return shipped.read_text(encoding="utf-8")
    from transformers import AutoTokenizer

    try:
        template = AutoTokenizer.from_pretrained(value).get_chat_template()
    except Exception as exc:  # noqa: BLE001 - any failure to read it is the user's to fix: one line
        names = sorted(p.stem for p in shipped.parent.glob("*.jinja"))
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"chat_template: {value!r} is no .jinja/.j2 file, no template TRL ships "
                         f"({', '.join(names[:6])}, ...: {len(names)} in trl/chat_templates) and no tokenizer with a "
                         f"chat template ({reason})") from None
    return _parsed(template, f"the chat template of {value}") if isinstance(template, str) else template


def template_problem(template: str) -> str | None:
    """Why the Jinja text ``template`` does not compile as transformers compiles a chat template (its sandboxed
    environment and extensions: `transformers.utils.chat_template_utils._compile_jinja_template`), as
    ``"line N: <Jinja's message>"``; None when it compiles."""
    import jinja2

    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # another transformers layout: Jinja's own parser with the loop-control tags
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def _compile_jinja_template(text: str) -> object:
            return ImmutableSandboxedEnvironment(extensions=["jinja2.ext.loopcontrols"]).from_string(text)
    try:
        _compile_jinja_template(template)
    except jinja2.TemplateSyntaxError as exc:
        return f"line {exc.lineno}: {exc.message}"
    except jinja2.TemplateError as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def _parsed(template: str, where: str) -> str:
    """``template``, or a `ValueError` naming ``where`` when it does not parse (`template_problem`)."""
    problem = template_problem(template)
    if problem is not None:
        raise ValueError(f"chat_template: {where} does not parse as a Jinja template ({problem}); fix the "
                         "template, or give a .jinja file or the name of a template TRL ships (e.g. qwen2_5)")
    return template
