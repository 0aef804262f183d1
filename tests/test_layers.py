"""The house stays in floors: no import circle in mdiff/ or tools/bench/, and no module of mdiff/ imports
a module above its floor as docs/architecture.md draws them (its ```floors block). Every import counts —
at the top, inside a function, or for type checking only — since each is a place where one module
cannot be read without the other."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_files(package_dir: Path, prefix: str) -> dict[str, Path]:
    """Dotted module name → file, for every .py file below ``package_dir``."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([prefix, *parts]) if prefix else ".".join(parts)] = path
    return found


def imported_names(path: Path, module: str) -> Iterable[str]:
    """Every dotted name an import statement of the file names (``from a import b``: ``a.b``, which resolves
    to the module ``a.b`` or, when ``b`` is a name in it, to ``a``)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield from (f"{source}.{alias.name}" for alias in node.names)  # a module, or a name in ``source``


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module → the modules of ``modules`` it imports (a name resolves to its longest known prefix)."""
    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {known(name) for name in imported_names(path, module)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def drawn_floors() -> list[tuple[int, str, list[str]]]:
    """(floor, name, module names) from the ```floors block of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"```floors\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```floors block"
    rows = []
    for line in block.group(1).splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            number, name, *names = line.split()
            rows.append((int(number), name, names))
    return rows


def floor_of(module: str, rows: list[tuple[int, str, list[str]]]) -> int | None:
    """The floor whose row names ``module`` itself, else the row naming its nearest package."""
    relative = module.removeprefix("mdiff").removeprefix(".") or "__init__"
    best: tuple[int, int] | None = None  # (length of the name matched, floor)
    for number, _, names in rows:
        for name in names:
            if relative == name or relative.startswith(name + "."):
                if best is None or len(name) > best[0]:
                    best = (len(name), number)
    return None if best is None else best[1]


def test_mdiff_has_no_import_circle():
    graph = import_graph(module_files(ROOT / "mdiff", "mdiff"))
    assert cycles(graph) == []


def test_tools_bench_has_no_import_circle_and_no_script_imports_another():
    modules = module_files(ROOT / "tools" / "bench", "")
    graph = import_graph(modules)
    assert cycles(graph) == []
    scripts = {m for m, path in modules.items() if '__name__ == "__main__"' in path.read_text(encoding="utf-8")}
    assert {(m, t) for m in graph for t in graph[m] if t in scripts} == set()


def test_every_module_stays_on_its_floor():
    rows = drawn_floors()
    modules = module_files(ROOT / "mdiff", "mdiff")
    floors = {m: floor_of(m, rows) for m in modules}
    assert [m for m, f in floors.items() if f is None] == [], "modules docs/architecture.md gives no floor"
    drawn = {name for _, _, names in rows for name in names}
    relative = {m.removeprefix("mdiff").removeprefix(".") or "__init__" for m in modules}
    assert {n for n in drawn if n not in relative and not any(r.startswith(n + ".") for r in relative)} == set(), \
        "names docs/architecture.md draws that are not modules"
    graph = import_graph(modules)
    upward = sorted((m, t) for m in graph for t in graph[m] if floors[t] > floors[m])  # type: ignore[operator]
    assert upward == []


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}}, [["a", "b", "c"], ["d", "e"]]),
])
def test_cycles_finds_each_circle(graph, expected):
    assert sorted(cycles(graph)) == expected


def test_floor_of_prefers_the_module_named_over_its_package():
    rows = [(1, "format", ["format"]), (3, "file", ["format.reader"]), (9, "surface", ["__init__", "cli"])]
    assert [floor_of(m, rows) for m in ("mdiff.format.dtypes", "mdiff.format.reader", "mdiff", "mdiff.cli.main",
                                        "mdiff.repo")] == [1, 3, 9, 9, None]


def test_hdf5walk_needs_nothing_of_mdiff():
    """mdiff.hdf5walk (the §8 walk, importable on its own) imports only the standard library, numpy, h5py
    and itself, so that it can be taken out of mdiff as it is."""
    import sys

    allowed = set(sys.stdlib_module_names) | {"numpy", "h5py", "_typeshed"}  # _typeshed: for type checking only
    modules = module_files(ROOT / "mdiff" / "hdf5walk", "mdiff.hdf5walk")
    assert set(modules) == {"mdiff.hdf5walk", *(f"mdiff.hdf5walk.{m}" for m in (
        "attributes", "findings", "limits", "object_header", "positional_io", "storage", "walk", "wire"))}
    outside = sorted((m, name) for m, path in modules.items() for name in imported_names(path, m)
                     if name.split(".")[0] not in allowed and not name.startswith("mdiff.hdf5walk"))
    assert outside == []
