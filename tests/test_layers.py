"""The layering of ``kompakt/`` holds: no import goes up a layer, and no import cycle.

Layers, lowest first (docs/design.md "Layers"; Kafka keeps the same order in its
``storage`` module: records < log < cleaner, and the broker on top):

    kompakt (package) and kompakt.errors < record < log < remote < cleaner < pipeline
        < kompakt.engines < broker < cli

``remote`` (the remote tier, KIP-405's storage and metadata managers) uploads and reads
the log's segment files, and the cleaner will clean remote ranges, so it sits between.

``pipeline`` and ``broker`` are peers: neither imports the other. The broker reaches the
Spark engine only through :mod:`kompakt.engines`, the registry of cleaner engines, which
sits above ``cleaner`` and ``pipeline`` (it knows every engine) and below ``broker`` and
``cli`` (which choose one by name).

Every ``import`` statement counts, also those inside functions (a lazy import is still a
dependency, and an import cycle through one only waits for the first call to break).
The test reports every violation it finds, not only the first.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kompakt"

# the rank of each layer; a module may import from its own layer or a lower rank
LAYERS: dict[str, int] = {
    "kompakt": 0,
    "kompakt.errors": 0,
    "kompakt.record": 1,
    "kompakt.log": 2,
    "kompakt.remote": 3,
    "kompakt.cleaner": 4,
    "kompakt.pipeline": 5,
    "kompakt.engines": 6,
    "kompakt.broker": 7,
    "kompakt.cli": 8,
}
# same-or-lower rank, yet forbidden: peers that must not know each other
PEERS: set[tuple[str, str]] = {("kompakt.broker", "kompakt.pipeline")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(module: str) -> str:
    """The longest entry of :data:`LAYERS` that is ``module`` or a package above it."""
    best = ""
    for layer in LAYERS:
        if (module == layer or module.startswith(layer + ".")) and len(layer) > len(best):
            best = layer
    return best


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """(line, imported kompakt module) for every import in the file, at any depth."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "kompakt" or alias.name.startswith("kompakt."):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != "kompakt" and not source.startswith("kompakt."):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                # ``from package import submodule`` depends on the submodule alone
                yield node.lineno, sub if sub in modules else source


def import_graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module -> imported modules, and a line per import that goes the wrong way."""
    modules = all_modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    wrong: list[str] = []
    for module, path in modules.items():
        mine = layer_of(module)
        for line, target in imports_of(module, path, modules):
            graph[module].add(target)
            theirs = layer_of(target)
            if LAYERS[theirs] > LAYERS[mine] or (mine, theirs) in PEERS:
                where = path.relative_to(ROOT.parent)
                wrong.append(f"{where}:{line}: {module} ({mine}) imports {target} ({theirs})")
    return graph, wrong


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing
    itself): Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    scc.append(m)
                    if m == node:
                        break
                if len(scc) > 1 or node in graph[node]:
                    out.append(sorted(scc))
    return out


def test_every_module_has_a_layer() -> None:
    assert [m for m in all_modules() if not layer_of(m)] == []


def test_no_import_goes_up_a_layer_or_across_to_a_peer() -> None:
    _graph, wrong = import_graph()
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_no_import_cycle() -> None:
    graph, _wrong = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_can_fail() -> None:
    """The checker itself: a cycle and an upward import are found in a made-up graph."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert layer_of("kompakt.cleaner.cleaner") == "kompakt.cleaner"
    assert layer_of("kompakt.engines") == "kompakt.engines"
    assert LAYERS[layer_of("kompakt.cli.main")] > LAYERS[layer_of("kompakt.broker.app")]
