"""The product's import graph, read with ``ast`` (imports inside functions included): no cycle
among product modules, no import upward from the apps (inference/, cache/) into the project
(omlx_site/) or the console (admin_panel/), no torch or transformers outside the test-model kit,
and no Django in cache/'s core."""

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("omlx_site", "inference", "cache", "admin_panel")
APPS = ("inference", "cache")
ABOVE_APPS = ("omlx_site", "admin_panel")
# Only the test-model kit (_in_testkit) may import these (behind the [test] extra).
HEAVY = ("torch", "transformers")
# cache/'s Django side; every other cache module is its core and never imports django.
CACHE_DJANGO = ("cache.models", "cache.apps", "cache.migrations", "cache.orm_index", "cache.tasks")


def modules(root: Path, packages=PRODUCT) -> Dict[str, Path]:
    """Dotted module name -> file, for every .py file of the packages."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST) -> List[ast.AST]:
    """Every import statement at any depth, in line order, except those only a type checker runs."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                todo.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            todo.append(child)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def imported_names(name: str, path: Path) -> Iterator[Tuple[str, int]]:
    """(absolute dotted name, line) for each import of the module: ``from pkg import x`` gives
    ``pkg.x`` (a module or a name in pkg; the caller decides), relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
            continue
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        for alias in node.names:
            yield (base if alias.name == "*" else f"{base}.{alias.name}"), node.lineno


def _product_target(dotted: str, known: Dict[str, Path]) -> str:
    """The product module an import runs: the longest known prefix of the dotted name."""
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return ""


def graph(root: Path = REPO, packages=PRODUCT):
    """(edges: module -> {module: line}, external: module -> [(dotted, line)])."""
    known = modules(root, packages)
    edges: Dict[str, Dict[str, int]] = {m: {} for m in known}
    external: Dict[str, List[Tuple[str, int]]] = {m: [] for m in known}
    for name, path in known.items():
        for dotted, line in imported_names(name, path):
            target = _product_target(dotted, known)
            if target and target != name:
                edges[name].setdefault(target, line)
            elif not target and dotted.split(".")[0] not in packages:
                external[name].append((dotted, line))
    return edges, external


def components(edges: Dict[str, Dict[str, int]]) -> List[List[str]]:
    """The strongly connected components of more than one module (each sorted): every module of
    one reaches every other, so each holds at least one cycle."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components: List[List[str]] = []

    for start in sorted(edges):  # iterative Tarjan: the graph is deep enough to hit recursion limits
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
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
                    work.append((child, iter(sorted(edges[child]))))
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
                    components.append(sorted(component))
    return sorted(components)


def cycles(edges: Dict[str, Dict[str, int]]) -> List[List[str]]:
    """One cycle (a -> b -> ... -> a) per component, the shortest through its first module."""
    return [_one_cycle(c, edges) for c in components(edges)]


def _one_cycle(component: List[str], edges) -> List[str]:
    """A shortest cycle through the component's first module (breadth first inside it)."""
    members, start = set(component), component[0]
    previous = {start: None}
    todo = [start]
    while todo:
        node = todo.pop(0)
        for child in sorted(edges[node]):
            if child == start:
                path = [node]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return list(reversed(path)) + [start]
            if child in members and child not in previous:
                previous[child] = node
                todo.append(child)
    return component


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _in_testkit(name: str) -> bool:
    return _under(name, ("inference.testkit",))


def _describe(cycle: List[str], edges) -> str:
    hops = [f"{a} (line {edges[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(hops + [cycle[-1]])


def test_no_import_cycle_among_product_modules():
    edges, _ = graph()
    found = components(edges)
    report = [
        f"{len(c)} modules ({', '.join(c)}), e.g. {_describe(_one_cycle(c, edges), edges)}" for c in found
    ]
    assert found == [], f"{len(found)} groups of modules import each other:\n" + "\n".join(report)


def test_the_apps_never_import_the_project_or_the_console():
    edges, _ = graph()
    upward = [
        f"{m} line {line} imports {target}"
        for m, targets in sorted(edges.items())
        if _under(m, APPS)
        for target, line in sorted(targets.items())
        if _under(target, ABOVE_APPS)
    ]
    assert upward == [], "\n".join(upward)


def test_only_the_testkit_imports_torch_or_transformers():
    _, external = graph()
    heavy = [
        f"{m} line {line} imports {dotted}"
        for m, found in sorted(external.items())
        if not _in_testkit(m)
        for dotted, line in found
        if dotted.split(".")[0] in HEAVY
    ]
    assert heavy == [], "\n".join(heavy)


def test_the_cache_core_never_imports_django():
    _, external = graph()
    django = [
        f"{m} line {line} imports {dotted}"
        for m, found in sorted(external.items())
        if _under(m, ("cache",)) and not _under(m, CACHE_DJANGO)
        for dotted, line in found
        if dotted.split(".")[0] in ("django", "huey")
    ]
    assert django == [], "\n".join(django)


def test_the_graph_resolves_relative_and_function_level_imports(tmp_path):
    files = {
        "pa/__init__.py": "",
        "pa/one.py": "from . import two\n",
        "pa/two.py": "def f():\n    from .sub.three import g\n",
        "pa/sub/__init__.py": "",
        "pa/sub/three.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pa import one\n"
        "def g():\n    import pa.one\n    import torch\n",
        "pb/__init__.py": "",
        "pb/four.py": "from pa.sub import three\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges, external = graph(tmp_path, ("pa", "pb"))
    assert edges["pa.one"] == {"pa.two": 1} and edges["pa.two"] == {"pa.sub.three": 2}
    assert edges["pa.sub.three"] == {"pa.one": 5} and edges["pb.four"] == {"pa.sub.three": 1}
    assert external["pa.sub.three"] == [("typing.TYPE_CHECKING", 1), ("torch", 6)]
    assert cycles(edges) == [["pa.one", "pa.two", "pa.sub.three", "pa.one"]]


def test_the_cli_starts_without_the_engine():
    """`omlx` imports no engine, mlx-lm or transformers before a command needs them (seconds of
    every `omlx keys`, `omlx pull`, `--help` and refusal at start otherwise): a real interpreter
    builds the CLI's parser (every command's) and lists what came with it."""
    import subprocess
    import sys

    heavy = ("inference.engine", "mlx_lm", "transformers", "torch", "mlx.core")
    probe = (
        "import sys\nfrom omlx_site.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print('loaded:', [m for m in {heavy!r} if m in sys.modules])"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True, timeout=120
    )
    assert "usage: omlx" in found.stdout, found.stdout + found.stderr  # the parser was built
    assert found.stdout.splitlines()[-1] == "loaded: []", found.stdout[-2000:] + found.stderr
