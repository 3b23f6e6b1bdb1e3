"""The layout is a contract (issue 25): module aliases that read as words, no import
circle between modules (imports under ``TYPE_CHECKING`` count: a type is a dependency
for whoever reads the code), and modules of one job, under about 500 lines (the server's,
the Python client's and the web page's; generated files aside).

What is not there yet is listed here by name, with the size it may not pass, so the
layout only gets better: a module that grows, a new circle or a new long module fails.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("appserver", "tests", "clients/python/src", "bench")
#: Aliases every reader of that library knows (hypothesis's own documentation uses it).
CONVENTIONAL = {"hypothesis.strategies": "st"}
MAX_LINES = 500
#: ``as`` and a name of one or two letters ending an import alias (``as e:`` of an
#: ``except`` or ``with`` ends in a colon and is not one).
SHORT_ALIAS = re.compile(r"\bas\s+[A-Za-z_]\w?\s*[,)\n]")

#: Modules allowed over MAX_LINES, each with the length it may not pass (none since
#: issue 25 split the last ones by job; a new entry needs a reason in a comment).
LONG_MODULES: dict[str, int] = {}

#: Circles still to break (none left: the method families and their context were the
#: last, broken by typing the shared families by protocols, services/shared_families.py).
KNOWN_CIRCLES: list[set[str]] = []


SKIPPED_FOLDERS = {"node_modules", ".cache", "__pycache__"}


def python_files() -> list[Path]:
    """Every ``.py`` file under CHECKED; ``node_modules`` and caches are not walked
    (rglob would walk them whole before a filter could drop their files)."""
    found = []
    for folder in CHECKED:
        for top, folders, files in os.walk(ROOT / folder):
            folders[:] = [name for name in folders if name not in SKIPPED_FOLDERS]
            found.extend(Path(top) / name for name in files if name.endswith(".py"))
    return sorted(found)


def test_no_module_alias_is_a_letter_or_two() -> None:
    cryptic = []
    for path in python_files():
        text = path.read_text("utf-8")
        if not SHORT_ALIAS.search(text):
            continue  # parsing every file is most of this test's time
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for alias in node.names:
                if alias.asname is None or len(alias.asname) > 2:
                    continue
                module = node.module if isinstance(node, ast.ImportFrom) else None
                full = f"{module}.{alias.name}" if module else alias.name
                if CONVENTIONAL.get(full) != alias.asname:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    cryptic.append(f"{where}: {full} as {alias.asname}")
    assert not cryptic, "import the name, or alias to a word:\n" + "\n".join(cryptic)


#: Hand-written code the line rule covers besides ``appserver/*.py``: the Python client
#: and the web page's modules. Generated files are exempt (their size follows the schema).
SHORT_SOURCES = (
    ("appserver", "*.py"),
    ("clients/python/src", "*.py"),
    ("appserver/web/assets", "*.js"),
)
GENERATED = {
    "clients/python/src/appserver_client/_generated.py",
    # The re-export list of every wire type (clients/python/generate.py writes it too).
    "clients/python/src/appserver_client/types.py",
    "appserver/web/assets/client.js",
}


def short_sources() -> list[Path]:
    """Every file the line rule covers."""
    return sorted(
        path
        for folder, pattern in SHORT_SOURCES
        for path in (ROOT / folder).rglob(pattern)
        if str(path.relative_to(ROOT)) not in GENERATED
    )


def test_the_line_rule_covers_the_client_and_the_page() -> None:
    covered = {str(path.relative_to(ROOT)) for path in short_sources()}
    assert "clients/python/src/appserver_client/client.py" in covered
    assert "appserver/web/assets/app.js" in covered
    assert not covered & GENERATED


def test_modules_stay_short() -> None:
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text("utf-8").splitlines())
        for path in short_sources()
    }
    too_long = {
        name: length
        for name, length in lengths.items()
        if length > LONG_MODULES.get(name, MAX_LINES)
    }
    assert not too_long, f"split these into modules of one job: {too_long}"
    shrunk = {name for name in LONG_MODULES if lengths.get(name, 0) <= MAX_LINES}
    assert not shrunk, f"now short enough: take them off LONG_MODULES: {sorted(shrunk)}"


def circles() -> list[set[str]]:
    """The module-level import circles in appserver (strongly connected components)."""
    graph = grimp.build_graph("appserver", exclude_type_checking_imports=False)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        # Tarjan's algorithm; the graph is a few hundred modules deep at most.
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph.modules):
        if module not in order:
            visit(module)
    return found


def test_no_new_import_circle() -> None:
    new = [sorted(circle) for circle in circles() if circle not in KNOWN_CIRCLES]
    assert not new, f"modules that import each other: {new}"


def test_the_known_circles_are_still_there() -> None:
    gone = [sorted(circle) for circle in KNOWN_CIRCLES if circle not in circles()]
    assert not gone, f"broken: take them off KNOWN_CIRCLES: {gone}"
