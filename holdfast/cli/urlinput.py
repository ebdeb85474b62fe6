"""Where ``holdfast start`` takes its URL from: the argument, stdin (``-``) or a file.

Reading it from stdin or a file keeps a URL with a token out of ``ps`` and the shell history.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

__all__ = ["UrlInputError", "read_url"]

_MAX_INPUT = 8192


class UrlInputError(ValueError):
    """No URL, two of them, or one that cannot be read; the message says which."""


def read_url(arg: str | None, url_file: Path | None, stdin: TextIO) -> str:
    """The URL given exactly once: as ``arg``, as ``arg == "-"`` (stdin) or in ``url_file``.

    Surrounding whitespace (the newline of ``echo`` or an editor) is dropped; more than one
    line is an error, so a file holding something else is not half-used.
    """
    if (arg is None) == (url_file is None):
        raise UrlInputError("give the URL as an argument, as - (stdin) or with --url-file, "
                            "exactly once")
    if arg is not None and arg != "-":
        return arg
    try:
        # One character more than kept: an input cut at the limit would be checked (and its
        # length told) as a URL it is not.
        if url_file is not None:
            with url_file.open(encoding="utf-8") as f:
                text = f.read(_MAX_INPUT + 1)
        else:
            text = stdin.read(_MAX_INPUT + 1)
    except (OSError, UnicodeDecodeError) as exc:
        source = url_file if url_file is not None else "stdin"
        raise UrlInputError(f"cannot read the URL from {source}: {type(exc).__name__}") from None
    if len(text) > _MAX_INPUT:
        raise UrlInputError(f"the input is longer than {_MAX_INPUT} characters: not one URL")
    url = text.strip()
    if not url:
        raise UrlInputError(f"no URL in {url_file if url_file is not None else 'stdin'}")
    if "\n" in url or "\r" in url:
        raise UrlInputError("the input holds more than one line")
    return url
