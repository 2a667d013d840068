"""Griffe extension: the package's Keras-style doctests rendered as code.

The docstrings follow Keras: an `Example:` line, then `>>>` lines at the
docstring's own indentation. Google-style parsers read a section's content
from its indented lines only, so those examples would reach the page as
Markdown (`>>>` is a nested block quote there). This extension wraps each run
of unindented doctest lines (a `>>>` line up to the next blank line: the
statements and their expected output) in a `pycon` code block before the
docstring is parsed. The docstrings themselves do not change; pytest runs
them as doctests (`--doctest-modules`).
"""

import griffe

__all__ = ["DoctestBlocks", "fence_doctests"]

_FENCE = "```"


def fence_doctests(text: str) -> str:
    """`text` with every unindented doctest run inside a ```` ```pycon ```` block.

    Example:

    >>> fence_doctests("Example:\\n\\n>>> 1 + 1\\n2\\n\\nMore.").split("\\n")
    ['Example:', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'More.']
    """
    lines, out, index, in_fence = text.split("\n"), [], 0, False
    while index < len(lines):
        line = lines[index]
        if line.lstrip().startswith(_FENCE):
            in_fence = not in_fence
        if in_fence or not line.startswith(">>>"):
            out.append(line)
            index += 1
            continue
        out.append(_FENCE + "pycon")
        while index < len(lines) and lines[index].strip():
            out.append(lines[index])
            index += 1
        out.append(_FENCE)
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fences the unindented doctests of every docstring (see the module's docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        """Rewrites `obj`'s docstring, if it has one, before it is parsed."""
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
