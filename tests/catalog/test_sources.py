"""Sources users can read: no shipped text cites the team's internal notes, and every number names its source.

The notes (hardware.md, landscape.md, dfvg-paper.md, model.md) live outside the repository, so a
citation of them leaves a user with nothing to open. Data files name the primary document
(datasheet, paper, URL, table); code and docs name it too, or the repository's own docs/ file.
"""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["hwdb", "models", "docs", "dfvg_dse", "README.md"]
TEXT_SUFFIXES = {".toml", ".md", ".py", ".json", ".jsonl", ".txt", ".yaml", ".yml", ".cfg"}
# A bare note name, not a path into the repository (docs/cost-model.md is fine: '-' or '/' precedes).
NOTE_CITATION = re.compile(r"(^|[^/\w-])(hardware|landscape|dfvg-paper|model)\.md", re.M)
OUTSIDE_PATH = re.compile(r"shared/docs/")


def _text_files():
    for entry in SCANNED:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in TEXT_SUFFIXES and "__pycache__" not in file.parts and "_data" not in file.parts:
                yield file


def _citations(text: str) -> list[str]:
    return [m.group(0).strip() for m in NOTE_CITATION.finditer(text)] + OUTSIDE_PATH.findall(text)


def test_no_shipped_text_cites_the_internal_notes():
    found = []
    for file in _text_files():
        for number, line in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _citations(line):
                found.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert found == []


def test_the_checker_catches_a_note_citation_and_spares_repository_docs():
    assert _citations('source = "NVIDIA datasheet (hardware.md §4a)"')
    assert _citations("# see landscape.md T6") and _citations("dfvg-paper.md's arithmetic")
    assert _citations("model.md §3") and _citations("(../shared/docs/style.md §2)")
    assert not _citations("docs/cost-model.md §4 and [pipeline.md](pipeline.md)")
    assert not _citations("docs/model.md")  # a path inside the repository is allowed
    assert sum(1 for _ in _text_files()) > 50  # the walk reaches the data, the docs and the code


def _sources(node, where: str):
    """Every `source` string in a parsed TOML document, and every quantity table without one."""
    if isinstance(node, dict):
        if "value" in node and "unit" in node and "source" not in node:
            yield where, None
        for key, value in node.items():
            if key == "source":
                yield f"{where}.source", value
            else:
                yield from _sources(value, f"{where}.{key}" if where else key)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _sources(item, f"{where}[{i}]")


DATA_FILES = sorted((ROOT / "hwdb").rglob("*.toml")) + sorted((ROOT / "models").rglob("*.toml"))


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_source_in_the_data_is_a_non_empty_string(path):
    document = tomllib.loads(path.read_text())
    sources = list(_sources(document, ""))
    bad = [where for where, source in sources if not isinstance(source, str) or not source.strip()]
    assert bad == []
    if path.parent.name in ("gpu", "fpga", "cpu", "link") or path.name == "defaults.toml":
        assert sources  # every hwdb entry has numbers, so it has sources


def test_every_gpu_peak_names_its_document(catalog):
    for entry in catalog.hw_entries("gpu"):
        peaks = {f: q for f, q in entry.quantities.items() if f.startswith("peak_")}
        assert "peak_fp16" in peaks, entry.path
        for field, q in peaks.items():
            # a document, not just a tag: a name with letters, and dense (not the sparse figure)
            assert len(q.source) > 20 and re.search(r"[A-Za-z]{4}", q.source), (entry.path, field)
            assert "sparse" not in q.source or "dense" in q.source, (entry.path, field)
