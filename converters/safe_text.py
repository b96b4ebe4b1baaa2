"""Text read from an artifact (hostile: a crafted graph.json or config names anything) made safe to show.

``printable`` for a terminal: every character ``str.isprintable`` refuses (C0/C1 controls such as ESC and carriage
return, DEL, line/paragraph separators, bidirectional overrides and other format characters) shown as its Python
escape (``\\x1b``, ``\\r``, ``\\u202e``), so a name cannot repaint the screen, overwrite a line or reorder what
the reader sees; ``printable_lines`` keeps the text's own line breaks (the command line's error paragraphs).
``markdown_code`` for a Markdown card: the printable text as one inline code span that cannot close itself
(backticks become ``'``), break a table row (``|`` becomes ``/``) or run past ``limit`` characters.
"""

from __future__ import annotations

__all__ = ["markdown_code", "printable", "printable_lines"]


def printable(text) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def printable_lines(text) -> str:
    """:func:`printable` line by line: the text's own line breaks (``\\n``) kept, everything else escaped (an error
    paragraph quoting a file: a guard's message, a layer path)."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def markdown_code(text, limit: int = 300) -> str:
    return "`" + printable(text).replace("`", "'").replace("|", "/")[:limit] + "`"
