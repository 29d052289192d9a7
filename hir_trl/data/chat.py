"""Chat messages: the text of a message, of a prompt's final user turn (the instruction q) and of a completion.

One reading for training (`hir_trl.rewards`), evaluation (`hir_trl.evaluation`) and data synthesis
(`hir_trl.synth`). A message is a mapping with ``role`` and ``content``, in TRL's conversational format; its
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
