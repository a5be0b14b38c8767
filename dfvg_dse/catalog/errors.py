"""Errors of the catalog: each one is a single line for the user."""

from __future__ import annotations

import difflib
from pathlib import Path

from dfvg_dse.specs.hardware import shorten, show_value

_MISSING = object()


class CatalogError(Exception):
    """A problem with a data file or a name, worded as one line for the user."""


class DataError(CatalogError):
    """A bad field in a data file."""

    def __init__(self, path: Path | str, field: str, value: object, allowed: str):
        shown = "missing" if value is _MISSING else f"= {show_value(value)}"
        # a field is named by the file's own keys, which can be any length: cut as a long value is
        super().__init__(f"{path}: field '{shorten(field)}' {shown}: {allowed}")


class UnknownNameError(CatalogError):
    """A name that is not in the catalog; the message suggests the closest known names."""

    def __init__(self, what: str, name: str, known: list[str], note: str = ""):
        close = difflib.get_close_matches(name.lower()[:200], known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        note = f" ({note})" if note else ""
        shown = ", ".join(known[:SHOWN_NAMES]) + (f", ... ({len(known)} in all)" if len(known) > SHOWN_NAMES else "")
        super().__init__(f"unknown {what} '{shorten(name)}'{note}{hint}; known: {shown or 'none'}")


SHOWN_NAMES = 8  # a one-line error lists this many known names; the `list` commands show them all


