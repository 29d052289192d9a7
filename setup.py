"""The package's long description (the package index page): README.md with each relative link or image written as
plain text naming its repository path, since an index page cannot reach the repository's other files. Everything
else is in pyproject.toml (``readme`` is listed there as dynamic: this file provides it)."""

import re
from pathlib import Path

#: ``[text](target)`` or ``![alt](target)``; the text may hold one level of brackets and code spans.
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]+)\)")
ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")  # https:, mailto:, ...


def plain(match: re.Match) -> str:
    image, text, target = match.groups()
    if ABSOLUTE.match(target):
        return match.group(0)
    if target.startswith("#"):  # a heading of the page itself: index pages give headings no anchors
        return text
    if image:
        return f"{text} (figure: `{target}`)"
    return f"`{target}`" if text.strip("`") in (target, target.split("#")[0]) else f"{text} (`{target}`)"


def long_description(markdown: str) -> str:
    """``markdown`` with every relative link or image outside fenced code blocks as plain text naming its target."""
    out, fenced = [], False
    for line in markdown.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        out.append(line if fenced else LINK.sub(plain, line))
    return "".join(out)


if __name__ == "__main__":  # as setuptools' build backend runs it
    from setuptools import setup

    setup(long_description=long_description(Path(__file__).with_name("README.md").read_text(encoding="utf-8")),
          long_description_content_type="text/markdown")
