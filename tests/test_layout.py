"""The package's shape, as docs/architecture.md states it: small folders and modules, no module
using another's private names, imports pointing down the layers (cli -> evaluation -> diloco ->
fsdp -> comm -> collectives -> compressors -> kernels, `checks` for all; integrations above fsdp,
imported by nothing; inside evaluation run -> testbed -> report -> analyses -> benches -> model ->
profiles -> workloads -> common) and no import circles."""
import ast
import functools
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gradcomp"
LAYERS = ["kernels", "compressors", "collectives", "comm", "fsdp", "diloco", "integrations", "evaluation", "cli"]  # bottom to top
EVALUATION_LAYERS = ["common", "workloads", "profiles", "model", "benches", "analyses", "report", "testbed",
                     "run"]
MAX_MODULES_PER_FOLDER = 12
MAX_LINES = 450
#: The parts of a kernel family's package (`gradcomp/kernels/<family>/`): the torch reference,
#: the Python entry points and the `@triton.jit` sources, side by side.
FAMILY_PARTS = ("reference", "launcher", "jit")
#: The collectives of their own, in `gradcomp.collectives` (module: what it defines).
COLLECTIVES = {"blocksparse": "block_sparse_all_reduce", "forest": "forest_all_reduce",
               "forest_packing": "pack_forest"}


def module_name(path: Path) -> str:
    parts = ("gradcomp",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


@functools.lru_cache(maxsize=None)
def parsed(name: str) -> ast.Module:
    """Module `name`'s syntax tree (parsed once: every test reads the same files; not to be
    changed)."""
    return ast.parse(MODULES[name].read_text())


def imports(name: str, top_level_only: bool = False):
    """(imported module, imported names) for each import statement of module `name`."""
    tree = parsed(name)
    nodes = tree.body if top_level_only else ast.walk(tree)
    package = name if is_package(name) else name.rpartition(".")[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [a.name for a in node.names]
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
            for sub in submodules:
                yield sub, []
            rest = [n for n in names if f"{base}.{n}" not in MODULES]
            if rest or not submodules:
                yield base, rest


def layer(name: str) -> tuple[int, int] | None:
    """(layer, layer inside evaluation) of a gradcomp module; None for the package's face and
    `checks`, which every layer may use."""
    parts = name.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        return None
    if parts[1] != "evaluation":
        return LAYERS.index(parts[1]), 0
    if len(parts) == 2:  # the face re-exports from every layer
        return LAYERS.index(parts[1]), len(EVALUATION_LAYERS)
    return LAYERS.index(parts[1]), EVALUATION_LAYERS.index(parts[2])


@pytest.mark.parametrize("folder", sorted({p.parent for p in MODULES.values()}),
                         ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_folder_holds_more_than_a_dozen_modules(folder):
    assert len(list(folder.glob("*.py"))) <= MAX_MODULES_PER_FOLDER


def test_no_module_is_over_450_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in MODULES.items()}
    assert {n: k for n, k in long.items() if k > MAX_LINES} == {}


def test_no_module_imports_another_modules_private_names():
    private = [(name, target, n) for name in MODULES for target, names in imports(name)
               if target.startswith("gradcomp") for n in names
               if n.startswith("_") and not n.startswith("__")]
    private += [(name, target, "") for name in MODULES for target, _ in imports(name)
                if target.startswith("gradcomp") and target.split(".")[-1].startswith("_")
                and not target.endswith("__")]
    assert private == []


def test_imports_point_down_the_layers():
    upward = []
    for name in MODULES:
        mine = layer(name)
        for target, _ in imports(name):
            theirs = layer(target) if target.startswith("gradcomp.") else None
            if mine is None or theirs is None:
                continue
            inside_evaluation = theirs[0] == mine[0] == LAYERS.index("evaluation")
            if theirs[0] > mine[0] or (inside_evaluation and theirs[1] > mine[1]):
                upward.append((name, target))
            if name == "gradcomp.checks" and target.startswith("gradcomp."):
                upward.append((name, target))
    assert upward == []


def test_nothing_in_gradcomp_imports_the_trainer_integrations():
    """`gradcomp.integrations` imports trainers (Lightning, Accelerate): no other module may
    import it, so that importing gradcomp never imports a trainer."""
    users = [(name, target) for name in MODULES if not name.startswith("gradcomp.integrations")
             for target, _ in imports(name) if target.startswith("gradcomp.integrations")]
    assert users == []


def test_module_level_imports_form_no_circle():
    graph = {name: sorted({t for t, _ in imports(name, top_level_only=True)
                           if t in MODULES and t != name}) for name in MODULES}
    circles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


def kernel_families() -> list[str]:
    return sorted(n.rpartition(".")[2] for n in MODULES
                  if n.count(".") == 2 and n.startswith("gradcomp.kernels.") and is_package(n))


def test_no_kernel_tree_mirrors_another():
    """Each kernel family lives in one place, not in parallel trees of the same names (as
    kernels/quantize.py beside kernels/jit/quantize.py did): a module name under
    gradcomp/kernels names one folder only, apart from the parts every family package has."""
    folders = defaultdict(set)
    for name in MODULES:
        if not name.startswith("gradcomp.kernels."):
            continue
        package, _, last = name.rpartition(".")
        if not (last in FAMILY_PARTS and package.rpartition(".")[2] in kernel_families()):
            folders[last].add(package)
    assert {n: sorted(f) for n, f in folders.items() if len(f) > 1} == {}


def test_each_kernel_family_holds_its_parts_side_by_side():
    """A family package holds its launcher and its `@triton.jit` source, and its torch
    reference; only the families' `jit` modules and the shared
    `tiles` and `stats` import Triton when they load."""
    families = kernel_families()
    assert families, "no kernel family packages under gradcomp/kernels"
    missing = [(f, part) for f in families for part in FAMILY_PARTS
               if f"gradcomp.kernels.{f}.{part}" not in MODULES]
    triton_users = {n for n in MODULES for target, _ in imports(n, top_level_only=True)
                    if target.split(".")[0] == "triton"}
    allowed = {"gradcomp.kernels.tiles", "gradcomp.kernels.stats"}
    allowed |= {f"gradcomp.kernels.{f}.jit" for f in families}
    assert (missing, sorted(triton_users - allowed)) == ([], [])


def test_collectives_live_apart_from_the_hook_path():
    """`comm/` holds the hook path; the collectives of their own (block-sparse all-reduce,
    forest packing, the forest all-reduce) are defined in `gradcomp.collectives` and nowhere
    else (comm may re-export them)."""
    where = {}
    for name in MODULES:
        for node in parsed(name).body:
            if (isinstance(node, (ast.FunctionDef, ast.ClassDef))
                    and node.name in COLLECTIVES.values()):
                where.setdefault(node.name, []).append(name)
    assert where == {fn: [f"gradcomp.collectives.{m}"] for m, fn in COLLECTIVES.items()}


def _defined_in(prefixes: tuple[str, ...]):
    """(module name, its parsed tree) for every module under the packages `prefixes`."""
    for name in MODULES:
        if name.startswith(prefixes):
            yield name, parsed(name)


def test_auto_is_a_route_not_a_subclass_of_the_hook_state():
    """`auto` plugs into the hook state as a route beside the fixed one; a subclass of
    `HookState` there would override the state's internals again."""
    subclasses = [(name, node.name) for name, tree in _defined_in(("gradcomp.comm.auto",))
                  for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                  for base in node.bases
                  if (base.id if isinstance(base, ast.Name) else getattr(base, "attr", ""))
                  == "HookState"]
    assert subclasses == []


#: The one module of the hook path that divides by the world size (`Communicator.average`).
AVERAGING_MODULE = "gradcomp.comm.communicators.base"
DIVISIONS = {"div", "div_", "divide", "divide_", "true_divide", "true_divide_"}


def _mentions_world_size(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Name) and "world_size" in n.id)
               or (isinstance(n, ast.Attribute) and "world_size" in n.attr)
               for n in ast.walk(node))


def _divisions_by_the_world_size(tree: ast.AST) -> list[int]:
    """Lines dividing by an expression that names the world size: x / world_size,
    x /= world_size, t.div_(ranks.world_size), torch.div(t, dist.get_world_size(g)), ..."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            divisor = node.right
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div):
            divisor = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in DIVISIONS):
            divisor = ast.Tuple(elts=[*node.args, *(k.value for k in node.keywords)])
        else:
            continue
        if _mentions_world_size(divisor):
            lines.append(node.lineno)
    return lines


def test_the_hook_path_divides_by_the_world_size_in_one_place():
    """A bucket is averaged in one place: every communicator leaves the division by the world
    size to `Communicator.average` (else a new communicator may divide twice, or not at all)."""
    found = {name: lines for name, tree in _defined_in(("gradcomp.comm", "gradcomp.collectives"))
             if (lines := _divisions_by_the_world_size(tree))}
    averaging = found.pop(AVERAGING_MODULE, [])
    assert found == {}
    assert len(averaging) == 1
