"""Imports flow one way (docs/architecture in ../shared/docs/style.md §2) and modules stay small."""

import ast
from pathlib import Path

import dfvg_dse

PACKAGE = Path(dfvg_dse.__file__).parent
MAX_CODE_LINES = 400

# module (dotted, relative to dfvg_dse) -> internal modules it may import. A key ending in ".*"
# covers a whole subpackage; its members may import each other.
ALLOWED = {
    "units": set(),
    "specs.*": {"units"},
    "files": {"units", "specs"},
    "processes": set(),
    "catalog.*": {"units", "specs", "files"},
    "costs.*": {"units", "specs"},
    "acceptance.*": {"units", "specs"},
    "tree.*": {"units", "specs", "acceptance"},
    "pipeline.*": {"units", "specs", "costs", "acceptance", "tree"},
    "sim": {"units", "specs", "costs", "acceptance"},
    "serving.*": {"units", "specs", "costs", "acceptance", "pipeline", "sim"},
    "reference.*": {"units", "specs", "processes"},
    "validation.*": {"units", "specs", "costs", "acceptance", "tree", "pipeline", "sim", "serving", "reference"},
    "search.*": {"units", "specs", "pipeline", "tree", "processes", "serving"},
    "report.*": {"units", "specs", "costs", "acceptance", "tree", "pipeline", "sim", "search", "serving"},
    "export": {"units", "specs", "files", "report", "search", "tree"},
    "cli.*": {"units", "specs", "catalog", "report", "acceptance", "tree", "pipeline", "sim", "serving", "search", "export", "processes",
              "reference", "validation", "files", "__init__"},
    "__init__": {"units", "specs", "catalog"},
    "__main__": {"cli"},
}
# third-party package -> modules allowed to import it (None: anywhere)
THIRD_PARTY = {"numpy": None, "scipy": None, "click": {"cli.*"}, "tomli_w": {"catalog.*"},
               "optuna": {"search.*"}, "matplotlib": {"report.plots"}, "pandas": {"search.*", "report.*", "export"}}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_data" in path.parts:
            continue
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(parts), path


def _rule(module: str, table: dict):
    if module in table:
        return module, table[module]
    top = module.split(".")[0] + ".*"
    if top in table:
        return top, table[top]
    raise AssertionError(f"dfvg_dse.{module} has no layering rule: add it to ALLOWED")


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "dfvg_dse":  # `from dfvg_dse import units` names modules (or __init__'s names)
                yield from (f"dfvg_dse.{alias.name}" for alias in node.names)
            else:
                yield node.module


def test_imports_follow_the_layering():
    problems = []
    top_level = {module.split(".")[0] for module, _ in _modules()}
    for module, path in _modules():
        key, allowed = _rule(module, ALLOWED)
        own = module.split(".")[0]
        for target in _imports(path):
            top = target.split(".")[0]
            if top == "dfvg_dse":
                inner = target.split(".")[1] if "." in target else "__init__"
                if inner not in top_level:
                    inner = "__init__"  # a name defined in dfvg_dse/__init__.py, such as __version__
                ok = inner in allowed or (key.endswith(".*") and inner == own)
                if not ok:
                    problems.append(f"dfvg_dse.{module} imports dfvg_dse.{inner}")
            elif top in THIRD_PARTY and THIRD_PARTY[top] is not None:
                users = THIRD_PARTY[top]
                if module not in users and f"{module.split('.')[0]}.*" not in users:
                    problems.append(f"dfvg_dse.{module} imports {top}")
    assert problems == []


def _code_lines(path: Path) -> int:
    """Lines that are neither blank, comments nor docstring-only lines."""
    tree = ast.parse(path.read_text())
    doc_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(1 for i, line in enumerate(path.read_text().splitlines(), 1)
               if line.strip() and not line.strip().startswith("#") and i not in doc_lines)


def test_modules_stay_under_the_size_cap():
    sizes = {module: _code_lines(path) for module, path in _modules()}
    assert {m: n for m, n in sizes.items() if n > MAX_CODE_LINES} == {}
    assert sizes["units"] > 10  # the counter counts


def test_the_checker_catches_a_violation(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import click\nfrom dfvg_dse.cli import cli\nfrom dfvg_dse import units, __version__\n")
    assert list(_imports(bad)) == ["click", "dfvg_dse.cli", "dfvg_dse.units", "dfvg_dse.__version__"]
