"""The import graph of ``src/tailwise`` keeps its shape: no cycles, no private names, layers down.

Every module is parsed with :mod:`ast` (nothing is imported) and every import
statement counts, wherever it sits: at module level, inside a function (a lazy
import) or under ``if TYPE_CHECKING:`` (a type-only one); each still ties the
two modules together. Relative imports are resolved. ``from pkg import name``
is an edge to the submodule ``pkg.name`` when there is one, else to ``pkg``;
``import a.b`` is an edge to ``a.b`` only (Python also runs ``a/__init__``,
but counting it would make every module depend on the ``tailwise`` facade).

The rules, each its own test:

* no import cycle among tailwise modules (each strongly connected component
  is reported with one cycle through it and the imports that make it);
* no private name (``_x``, not a dunder) imported from another module;
* imports point downward across :data:`LAYERS` (within one unit, or within a
  layer, anything goes), and every module is placed in a layer;
* engines never import each other;
* inside ``loadgen``, imports point downward across its stages
  (:data:`LOADGEN_STAGES`: llm, transport, engine, ..., runner, sweep), and every
  loadgen module is in one.

The self-tests at the bottom build a small package in ``tmp_path`` with one of
each violation and check that the checker reports exactly those.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# The layer map, lowest layer first: (layer, units), a unit being a module or a package
# with everything under it. A module may import its own unit, its own layer and anything
# below; engines (ENGINES) never import each other. docs/architecture.md mirrors this
# table: change both together. The bare root ("tailwise", the package __init__ with the
# run() facade) is the only unit that does not take in what lies under it.
Layers = Sequence[tuple[str, Sequence[str]]]
LAYERS: Layers = (
    (
        "L0 foundation",
        (
            "tailwise.errors",
            "tailwise.version",
            "tailwise.clock",
            "tailwise.units",
            "tailwise.limits",  # resource budgets every input is sized against
            "tailwise.credentials",  # the secret values given, scrubbed from every output
            "tailwise.files",  # bounded reads, safe YAML, atomic writes
            "tailwise.imagefmt",  # PNG written, image sizes read: loadgen and the demo share it
            "tailwise.records",
            "tailwise.distributions",
        ),
    ),
    (
        "L1 models",
        (
            "tailwise.arrivals",
            "tailwise.traces",  # request traces with their LLM lengths, read for arrivals
            "tailwise.metrics",
            "tailwise.capacity",
            "tailwise.knee",
            "tailwise.knee_law",  # the load law a knee search reads its levels with
            "tailwise.plan",
            "tailwise.laws",  # queueing laws shared by the demo server and the simulator
            "tailwise.instrument",  # in-process tracking: a library services import
        ),
    ),
    ("L2 engines", ("tailwise.loadgen", "tailwise.sim", "tailwise.server", "tailwise.proxy")),
    ("L3 fitting and presentation", ("tailwise.calibrate", "tailwise.report")),
    ("L4 edge", ("tailwise.cli", "tailwise.demo", "tailwise", "tailwise.__main__")),
)
ENGINES = "L2 engines"

# Inside the load generator, its stages as sub-packages (docs/architecture.md, "The load
# generator, downward"), lowest first, read by the same checker: a stage imports its own
# sub-package and the stages below it, never one above. Change both together.
LOADGEN_STAGES: Layers = (
    ("llm", ("tailwise.loadgen.llm",)),  # what a server is asked and answers; sends nothing
    ("transport", ("tailwise.loadgen.transport",)),  # the Transport seam, HTTP beneath it
    ("engine", ("tailwise.loadgen.engine",)),  # the loop: engines, sessions, the loss watch
    ("observe", ("tailwise.loadgen.observe",)),  # the server beside the load: metrics, GPUs
    ("prepare", ("tailwise.loadgen.prepare",)),  # options -> Prepared, the bodies, preflight
    ("execute", ("tailwise.loadgen.execute",)),  # one process: results, writer, spill, live
    ("conclude", ("tailwise.loadgen.conclude",)),  # summary, verdict, files
    ("scale", ("tailwise.loadgen.scale",)),  # the same engine across workers
    ("runner", ("tailwise.loadgen.runner",)),  # chooses; run() is the Python API
    ("sweep", ("tailwise.loadgen.sweep", "tailwise.loadgen.sweep_probe")),  # a run per rate
)


@dataclass(frozen=True)
class Edge:
    """One imported module (or one name of a ``from`` import) at one line."""

    source: str
    target: str  # the module the edge points to (a submodule when a name is one)
    line: int
    where: str = ""  # "" at module level, else "lazy" and/or "type-only"
    origin: str = ""  # the module a ``from`` statement names
    name: str = ""  # the name it takes ("" for ``import x``)

    def __str__(self) -> str:
        note = f" ({self.where})" if self.where else ""
        return f"{self.source}:{self.line} -> {self.target}{note}"


# -- reading the graph ---------------------------------------------------------------


def find_modules(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``src/package``."""
    out: dict[str, Path] = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def absolute(module: str | None, level: int, current: str, is_package: bool) -> str:
    """The module a (possibly relative) ``from`` statement names, seen from ``current``."""
    if level == 0:
        return module or ""
    parts = current.split(".") if is_package else current.split(".")[:-1]
    if level - 1 > len(parts) - 1:
        raise ValueError(f"{current}: relative import beyond the top package")
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, module] if module else parts)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


class _Imports(ast.NodeVisitor):
    """Collects the edges of one module to modules of ``package``."""

    def __init__(self, current: str, is_package: bool, modules: Collection[str], package: str):
        self.current, self.is_package = current, is_package
        self.modules, self.package = modules, package
        self.context: list[str] = []
        self.edges: list[Edge] = []

    def _inside(self, label: str, body: Iterable[ast.AST]) -> None:
        self.context.append(label)
        for node in body:
            self.visit(node)
        self.context.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._inside("lazy", [*node.decorator_list, *node.body])

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self._inside("type-only", node.body)
        for stmt in node.orelse:
            self.visit(stmt)

    def _ours(self, module: str) -> bool:
        return module == self.package or module.startswith(self.package + ".")

    def _known(self, module: str) -> str:
        """The longest prefix of ``module`` that is a module here."""
        while module not in self.modules and "." in module:
            module = module.rsplit(".", 1)[0]
        return module

    def _add(self, target: str, line: int, origin: str = "", name: str = "") -> None:
        where = ", ".join(dict.fromkeys(self.context))
        self.edges.append(Edge(self.current, self._known(target), line, where, origin, name))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if self._ours(alias.name):
                self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        origin = absolute(node.module, node.level, self.current, self.is_package)
        if not self._ours(origin):
            return
        origin = self._known(origin)
        for alias in node.names:
            sub = f"{origin}.{alias.name}"
            target = sub if sub in self.modules else origin
            self._add(target, node.lineno, origin, alias.name)


def import_edges(src: Path, package: str) -> tuple[list[str], list[Edge]]:
    """Every module of ``package`` under ``src``, and every import among them."""
    modules = find_modules(src, package)
    edges: list[Edge] = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        visitor = _Imports(name, path.name == "__init__.py", modules, package)
        visitor.visit(tree)
        edges.extend(visitor.edges)
    return list(modules), edges


# -- the rules -----------------------------------------------------------------------


def components(edges: Iterable[Edge]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set())
        graph.setdefault(e.target, set())
        if e.source != e.target:
            graph[e.source].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def shortest_cycle(scc: Sequence[str], edges: Iterable[Edge]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside it."""
    inside = set(scc)
    nxt: dict[str, set[str]] = {}
    for e in edges:
        if e.source in inside and e.target in inside and e.source != e.target:
            nxt.setdefault(e.source, set()).add(e.target)
    start = scc[0]
    came: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(nxt.get(v, ())):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w not in came:
                came[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def cycle_report(scc: Sequence[str], edges: Sequence[Edge]) -> str:
    inside = set(scc)
    lines = [f"cycle among {len(scc)} modules: {' -> '.join(shortest_cycle(scc, edges))}"]
    lines += [
        f"    {e}"
        for e in sorted(edges, key=lambda e: (e.source, e.line, e.target))
        if e.source in inside and e.target in inside and e.source != e.target
    ]
    return "\n".join(dict.fromkeys(lines))  # one line per import, however many names


def private_imports(edges: Iterable[Edge]) -> list[str]:
    """``from m import _x``: ``_x`` is ``m``'s own business (dunders are public)."""
    return [
        f"{e.source}:{e.line} imports {e.name} from {e.origin}"
        for e in edges
        if e.name.startswith("_") and not (e.name.startswith("__") and e.name.endswith("__"))
    ]


def unit_of(module: str, layers: Layers) -> tuple[int, str] | None:
    """(layer index, unit) of ``module``: the longest unit that is it or holds it."""
    best: tuple[int, str] | None = None
    for i, (_, units) in enumerate(layers):
        for unit in units:
            holds = "." in unit and module.startswith(unit + ".")
            if (module == unit or holds) and (best is None or len(unit) > len(best[1])):
                best = (i, unit)
    return best


def unplaced(modules: Iterable[str], layers: Layers) -> list[str]:
    return [m for m in modules if unit_of(m, layers) is None]


def upward_imports(edges: Iterable[Edge], layers: Layers) -> list[str]:
    out = []
    for e in edges:
        src, dst = unit_of(e.source, layers), unit_of(e.target, layers)
        if src is not None and dst is not None and src[1] != dst[1] and dst[0] > src[0]:
            out.append(f"{e}: {layers[src[0]][0]} imports {layers[dst[0]][0]}")
    return list(dict.fromkeys(out))


def engine_imports(edges: Iterable[Edge], layers: Layers, engines: str) -> list[str]:
    out = []
    for e in edges:
        src, dst = unit_of(e.source, layers), unit_of(e.target, layers)
        if src is None or dst is None or src[1] == dst[1]:
            continue
        if layers[src[0]][0] == engines and layers[dst[0]][0] == engines:
            out.append(f"{e}: engine {src[1]} imports engine {dst[1]}")
    return list(dict.fromkeys(out))


def _fail(what: str, problems: Sequence[str]) -> None:
    if problems:
        pytest.fail(f"{len(problems)} {what}:\n" + "\n".join(problems), pytrace=False)


# -- the rules on src/tailwise -------------------------------------------------------


@pytest.fixture(scope="module")
def tailwise_graph() -> tuple[list[str], list[Edge]]:
    return import_edges(SRC, "tailwise")


def test_the_graph_is_read(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    modules, edges = tailwise_graph
    assert "tailwise.records" in modules and "tailwise.instrument.tracker" in modules
    assert any(e.target == "tailwise.errors" for e in edges)


def test_no_import_cycles(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    _, edges = tailwise_graph
    _fail("import cycles", [cycle_report(scc, edges) for scc in components(edges)])


def test_no_private_names_imported(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    _fail("private names imported from another module", private_imports(tailwise_graph[1]))


def test_every_module_has_a_layer(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    modules = unplaced(tailwise_graph[0], LAYERS)
    _fail(
        "modules in no layer",
        [f"{m}: add it to LAYERS (and docs/architecture.md)" for m in modules],
    )


def test_imports_point_downward(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    _fail("imports pointing up the layers", upward_imports(tailwise_graph[1], LAYERS))


def test_engines_do_not_import_each_other(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    _fail("imports between engines", engine_imports(tailwise_graph[1], LAYERS, ENGINES))


def test_every_loadgen_module_has_a_stage(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    inside = [m for m in tailwise_graph[0] if m.startswith("tailwise.loadgen.")]
    _fail(
        "loadgen modules in no stage",
        [
            f"{m}: add it to LOADGEN_STAGES (and docs/architecture.md)"
            for m in unplaced(inside, LOADGEN_STAGES)
        ],
    )


def test_loadgen_stages_point_downward(tailwise_graph: tuple[list[str], list[Edge]]) -> None:
    _fail("imports pointing up loadgen's stages", upward_imports(tailwise_graph[1], LOADGEN_STAGES))


# -- the checker, proven on a small package --------------------------------------------

TOY_LAYERS: Layers = (
    ("L0", ("toy.base", "toy.version")),
    ("L1", ("toy.model",)),
    ("L2", ("toy.eng1", "toy.eng2")),
    ("L3", ("toy",)),
)
TOY = {
    "__init__.py": "from toy.eng1 import x\nfrom toy import eng2\n",
    "version.py": "__version__ = '1'\n",
    "base.py": (
        "import os\n"
        "from toy.version import __version__\n"
        "\n"
        "def later():\n"
        "    from toy.model import a  # up: L0 -> L1\n"
        "    return a\n"
    ),
    "model/__init__.py": "from . import a\n",
    "model/a.py": (
        "from typing import TYPE_CHECKING\n"
        "from .b import helper\n"
        "_hidden = 1\n"
        "if TYPE_CHECKING:\n"
        "    from toy.model.b import Thing\n"
    ),
    "model/b.py": (
        "from .. import version\n"
        "\n"
        "def helper():\n"
        "    from . import a  # closes the cycle a -> b -> a\n"
        "    return a\n"
        "\n"
        "class Thing: ...\n"
    ),
    "eng1/__init__.py": "",
    "eng1/x.py": (
        "import toy.eng2.y\nfrom toy.model.a import _hidden\nfrom toy.base import later\n"
    ),
    "eng2/__init__.py": "",
    "eng2/y.py": "import json\nfrom toy.model import b\n",
    "stray.py": "x = 1\n",
}


@pytest.fixture
def toy(tmp_path: Path) -> tuple[list[str], list[Edge]]:
    for name, text in TOY.items():
        path = tmp_path / "toy" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return import_edges(tmp_path, "toy")


def test_checker_resolves_every_kind_of_import(toy: tuple[list[str], list[Edge]]) -> None:
    modules, edges = toy
    assert sorted(modules) == [
        "toy",
        "toy.base",
        "toy.eng1",
        "toy.eng1.x",
        "toy.eng2",
        "toy.eng2.y",
        "toy.model",
        "toy.model.a",
        "toy.model.b",
        "toy.stray",
        "toy.version",
    ]
    assert sorted(str(e) for e in edges) == [
        "toy.base:2 -> toy.version",
        "toy.base:5 -> toy.model.a (lazy)",  # from a package: the submodule
        "toy.eng1.x:1 -> toy.eng2.y",
        "toy.eng1.x:2 -> toy.model.a",
        "toy.eng1.x:3 -> toy.base",
        "toy.eng2.y:2 -> toy.model.b",
        "toy.model.a:2 -> toy.model.b",  # relative, from a module
        "toy.model.a:5 -> toy.model.b (type-only)",
        "toy.model.b:1 -> toy.version",  # two levels up, then the submodule
        "toy.model.b:4 -> toy.model.a (lazy)",
        "toy.model:1 -> toy.model.a",  # relative, from a package's __init__
        "toy:1 -> toy.eng1.x",
        "toy:2 -> toy.eng2",
    ]


def test_checker_finds_the_cycle(toy: tuple[list[str], list[Edge]]) -> None:
    _, edges = toy
    assert components(edges) == [["toy.model.a", "toy.model.b"]]
    assert cycle_report(["toy.model.a", "toy.model.b"], edges) == (
        "cycle among 2 modules: toy.model.a -> toy.model.b -> toy.model.a\n"
        "    toy.model.a:2 -> toy.model.b\n"
        "    toy.model.a:5 -> toy.model.b (type-only)\n"
        "    toy.model.b:4 -> toy.model.a (lazy)"
    )


def test_checker_finds_a_longer_cycle() -> None:
    ring = [Edge("p.a", "p.b", 1), Edge("p.b", "p.c", 1), Edge("p.c", "p.a", 1)]
    spur = [Edge("p.c", "p.d", 2), Edge("p.d", "p.e", 1), Edge("p.a", "p.a", 3)]
    assert components(ring + spur) == [["p.a", "p.b", "p.c"]]
    assert shortest_cycle(["p.a", "p.b", "p.c"], ring) == ["p.a", "p.b", "p.c", "p.a"]
    assert components(spur) == []  # a module importing itself is not a cycle between two


def test_checker_finds_the_private_import(toy: tuple[list[str], list[Edge]]) -> None:
    assert private_imports(toy[1]) == ["toy.eng1.x:2 imports _hidden from toy.model.a"]


def test_checker_finds_the_upward_import(toy: tuple[list[str], list[Edge]]) -> None:
    assert upward_imports(toy[1], TOY_LAYERS) == ["toy.base:5 -> toy.model.a (lazy): L0 imports L1"]


def test_checker_finds_the_engine_import(toy: tuple[list[str], list[Edge]]) -> None:
    assert engine_imports(toy[1], TOY_LAYERS, "L2") == [
        "toy.eng1.x:1 -> toy.eng2.y: engine toy.eng1 imports engine toy.eng2"
    ]


def test_checker_finds_the_unplaced_module(toy: tuple[list[str], list[Edge]]) -> None:
    assert unplaced(toy[0], TOY_LAYERS) == ["toy.stray"]
    assert unit_of("toy", TOY_LAYERS) == (3, "toy")
    assert unit_of("toy.model.a", TOY_LAYERS) == (1, "toy.model")
    assert unit_of("toy.baseline", TOY_LAYERS) is None  # a unit holds its dotted children only


def test_relative_imports_resolve() -> None:
    assert absolute("b", 1, "p.q.a", is_package=False) == "p.q.b"
    assert absolute(None, 1, "p.q", is_package=True) == "p.q"
    assert absolute("z", 2, "p.q.a", is_package=False) == "p.z"
    assert absolute("p.x", 0, "p.q.a", is_package=False) == "p.x"
    with pytest.raises(ValueError, match="beyond the top"):
        absolute("x", 3, "p.a", is_package=False)
