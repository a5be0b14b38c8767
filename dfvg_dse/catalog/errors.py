"""Errors of the catalog: each one is a single line for the user."""

from __future__ import annotations

import difflib
from pathlib import Path

_MISSING = object()


class CatalogError(Exception):
    """A problem with a data file or a name, worded as one line for the user."""


class DataError(CatalogError):
    """A bad field in a data file."""

    def __init__(self, path: Path | str, field: str, value: object, allowed: str):
        text = repr(value)
        shown = "missing" if value is _MISSING else f"= {text if len(text) <= 60 else text[:57] + '...'}"
        super().__init__(f"{path}: field '{field}' {shown}: {allowed}")


class UnknownNameError(CatalogError):
    """A name that is not in the catalog; the message suggests the closest known names."""

    def __init__(self, what: str, name: str, known: list[str], note: str = ""):
        close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        note = f" ({note})" if note else ""
        super().__init__(f"unknown {what} '{name}'{note}{hint}; known: {', '.join(known)}")


