"""The code's shape: which package may import which, no import cycles, and no oversized modules.

Read from the source with `ast` (every import statement, function-local and TYPE_CHECKING ones included),
so it runs in a fraction of a second and needs neither torch nor Django.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("inference", "webapp")
APPS = ("accounts", "api", "chat", "console", "core", "documents", "organize", "preferences", "serving")
CONTRACT = "inference.api"
MAX_LINES = 300
REASON = "Over 300 lines:"


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module, as precise as the files allow
    line: int
    in_function: bool  # runs when the function is called
    type_only: bool  # under `if TYPE_CHECKING:`: never runs

    @property
    def top_level(self) -> bool:
        """Runs when the importing module is imported."""
        return not (self.in_function or self.type_only)

    def where(self) -> str:
        return f"{self.source}:{self.line}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of `packages` by dotted name (migrations left out: Django writes them)."""
    files: dict[str, Path] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                files[_module_name(path)] = path
    return files


def _resolve(name: str, known: dict[str, Path]) -> str:
    """`name`, or its longest prefix that is one of our modules (`from a.b import Class` is module a.b)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return name


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(
    node: ast.AST, in_function: bool = False, type_only: bool = False
) -> Iterator[tuple[ast.AST, bool, bool]]:
    """Every node below `node`, with whether it is inside a function and whether under TYPE_CHECKING."""
    for child in ast.iter_child_nodes(node):
        yield child, in_function, type_only
        if _type_checking(child):
            assert isinstance(child, ast.If)
            for stmt in child.body:
                yield stmt, in_function, True
                yield from _walk(stmt, in_function, True)
            for stmt in child.orelse:
                yield stmt, in_function, type_only
                yield from _walk(stmt, in_function, type_only)
            continue
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _walk(child, inner, type_only)


def imports_of(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node, in_function, type_only in _walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, `level - 1` packages up
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from package import submodule` imports the submodule; `from module import name` the module.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for name in names:
            target = _resolve(name, known)
            if target != module:
                found.append(Import(module, target, getattr(node, "lineno", 0), in_function, type_only))
    return found


def import_graph(packages: Iterable[str] = PACKAGES) -> list[Import]:
    known = source_files(packages)
    return [imp for module, path in known.items() for imp in imports_of(module, path, known)]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _describe(component: list[str], imports: list[Import], node_of: dict[str, str]) -> str:
    """The component, one shortest cycle through its first node, and every link inside it."""
    members = set(component)
    step: dict[tuple[str, str], Import] = {}
    for imp in imports:
        pair = (node_of.get(imp.source, ""), node_of.get(imp.target, ""))
        if pair[0] in members and pair[1] in members and pair[0] != pair[1]:
            step.setdefault(pair, imp)
    first = component[0]
    came_from: dict[str, str] = {}
    frontier = [first]
    while frontier and first not in came_from:
        nxt_frontier = []
        for node in frontier:
            for source, target in step:
                if source == node and target not in came_from:
                    came_from[target] = node
                    nxt_frontier.append(target)
        frontier = nxt_frontier
    path = [first]
    while len(path) == 1 or path[-1] != first:
        path.append(came_from[path[-1]])
    path.reverse()
    links = [f"    {imp.where()} imports {imp.target}" for _, imp in sorted(step.items())]
    return f"{', '.join(component)} import one another, e.g. {' -> '.join(path)}:\n" + "\n".join(links)


def _app_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "webapp" and parts[1] in APPS else None


# ---- the rules -------------------------------------------------------------------------------------


def test_engine_never_imports_the_web_app() -> None:
    bad = [
        f"{imp.where()} imports {imp.target}"
        for imp in import_graph(["inference"])
        if imp.target.split(".")[0] in ("webapp", "django")
    ]
    assert not bad, "inference/ must not import webapp or django:\n" + "\n".join(bad)


def test_no_import_cycles_inside_the_engine() -> None:
    imports = [imp for imp in import_graph(["inference"]) if imp.target.startswith("inference")]
    edges: dict[str, set[str]] = {}
    for imp in imports:
        edges.setdefault(imp.source, set()).add(imp.target)
    found = cycles(edges)
    modules = {m: m for m in source_files(["inference"])}
    assert not found, "import cycles in inference/:\n" + "\n".join(
        _describe(c, imports, modules) for c in found
    )


def test_no_import_cycles_between_web_apps() -> None:
    imports = import_graph(["webapp"])
    node_of = {m: app for m in source_files(["webapp"]) if (app := _app_of(m))}
    edges: dict[str, set[str]] = {}
    for imp in imports:
        source, target = node_of.get(imp.source), node_of.get(imp.target)
        if source and target and source != target:
            edges.setdefault(source, set()).add(target)
    found = cycles(edges)
    assert not found, "apps that import each other (move what both need into webapp/core):\n" + "\n".join(
        _describe(c, imports, node_of) for c in found
    )


def test_no_import_cycles_between_web_modules() -> None:
    """Counting imports inside functions: a cycle "broken" by a deferred import is still a cycle (a Celery
    task's module and the service that queues it: the work lives in a third module both import)."""
    imports = [
        imp for imp in import_graph(["webapp"]) if imp.target.startswith("webapp") and not imp.type_only
    ]
    edges: dict[str, set[str]] = {}
    for imp in imports:
        edges.setdefault(imp.source, set()).add(imp.target)
    found = cycles(edges)
    modules = {m: m for m in source_files(["webapp"])}
    assert not found, "import cycles in webapp/:\n" + "\n".join(_describe(c, imports, modules) for c in found)


def test_core_and_serving_sit_below_the_apps() -> None:
    """webapp.core (settings and cross-app plumbing) imports no other web app; webapp.serving (runtime,
    generation service, limits, streams) imports only core; chat, the API and the console present it."""
    below = {"core": {"core"}, "serving": {"core", "serving"}}
    bad = [
        f"{imp.where()} imports {imp.target}"
        for imp in import_graph(["webapp"])
        if (source := _app_of(imp.source)) in below
        and (target := _app_of(imp.target)) is not None
        and target not in below[source]
    ]
    assert not bad, "core and serving must not import the apps above them:\n" + "\n".join(bad)


def test_modules_over_300_lines_say_why() -> None:
    oversized = []
    for path in source_files().values():
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.strip().startswith(REASON) for line in doc.splitlines()):
            oversized.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not oversized, (
        f"modules over {MAX_LINES} lines: split them, or give a line starting {REASON!r} "
        "in the module docstring:\n" + "\n".join(oversized)
    )


def _contract_path() -> Path:
    path = source_files(["inference"]).get(CONTRACT)
    if path is None:
        pytest.skip(f"{CONTRACT} does not exist yet: the torch-free rule applies once it does")
    return path


def test_contract_module_imports_no_torch() -> None:
    path = _contract_path()
    known = source_files(["inference"])
    bad = [
        f"{imp.where()} imports {imp.target}"
        for imp in imports_of(CONTRACT, path, known)
        if imp.target.split(".")[0] == "torch" and not imp.type_only  # annotations may name torch types
    ]
    assert not bad, f"{CONTRACT} is the web layer's torch-free contract:\n" + "\n".join(bad)


def test_contract_module_loads_no_torch() -> None:
    """Importing it runs its packages' __init__ and its module-level imports: none may bring torch."""
    _contract_path()
    imports = import_graph(["inference"])
    by_source: dict[str, list[Import]] = {}
    for imp in imports:
        if imp.top_level:
            by_source.setdefault(imp.source, []).append(imp)
    parts = CONTRACT.split(".")
    todo = [".".join(parts[:end]) for end in range(1, len(parts) + 1)]
    chain: dict[str, str] = {m: "" for m in todo}
    bad: list[str] = []
    while todo:
        module = todo.pop()
        for imp in by_source.get(module, []):
            if imp.target.split(".")[0] == "torch":
                bad.append(f"{imp.where()} imports {imp.target}{chain[module]}")
            elif imp.target in by_source or imp.target.startswith("inference."):
                # A module's packages run their __init__ first.
                target = imp.target.split(".")
                for end in range(1, len(target) + 1):
                    reached = ".".join(target[:end])
                    if reached not in chain:
                        chain[reached] = f" (reached from {imp.where()})"
                        todo.append(reached)
    assert not bad, f"importing {CONTRACT} loads torch:\n" + "\n".join(sorted(bad))


def test_the_web_layer_builds_sampling_params_in_one_place() -> None:
    """Chat replies, titles and API requests get their SamplingParams from webapp.serving.sampling, so the
    engine's checks become the same 400 everywhere."""
    builders: list[str] = []
    for module, path in source_files(["webapp"]).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "SamplingParams":
                builders.append(f"{module}:{node.lineno}")
    assert [where.split(":")[0] for where in builders] == ["webapp.serving.sampling"], builders


# The engine's layers: the contract and shared settings at the top of inference/, then models (architectures
# and weights), core (the step loop), the front-ends that serve a model, and the manager over them.
LAYERS = {
    "inference.models": ("inference.core", "inference.frontends", "inference.manager"),
    "inference.core": ("inference.frontends", "inference.manager"),
    "inference.frontends": ("inference.manager",),
}
# A front-end built on another: a supervised server is served as a remote one once it is up.
FRONTEND_BASES = {"inference.frontends.supervised": ("inference.frontends.remote",)}


def _package_of(module: str, packages: Iterable[str]) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def test_engine_layers_import_downwards_only() -> None:
    bad = []
    for imp in import_graph(["inference"]):
        layer = _package_of(imp.source, LAYERS)
        if layer and _package_of(imp.target, LAYERS[layer]):
            bad.append(f"{imp.where()} ({layer}) imports {imp.target}")
    assert not bad, "an engine layer imports one above it:\n" + "\n".join(bad)


def test_front_ends_do_not_import_one_another() -> None:
    modules = source_files(["inference"])
    front_ends = sorted(
        {".".join(m.split(".")[:3]) for m in modules if m.count(".") >= 3 and ".frontends." in m}
    )
    bad = []
    for imp in import_graph(["inference"]):
        source, target = _package_of(imp.source, front_ends), _package_of(imp.target, front_ends)
        if source and target and source != target and target not in FRONTEND_BASES.get(source, ()):
            bad.append(f"{imp.where()} imports {imp.target}")
    assert front_ends, "no front-end packages found under inference/frontends"
    assert not bad, "front-ends share code through inference/frontends' own modules:\n" + "\n".join(bad)


def test_the_web_layer_reaches_the_engine_through_the_contract_registry_and_manager() -> None:
    """Engine types are chosen by inference.frontends.registry; the web app never names a front-end, the
    core or a model module, so a new engine type or architecture changes nothing in webapp/."""
    allowed = ("inference.api", "inference.metrics", "inference.frontends.registry", "inference.manager")
    bad = [
        f"{imp.where()} imports {imp.target}"
        for imp in import_graph(["webapp", "inference"])
        if imp.source.startswith("webapp.")
        and imp.target.startswith("inference")
        and imp.target != "inference"
        and not _package_of(imp.target, allowed)
    ]
    assert not bad, "the web layer imports engine internals:\n" + "\n".join(bad)


# ---- inference/models, by concept -----------------------------------------------------------------


def test_architectures_and_layers_know_quantization_only_by_its_base() -> None:
    """A layer asks its LinearMethod (or EmbeddingLookup); which formats and kernels exist is
    quantization's business, so a new format or kernel changes no architecture."""
    bad = [
        f"{imp.where()} imports {imp.target}"
        for imp in import_graph(["inference"])
        if _package_of(imp.source, ("inference.models.architectures", "inference.models.layers"))
        and _package_of(imp.target, ("inference.models.quantization", "inference.models.kernels"))
        and imp.target != "inference.models.quantization.base"
    ]
    assert not bad, "architectures and layers import quantization only through its base:\n" + "\n".join(bad)


def test_the_gguf_format_loads_no_torch() -> None:
    """Reading a GGUF's header (the console, `mooncake check`, the memory plan) never imports torch."""
    bad = [
        f"{imp.where()} imports {imp.target}"
        for imp in import_graph(["inference"])
        if imp.source.startswith("inference.models.gguf")
        and imp.top_level
        and imp.target.split(".")[0] == "torch"
    ]
    assert not bad, "inference.models.gguf imports torch at module level:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "module",
    [
        "inference.models.gguf.reader",
        "inference.models.registry",
        "inference.models.quantization.plan",
        "inference.manager.native_path",
        "inference.manager.footprint",
    ],
)
def test_header_readers_and_the_plan_import_no_torch(module: str) -> None:
    import subprocess
    import sys

    code = f"import sys, {module}; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0, module


def test_the_manager_keeps_no_gguf_type_tables() -> None:
    """The block types live in quantization/plan.py alone: a list elsewhere drifts (it did, three times)."""
    names = ("Q4_0", "Q4_K", "IQ4_XS")
    bad = []
    for module, path in source_files(["inference"]).items():
        if not module.startswith("inference.manager"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names:
                bad.append(f"{module}:{node.lineno} names {node.value!r}")
    assert not bad, "inference/manager defines GGUF type lists (use quantization.plan's):\n" + "\n".join(bad)


def test_every_native_source_is_in_a_librarys_build_hash() -> None:
    from inference.models.kernels.build import CSRC, LIBRARIES

    hashed = {path for library in LIBRARIES for path in library.inputs}
    files = {path for path in CSRC.rglob("*") if path.is_file()}
    assert files and files <= hashed, sorted(str(p.relative_to(CSRC)) for p in files - hashed)
