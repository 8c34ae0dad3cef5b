"""The environment variables the Django settings modules read, found in their source (not by importing them).

Importing a settings module would read this machine's environment and mooncake.yaml, create the data folder
and, for production, demand SECRET_KEY; the page must not depend on any of that. So each call of a
webapp.settings.env reader (`env_int("NAME", default)`, ...) is found in the syntax tree, and described by
its `#:` doc-comment (Sphinx's convention for attribute docs): one ending the call's line, or the `#:`
lines just above it, else its statement's.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

# webapp.settings.env's readers and the type of value each reads.
READERS = {
    "env_str": "string",
    "env_required": "string",
    "env_bool": "boolean",
    "env_int": "integer",
    "env_list": "comma-separated list",
    "env_path": "path",
}
# Constant arithmetic a default may be written as (5 * 1024 * 1024), shown as its value.
_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop)
# The module whose defaults the others (local, production) change; its default is shown unlabelled.
BASE_MODULE = "base"


@dataclass(frozen=True, slots=True)
class EnvRead:
    """One read of a variable: by which settings module, as what type, its default there, and its doc."""

    variable: str
    module: str
    kind: str
    default: object  # the value, or Required / Computed
    doc: str


class Required:
    """The default of env_required's variables: there is none, the settings refuse to load without it."""


@dataclass(frozen=True, slots=True)
class Computed:
    """A default computed from other settings (e.g. DATA_DIR / "staticfiles"): shown as its source."""

    source: str


def env_reads(package: Path) -> list[EnvRead]:
    """Every reader call in the package's modules (env.py, which defines them, aside), in source order."""
    reads: list[EnvRead] = []
    for path in sorted(package.glob("*.py")):
        if path.stem in ("env", "__init__"):
            continue
        source = path.read_text(encoding="utf-8")
        docs = _doc_comments(source)
        for statement in ast.parse(source).body:
            calls = [node for node in ast.walk(statement) if isinstance(node, ast.Call)]
            for call in calls:
                read = _reader_call(call)
                if read is not None:
                    # The call's own doc (one statement may read two variables), else its statement's.
                    doc = _doc(call, docs) or _doc(statement, docs)
                    reads.append(EnvRead(read[0], path.stem, read[1], read[2], doc))
    return reads


def _reader_call(node: ast.Call) -> tuple[str, str, object] | None:
    """(variable, type, default) when `node` calls a reader with the variable's name written out."""
    if not (isinstance(node.func, ast.Name) and node.func.id in READERS):
        return None
    if not node.args or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
        return None
    name = node.args[0].value
    if node.func.id == "env_required":
        return name, READERS[node.func.id], Required()
    default_node = node.args[1] if len(node.args) > 1 else None
    return name, READERS[node.func.id], _default(default_node)


def _default(node: ast.expr | None) -> object:
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    expression = ast.Expression(body=node)
    if all(isinstance(part, _ARITHMETIC) for part in ast.walk(expression)):
        # Only constants and operators (checked above): nothing to look up, nothing to call.
        return eval(compile(expression, "<default>", "eval"), {"__builtins__": {}})
    return Computed(ast.unparse(node))


def _doc_comments(source: str) -> tuple[dict[int, str], dict[int, str]]:
    """Line number -> a `#:` comment's text, for comments alone on their line and for those ending a line
    of code (tokenized, so a "#:" inside a string is not one): a line's own doc must not document the
    statement below it."""
    alone: dict[int, str] = {}
    trailing: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and token.string.startswith("#:"):
            where = alone if token.line.strip().startswith("#") else trailing
            where[token.start[0]] = token.string[2:].strip()
    return alone, trailing


def _doc(node: ast.stmt | ast.expr, docs: tuple[dict[int, str], dict[int, str]]) -> str:
    """A `#:` comment ending one of the node's lines, else the `#:` lines just above its first."""
    alone, trailing = docs
    end = node.end_lineno or node.lineno
    own = [trailing[line] for line in range(node.lineno, end + 1) if line in trailing]
    if own:
        return " ".join(own)
    above: list[str] = []
    line = node.lineno - 1
    while line in alone:
        above.insert(0, alone[line])
        line -= 1
    return " ".join(above)
