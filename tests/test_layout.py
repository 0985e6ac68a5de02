"""The house's layout: modules import one way (no cycle, models/ above nothing but the bottom
modules), and what a preset means is read from one module."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import probe
from probe.models.registry import PRETRAIN_PES, REGISTRY
from probe.presets import CONTEXTS, LM_RECIPES, PRESETS, RECIPE_DEFAULTS, RECIPES, listed, training_recipe
from probe.studies.plans import PE_SETS

PACKAGE = Path(probe.__file__).parent
# what models/ may import from outside itself
BOTTOM = {"probe", "probe.errors", "probe.atomic", "probe.presets", "probe.compat"}


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def imports_of(name: str, path: Path, modules: set[str], everywhere: bool) -> set[str]:
    """The probe modules ``name`` imports: at module level (type-checking imports included), or with
    ``everywhere`` also inside functions. ``from a import b`` counts as a.b where b is a module, else as a."""
    found: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def record(node: ast.stmt) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".")
                if node.level
                else node.module or ""
            )
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            record(node)

    tree = ast.parse(path.read_text())
    if everywhere:
        for node in ast.walk(tree):
            record(node)
    else:
        visit(tree.body)
    return {m for m in found if m in modules and m != name}


def import_graph(everywhere: bool = False) -> dict[str, set[str]]:
    names = module_names()
    return {name: imports_of(name, path, set(names), everywhere) for name, path in names.items()}


def documented_layers() -> list[list[str]]:
    """The architecture page's map, bottom first: each line's leading names (``tasks/, corpus/``)."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    block = text.split("```")[1].strip().splitlines()
    layers = []
    for line in block:
        if line.startswith(" "):
            continue  # a continuation of the line above
        names = re.match(r"((?:[\w.]+/?,\s*)*[\w.]+/?)", line).group(1)
        layers.append([n.strip().removesuffix("/").removesuffix(".py") for n in names.split(",")])
    return layers


def layer_of(module: str, layers: list[list[str]]) -> int:
    top = "__init__" if module == "probe" else module.split(".")[1]
    return next(i for i, names in enumerate(layers) if top in names)


def test_every_module_sits_on_a_documented_layer_and_imports_none_above_it():
    layers = documented_layers()
    documented = {name for names in layers for name in names}
    top_level = {"__init__" if m == "probe" else m.split(".")[1] for m in module_names()}
    assert top_level == documented, f"undocumented: {top_level - documented}; gone: {documented - top_level}"
    graph = import_graph(everywhere=True)
    upward = [
        f"{module} imports {other}"
        for module, imported in sorted(graph.items())
        for other in sorted(imported)
        if layer_of(other, layers) > layer_of(module, layers)
    ]
    assert not upward, "\n".join(upward)


def test_the_layering_test_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import probe.errors\n\ndef f():\n    from probe.studies import plans\n")
    modules = {"probe.errors", "probe.studies", "probe.studies.plans"}
    assert imports_of("probe.x", source, modules, everywhere=False) == {"probe.errors"}
    assert imports_of("probe.x", source, modules, everywhere=True) == {"probe.errors", "probe.studies.plans"}


def test_the_root_holds_only_the_top_level():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == [
        "__init__.py",
        "atomic.py",
        "cli.py",
        "compat.py",
        "device.py",
        "errors.py",
        "precision.py",
        "presets.py",
    ]


def test_no_module_of_probe_imports_itself_back():
    graph = import_graph()
    done: set[str] = set()

    def cycle_from(path: list[str]) -> list[str] | None:
        """A cycle reachable from the last module of ``path`` (the modules being imported), or None."""
        for other in sorted(graph[path[-1]]):
            if other in path:
                return [*path[path.index(other) :], other]
            if other not in done and (found := cycle_from([*path, other])):
                return found
        done.add(path[-1])
        return None

    for module in sorted(graph):
        cycle = None if module in done else cycle_from([module])
        assert cycle is None, " -> ".join(cycle)


def test_models_import_nothing_above_them():
    graph = import_graph(everywhere=True)
    for module, imported in graph.items():
        if module.startswith("probe.models"):
            above = {m for m in imported if not m.startswith("probe.models") and m not in BOTTOM}
            assert not above, f"{module} imports {above}"
    for module in BOTTOM:
        assert graph[module] <= {"probe.errors"}, module


def test_every_table_of_presets_names_presets_and_each_recipe_is_whole():
    from probe.training.train_config import TrainConfig

    recipe_fields = {f.name for f in dataclasses.fields(TrainConfig)} & {
        "steps",
        "lr",
        "dropout",
        "batch_size",
        "weight_decay",
        "warmup",
        "schedule",
        "beta2",
    }
    assert set(RECIPES) <= set(PRESETS) and set(LM_RECIPES) <= set(PRESETS) and set(CONTEXTS) == set(PRESETS)
    for table in (RECIPES, LM_RECIPES):
        for preset, recipe in table.items():
            assert set({**RECIPE_DEFAULTS, **recipe}) == recipe_fields, preset
    assert training_recipe("tiny", "scan", code=False) == {**RECIPE_DEFAULTS, **RECIPES["tiny"]}
    assert listed(RECIPES) == "tiny, small or base" and probe.PRESETS is PRESETS


def test_the_pretrained_pes_are_the_papers_three_and_the_pretrain_set():
    # Appendix "Pretraining at 1.3B Scale": NoPE, ALiBi and Rotary, in the registry's order
    assert PRETRAIN_PES == ("nope", "alibi", "rotary") == PE_SETS["pretrain"]
    assert all(REGISTRY[pe].in_paper for pe in PRETRAIN_PES)


def test_only_the_resolver_asks_whether_a_name_is_an_hf_model():
    """An analysis never asks what kind of subject it has: `is_external` is defined in models/hf.py and
    called in subjects/resolve.py, nowhere else (function-level imports included)."""
    users = sorted(
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if any(
            isinstance(node, ast.Name)
            and node.id == "is_external"
            or isinstance(node, ast.alias)
            and node.name == "is_external"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert users == ["probe/models/hf.py", "probe/subjects/resolve.py"]


def _functions(tree: ast.AST, outer: str = "") -> list[tuple[str, ast.AST]]:
    """(``Class.method`` or ``function``, its node) of every function of ``tree``, nested ones under their own."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{outer}{node.name}"
            found += [(name, node)] if not isinstance(node, ast.ClassDef) else []
            found += _functions(node, f"{name}.")
    return found


def test_a_rope_scaling_reaches_a_model_through_attach_alone():
    """#51: attach() is the only way an intervention reaches a model, a RoPE scaling included: outside
    models/attach.py (and the intervention's own module) no function reads an intervention's ``.rope`` to load
    a model with it, an hf: model's included; extrapolation reads it to choose the candidates a model takes."""
    readers = sorted(
        f"{path.relative_to(PACKAGE)}:{name}"
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).as_posix() not in ("models/attach.py", "models/interventions.py")
        for name, function in _functions(ast.parse(path.read_text()))
        if any(isinstance(node, ast.Attribute) and node.attr == "rope" for node in ast.walk(function))
    )
    assert readers == ["extrapolation/plan.py:_not_applicable"]


def test_no_function_in_the_package_is_over_60_lines():
    """A function a reader takes in at once: none in probe/ runs past 60 lines (its signature and docstring
    counted); ruff's C901 holds their complexity to 12 beside it."""
    long = [
        f"{path.relative_to(PACKAGE.parent)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long, long


def untyped(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of each public function and public class's public method (``__init__`` and ``__call__``
    too) that leaves an argument or its return unannotated (``__init__`` may leave its ``None``)."""
    found = []

    def check(fn: ast.FunctionDef | ast.AsyncFunctionDef, owner: str) -> None:
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if owner and args and args[0].arg in ("self", "cls"):
            args = args[1:]
        starred = [a for a in (fn.args.vararg, fn.args.kwarg) if a is not None]
        if any(a.annotation is None for a in args + starred) or (fn.returns is None and fn.name != "__init__"):
            found.append((fn.lineno, owner + fn.name))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            check(node, "")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for member in node.body:
                public = not member.name.startswith("_") if hasattr(member, "name") else False
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    public or member.name in ("__init__", "__call__")
                ):
                    check(member, f"{node.name}.")
    return found


def test_every_public_function_is_typed():
    """Every public function and method in probe/ says what it takes and gives: models as TransformerLens' own
    protocol (``TransformerLensModel``), figures as plotly's, a run loaded from disk as ``PETransformer``."""
    bare = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {name}"
        for path in PACKAGE.rglob("*.py")
        for line, name in untyped(ast.parse(path.read_text()))
    ]
    assert not bare, bare


def test_the_typing_rule_sees_each_kind_of_gap():
    source = """
def typed(a: int, *rest: str) -> None: ...
def bare_arg(a) -> None: ...
def bare_return(a: int): ...
def _private(a): ...
class Thing:
    def __init__(self, a: int): ...
    def method(self, b) -> int: ...
    def _helper(self, c): ...
    def __call__(self, d: int): ...
    def outer(self) -> None:
        def inner(e): ...
class _Hidden:
    def method(self, b): ...
def stars(*args, **kwargs) -> None: ...
"""
    found = [name for _, name in untyped(ast.parse(source))]
    assert found == ["bare_arg", "bare_return", "Thing.method", "Thing.__call__", "stars"]


def _private_names() -> set[str]:
    """The private names (one leading underscore) of what probe touches of torch and transformers: a module,
    a tensor, an optimizer, a config and a pretrained model, and torch's module of module-global state."""
    import torch
    import transformers

    owners = (
        torch.nn.Module(),
        torch.nn.modules.module,
        torch.zeros(1),
        torch.optim.SGD([torch.zeros(1, requires_grad=True)]),
        transformers.PretrainedConfig(),
        transformers.PreTrainedModel,
    )
    return {name for owner in owners for name in dir(owner) if name.startswith("_") and not name.startswith("__")}


THEIRS = ("torch", "transformers")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _their_module_names(tree: ast.AST) -> set[str]:
    """The names a file binds to torch's or transformers' modules and objects (``F``, ``nn``, ...)."""
    names = set(THEIRS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name.split(".")[0] in THEIRS}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in THEIRS:
            names |= {a.asname or a.name for a in node.names}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _read(node: ast.AST, private: set[str], theirs: set[str]) -> list[str]:
    """What ``node`` reads of torch's or transformers' private names, as the report words it."""
    if isinstance(node, ast.Attribute) and _is_private(node.attr):
        return [f".{node.attr}"] if node.attr in private or _root(node) in theirs else []
    if isinstance(node, ast.Constant) and node.value in private:
        return [repr(node.value)]
    if isinstance(node, ast.FunctionDef) and node.name in private:
        return [f"def {node.name} (overrides theirs)"]
    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in THEIRS:
        paths = [f"{node.module}.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import):
        paths = [a.name for a in node.names if a.name.split(".")[0] in THEIRS]
    else:
        return []
    return [f"import {p}" for p in paths if any(_is_private(part) for part in p.split("."))]
    return []


def private_reads(path: Path, private: set[str]) -> list[str]:
    """Where ``path`` reads a private name of torch or transformers: an attribute of theirs (``x._modules``,
    ``getattr(x, "_modules")``, ``super()._apply``, an override of one), a private part of a path from their
    modules (``torch.ops.aten._flash``, ``torch._dynamo``), a private module or name imported from them, or
    such a name as a string (``config.get("_name_or_path")``)."""
    tree = ast.parse(path.read_text())
    theirs = _their_module_names(tree)
    where = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path.name
    return [f"{where}:{getattr(n, 'lineno', 0)}: {read}" for n in ast.walk(tree) for read in _read(n, private, theirs)]


def test_torch_and_transformers_internals_are_read_in_compat_alone():
    """A private name of torch or transformers (one that a release may change without notice) is read in
    probe/compat.py, one small function each with the versions it was checked on, and nowhere else."""
    private = _private_names()
    reads = [
        r for path in sorted(PACKAGE.rglob("*.py")) if path.name != "compat.py" for r in private_reads(path, private)
    ]
    assert not reads, "private torch/transformers reads outside probe/compat.py:\n" + "\n".join(reads)


def test_the_internals_test_sees_each_kind_of_read(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import torch\nimport torch.nn.functional as F\nfrom torch._dynamo import config\n\n"
        "class M(torch.nn.Module):\n    def _apply(self, fn):\n        return super()._apply(fn)\n\n"
        "def f(m, c):\n    m._forward_hooks, getattr(m, '_modules'), c.get('_name_or_path')\n"
        "    return torch.ops.aten._foo, F._private, m._probe_own\n"
    )
    reads = [r.split(": ", 1)[1] for r in private_reads(source, _private_names())]
    assert sorted(reads) == [
        "'_modules'",
        "'_name_or_path'",
        "._apply",
        "._foo",
        "._forward_hooks",
        "._private",
        "def _apply (overrides theirs)",
        "import torch._dynamo.config",
    ]  # not m._probe_own: a name of probe's own


RESOLVER = PACKAGE / "subjects" / "resolve.py"  # the one module that knows what kind of subject it has
KINDS = (PACKAGE / "subjects" / "subject.py", PACKAGE / "subjects" / "readings.py")  # where the kinds are defined
CODE_TASK_HOME = PACKAGE / "corpus" / "prepared.py"  # where CODE_TASK is spelled, once


def subject_kinds(modules: tuple[Path, ...] = KINDS) -> tuple[set[str], set[str]]:
    """(every subject and reading class of the modules defining them, the kinds among them: those defined on top
    of another of them, as TaskRun on Subject or TextReading on Reading), read from their source."""
    classes = {
        node.name: {b.id for b in node.bases if isinstance(b, ast.Name)}
        for module in modules
        for node in ast.parse(module.read_text()).body
        if isinstance(node, ast.ClassDef)
    }
    found = {"Subject", "Reading"}
    while grown := {name for name, bases in classes.items() if bases & found} - found:
        found |= grown
    return found, found - {"Subject", "Reading"}


def kind_questions(source: str, types: set[str], kinds: set[str], allow_code_task: bool = False) -> list[str]:
    """What in ``source`` asks which kind of subject or reading it has: isinstance / issubclass against one of
    ``types``, ``type(x) is`` one, an import of one of ``kinds`` (the concrete ones), and the code task's name
    spelled as a literal (``"code"``), unless it is CODE_TASK's own definition and ``allow_code_task``."""
    found = []
    tree = ast.parse(source)
    defining = {
        id(node.value)
        for node in ast.walk(tree)
        if allow_code_task
        and isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["CODE_TASK"]
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
            against = node.args[1] if len(node.args) > 1 else None
            named = [e for e in (against.elts if isinstance(against, ast.Tuple) else [against]) if e is not None]
            found += [
                f"line {node.lineno}: {node.func.id}(..., {e.id})" for e in named if getattr(e, "id", None) in types
            ]
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Call)
            and getattr(node.left.func, "id", "") == "type"
        ):
            found += [
                f"line {node.lineno}: type(...) is {c.id}" for c in node.comparators if getattr(c, "id", None) in types
            ]
        elif isinstance(node, ast.alias) and node.name in kinds:
            found.append(f"imports {node.name}")
        elif isinstance(node, ast.Constant) and node.value == "code" and id(node) not in defining:
            found.append(f"line {node.lineno}: the literal 'code'")
    return found


def test_only_the_resolver_asks_what_kind_of_subject_it_has():
    """Every analysis written once: what differs by kind of subject is the subject's or its reading's to say
    (:mod:`probe.subjects.resolve`). Outside the resolver's module nothing checks a subject's or a reading's
    type, imports a concrete kind (TaskRun, HfModel, TextReading, ...), or spells the code task's name: not even
    the modules defining the kinds (:mod:`probe.subjects.subject`, :mod:`probe.subjects.readings`)."""
    types, kinds = subject_kinds()
    assert {"Subject", "TaskRun", "CodeRun", "HfModel", "Reading", "TaskReading", "TextReading"} <= types
    asking = [
        f"{path.relative_to(PACKAGE.parent)} {question}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != RESOLVER
        for question in kind_questions(path.read_text(), types, kinds, allow_code_task=path == CODE_TASK_HOME)
    ]
    assert not asking, "\n".join(asking)


def test_the_kind_rule_sees_each_way_of_asking():
    types, kinds = {"Subject", "HfModel", "TextReading"}, {"HfModel", "TextReading"}
    source = (
        "from probe.subjects.resolve import HfModel\n"
        "CODE_TASK = 'code'\n"
        "def f(s, r, config):\n"
        "    a = isinstance(s, (int, HfModel))\n"
        "    b = type(r) is TextReading\n"
        "    return config['task']['name'] == 'code'\n"
    )
    assert kind_questions(source, types, kinds, allow_code_task=True) == [
        "imports HfModel",
        "line 4: isinstance(..., HfModel)",
        "line 5: type(...) is TextReading",
        "line 6: the literal 'code'",
    ]
    assert "line 2: the literal 'code'" in kind_questions(source, types, kinds)
    assert kind_questions("def f(s):\n    return s.measure, isinstance(s, dict)\n", types, kinds) == []
