"""Reading an answer without running it: what reasoning-gym's scorers get in place of `eval`.

Nine of its scorers evaluate the policy's answer as Python: four with `eval` (n_queens,
spiral_matrix, binary_matrix, string_insertion), five through sympy's `parse_expr`, which ends in
`eval` too (countdown, puzzle24, polynomial_multiplication, simple_integration,
intermediate_integration). An answer is then code in the scorer's process, and code there can
write the scorer's reply or patch the scorer for every later answer. Inside `read_safely`, a
scorer's `eval` reads Python literals only, and sympy evaluates only arithmetic over its own
numbers, symbols and functions: no attribute, subscript, lambda or comprehension, and no name
but sympy's (plus `abs` and `pow`). An answer outside that scores 0, as an unreadable one does.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator

NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.keyword, ast.Name, ast.Load)
NODES += (ast.Constant, ast.Tuple, ast.List, ast.operator, ast.unaryop, ast.cmpop)
"""What a sympy answer's code may hold once parse_expr has rewritten it (`Integer (2 )*Symbol ('x' )`)."""
PLAIN_FUNCTIONS = ("abs", "pow", "sqrt", "cbrt", "root", "real_root")
"""Names a sympy answer may call that are functions rather than sympy classes or values."""


class Refused(ValueError):
    """An answer that asks for more than a literal or arithmetic: read as wrong."""


def literal(source, globals=None, locals=None):  # noqa: A002 - eval's own signature
    """`eval` for a scorer: a Python literal (lists, tuples, strings, numbers) or Refused."""
    if not isinstance(source, str):
        raise Refused("only text is read")
    try:
        return ast.literal_eval(source.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as error:
        raise Refused(f"not a literal: {type(error).__name__}") from None


def allowed(value) -> bool:
    import sympy

    if isinstance(value, sympy.Basic):  # numbers, symbols, constants such as pi
        return True
    if isinstance(value, type) and issubclass(value, sympy.Basic):  # Integer, Symbol, sin, exp, ...
        return True
    return False


def sympy_code(code, local_dict, global_dict):
    """sympy's `eval_expr` over `code` from `stringify_expr`, refusing all but arithmetic."""
    if not isinstance(code, str):
        raise Refused("only parse_expr's evaluated form is read")
    try:
        tree = ast.parse(code, mode="eval")
    except (SyntaxError, MemoryError, RecursionError) as error:
        raise Refused(f"unreadable: {type(error).__name__}") from None
    names = {}
    for node in ast.walk(tree):
        if not isinstance(node, NODES):
            raise Refused(f"{type(node).__name__} is not arithmetic")
        if isinstance(node, ast.Call) and not isinstance(node.func, ast.Name):
            raise Refused("only named functions may be called")
        if isinstance(node, ast.Name):
            value = local_dict[node.id] if node.id in local_dict else global_dict.get(node.id, Refused)
            if value is Refused or not (allowed(value) or (node.id in PLAIN_FUNCTIONS and callable(value))):
                raise Refused(f"the name {node.id!r} is not sympy's")
            names[node.id] = value
    return eval(compile(tree, "<answer>", "eval"), {"__builtins__": {}}, names)  # noqa: S307 - checked above


@contextlib.contextmanager
def read_safely(*scorer_globals: dict) -> Iterator[None]:
    """While inside: `eval` in the scorer's modules (their globals given) reads literals only,
    and sympy's parse_expr evaluates arithmetic only (every module's, sympify's included)."""
    from sympy.parsing import sympy_parser

    spaces = list({id(space): space for space in scorer_globals}.values())
    before = [space.get("eval", Refused) for space in spaces]
    before_sympy, sympy_parser.eval_expr = sympy_parser.eval_expr, sympy_code
    for space in spaces:
        space["eval"] = literal
    try:
        yield
    finally:
        sympy_parser.eval_expr = before_sympy
        for space, was in zip(spaces, before):
            if was is Refused:
                del space["eval"]
            else:
                space["eval"] = was
