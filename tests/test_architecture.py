"""The house rules of ARCHITECTURE.md, checked on the source: sizes (no module over 600
lines, no function over 80), no import cycle between modules, and imports that only go
down the layers (the folder tree is the data flow)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backend", "policies", "sim")
MAX_MODULE_LINES = 600  # modules are cut by concept; a size never splits one
MAX_FUNCTION_LINES = 80  # "a function over ~80 lines is a prompt to look"

#: Bottom to top. A module may import its own group and groups of lower layers only;
#: groups that share a layer are independent of each other.
LAYERS = (
    {"backend"},  # allocators, the step's batch, block moves
    {"backend.real"},  # the real torch/Triton backend over those
    {"policies"},  # scheduling, batching, preemption, eviction, routing
    {"sim.inputs"},  # what every reader of user input shares: strict models, text files
    {"sim.catalog"},  # models, GPUs, links and the physics constants, with their sources
    {"sim.config"},  # the scenario and everything it resolves
    {"sim.workload"},  # requests from a scenario
    {"sim.engine", "sim.costs"},  # serving them step by step; what a step costs
    {"sim.output"},  # records -> files, summary, report
    {"sim.run"},  # scenario -> run -> outputs
    {"sim.hil", "sim.sweep"},  # validation against the real backend; sweeps and capacity
    {"sim.live"},  # live endpoints: observe one, serve one, compare and calibrate with them
    {"sim.recorded"},  # recorded runs of real engines: import, replay, compare, calibrate
    {"sim.cli"},  # the commands
)
LAYER_OF = {group: i for i, layer in enumerate(LAYERS) for group in layer}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = modules()


def group_of(module: str) -> str:
    """The layer group a module belongs to (``sim.engine.replica`` -> ``sim.engine``)."""
    parts = module.split(".")
    if parts[0] == "backend":
        return "backend.real" if parts[1:2] == ["paged"] else "backend"
    if parts[0] == "sim":
        return ".".join(parts[:2])
    return parts[0]


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def project_imports(path: Path, typing_too: bool = False) -> set[str]:
    """Project modules ``path`` imports (anywhere but under ``if TYPE_CHECKING``, unless
    ``typing_too``), resolved to the deepest module that exists."""
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node) and not typing_too:
            return
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                targets.add(sub if sub in MODULES else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {t for t in targets if t.split(".")[0] in PACKAGES and t in MODULES}


IMPORTS = {name: project_imports(path) for name, path in MODULES.items()}


def test_every_module_is_in_a_layer():
    assert {group_of(m) for m in MODULES if m not in PACKAGES} <= set(LAYER_OF)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_and_function_sizes(name):
    source = MODULES[name].read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"{name} is over {MAX_MODULE_LINES}"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            size = node.end_lineno - node.lineno + 1
            assert size <= MAX_FUNCTION_LINES, f"{name}.{node.name}(): {size} lines"


def test_imports_only_go_down_the_layers():
    upward = []
    for module, targets in IMPORTS.items():
        if module in PACKAGES:
            continue
        mine = group_of(module)
        for target in targets:
            theirs = group_of(target) if target not in PACKAGES else target
            if theirs == mine:
                continue
            if theirs not in LAYER_OF or LAYER_OF[theirs] >= LAYER_OF[mine]:
                upward.append(f"{module} -> {target}")
    assert upward == []


def find_cycle(imports: dict[str, set[str]]) -> list[str] | None:
    """An import cycle (its modules, the first repeated at the end), or None: depth-first
    search, where an edge back to a module on the current path closes a cycle."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        path.append(module)
        for target in sorted(imports.get(module, ())):
            if target in path:
                return path[path.index(target) :] + [target]
            if target not in done and (cycle := visit(target)):
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(imports):
        if module not in done and (cycle := visit(module)):
            return cycle
    return None


def test_no_import_cycle():
    cycle = find_cycle(IMPORTS)
    assert cycle is None, " -> ".join(cycle)


def test_no_cycle_of_types_in_the_engine():
    """Within the engine, even imports made for type hints alone form no circle: a
    module that names another's type depends on it as a reader follows the code."""
    engine = {
        m: project_imports(p, typing_too=True)
        for m, p in MODULES.items()
        if m.startswith("sim.engine")
    }
    cycle = find_cycle(engine)
    assert cycle is None, " -> ".join(cycle)


def test_the_checks_can_fail():
    """The rules catch what they are for (guards against a vacuous walk)."""
    assert group_of("sim.engine.replica") == "sim.engine"
    assert LAYER_OF["sim.output"] > LAYER_OF["sim.engine"] > LAYER_OF["policies"]
    assert "sim.engine.records" in IMPORTS["sim.output.steplog"]
    assert not any(t.startswith(("sim", "policies")) for t in IMPORTS["backend.blocks.manager"])
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_engine_holds_no_block_arithmetic():
    """How many blocks tokens take is the allocator's answer (backend.base's sizes): an
    allocator with groups or windows counts differently, and the engine must not know."""
    engine = [name for name in MODULES if name.startswith("sim.engine.")]
    uses = [name for name in engine if "block_size" in MODULES[name].read_text()]
    assert engine and not uses, f"block_size read in {uses}"
