"""A griffe extension for the API reference (mkdocs.yml loads it; the site leaves it out): probe's
docstrings use Sphinx roles (``:func:`train_run```), which mkdocstrings prints as raw text, and most say
their parameters in prose. Here each role becomes a cross-reference (a link where its target is on the
site, code otherwise), and every parameter the signature has but the docstring does not list joins the
parameter table with its type and default, so each entry point has a complete table."""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|mod|attr|data|obj|exc):`(~?)([\w.]+)`")
PARAM = re.compile(r"^:param (?:[^:]*\s)?\*{0,2}(\w+):", re.MULTILINE)
STARS = {griffe.ParameterKind.var_positional: "*", griffe.ParameterKind.var_keyword: "**"}


class SphinxRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        for obj in _walk(pkg):
            if obj.docstring is None:
                continue
            obj.docstring.value = ROLE.sub(lambda m, o=obj: _reference(o, m[2], bool(m[1])), obj.docstring.value)
            if obj.is_function or obj.is_class:
                obj.docstring.value += _missing_parameters(obj)


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias and member.parent is obj:
            yield from _walk(member)


def _reference(obj: griffe.Object, target: str, short: bool) -> str:
    """An optional autoref (linked where the site documents the target, code where it does not)."""
    shown = f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"
    path = _resolve(obj, target)
    return shown if path is None else f'<autoref identifier="{path}" optional>{shown}</autoref>'


def _resolve(obj: griffe.Object, target: str) -> str | None:
    """The target's canonical path, read as Sphinx does: from the object's scope outwards, then absolute."""
    scope = obj if obj.is_module or obj.is_class else obj.parent
    scopes = []
    while scope is not None:
        scopes.append(scope.path + ".")
        scope = scope.parent
    for prefix in [*scopes, ""]:
        try:
            found = obj.modules_collection[prefix + target]
            return found.final_target.path if found.is_alias else found.path
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
    return None


def _missing_parameters(obj: griffe.Object) -> str:
    """``:param name:`` lines for what the signature has and the docstring does not list (not self, cls)."""
    try:
        parameters = obj.parameters
    except (AttributeError, griffe.AliasResolutionError):
        return ""
    listed = set(PARAM.findall(obj.docstring.value))
    missing = [
        STARS.get(p.kind, "") + p.name for p in parameters if p.name not in listed and p.name not in ("self", "cls")
    ]
    return "".join(f"\n:param {name}:" for name in missing) if missing else ""
