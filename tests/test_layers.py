"""Imports point one way: down the layers below, never up, and never round in a circle.

A newcomer can then read the code bottom-up, and change a lower layer without reading what sits above it.
Every import statement counts, those inside functions too (they run all the same, only later)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("assistant", "converters")

# Lowest first. A module may import from its own layer and from those before it. "pkg.*" is the package
# pkg with everything in it; a plain name is that module alone.
LAYERS = (
    ("foundation", ("assistant", "assistant.errors", "assistant.home", "assistant.diskspace")),
    ("engine: llama.cpp, devices, this CPU", ("assistant.engine.*", "assistant.cpu")),
    ("model files: conversion, model sets, downloads",
     ("converters.*", "assistant.modelsets", "assistant.hub", "assistant.demo")),
    ("speculative decoding", ("assistant.speculative.*",)),
    ("drafts compressed from a target", ("assistant.drafts.*",)),
    ("conversations", ("assistant.conversation.*", "assistant.attachments")),
    ("front ends and the bench", ("assistant.serve.*", "assistant.ui.*", "assistant.bench.*")),
    ("commands", ("assistant.commands.*",)),
    ("entry point", ("assistant.cli", "assistant.__main__")),
)


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of our packages."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules that ``name`` imports anywhere in its file (``from pkg import mod`` counts as mod)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    found = set()
    for target in targets:
        while target and target not in known:  # a name inside a module: the module itself
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, set(modules)) for name, path in modules.items()}


def layer_of(module: str) -> int | None:
    for number, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if module == entry.removesuffix(".*") or (entry.endswith(".*") and module.startswith(entry[:-1])):
                return number
    return None


def unit_of(module: str) -> str:
    """The package directly under the top level that holds ``module`` (assistant.engine), or the module itself
    (assistant.cpu): cycles between these are cycles too, even when no two single modules form one."""
    parts = module.split(".")
    return ".".join(parts[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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


def test_every_module_has_a_layer():
    unplaced = [module for module in import_graph() if layer_of(module) is None]
    assert not unplaced, f"add these modules to a layer in LAYERS ({__name__}): {unplaced}"


def test_no_import_reaches_up_a_layer():
    upward = [f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
              for module, targets in import_graph().items() for target in sorted(targets)
              if layer_of(module) is not None and layer_of(target) is not None and layer_of(target) > layer_of(module)]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def describe(found: list[list[str]]) -> str:
    return "import cycles: " + "; ".join(" <-> ".join(members) for members in found)


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, describe(found)


def test_no_import_cycle_between_packages():
    units: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        units.setdefault(unit_of(module), set()).update(unit_of(target) for target in targets)
    for unit, targets in units.items():
        targets.discard(unit)
    found = cycles(units)
    assert not found, describe(found)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The checks above pass vacuously if the parser misses imports: a cycle made of one relative import and
    one inside a function is found."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from pkg.high import g\n")
    (package / "high.py").write_text("from .low import f\n")
    known = {"pkg", "pkg.low", "pkg.high"}
    graph = {name: imported_modules(name, package / f"{name.split('.')[-1]}.py", known)
             for name in ("pkg.low", "pkg.high")}
    assert graph == {"pkg.low": {"pkg.high"}, "pkg.high": {"pkg.low"}}
    assert cycles(graph) == [["pkg.high", "pkg.low"]]
    assert import_graph()["assistant.engine.remote"] >= {"assistant.engine.context", "assistant.errors"}
