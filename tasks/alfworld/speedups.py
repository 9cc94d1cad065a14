"""Memoised parses for TextWorld's PDDL engine, which stock re-parses on every reset and step:
the same transitions, several times cheaper. Process-wide and reversible (`set_speedups`)."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from collections import OrderedDict
from typing import Any

from tasks.alfworld.official import _goal_of

# --------------------------------------------------------------------------------------------
# Speed-ups for TextWorld's PDDL engine
#
# Stock TextWorld re-parses, on every reset and step, text that never changes: the grammar's
# symbol strings (a TatSu parse per admissible command), the conditions of its rules, and the
# whole PDDL translation of the game (twice per reset). The patches below memoise those parses;
# every transition stays identical to stock (tests/test_alfworld_games.py replays walkthroughs
# both ways). They are process-wide and reversible: `set_speedups(False)` restores stock.


class _LRU(OrderedDict):
    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def get_or(self, key: Any, make: Any) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = self[key] = make()
        if len(self) > self.maxsize:
            self.popitem(last=False)
        return value


# Games whose PDDL translation stays in memory (~0.4 MB each at the default GameSize): a pool
# cycling through more games than this pays the translation (~0.05 s) again on their resets.
TRANSLATION_CACHE_SIZE = 512

_SYMBOLS = _LRU(4096)
_QUERIES = _LRU(4096)
_TRANSLATIONS = _LRU(2 * TRANSLATION_CACHE_SIZE)
_LOGICS = _LRU(64)
_ORIGINALS: dict[str, Any] = {}


def _textworld_modules() -> tuple[Any, Any]:
    import textworld.envs.pddl.logic as pddl_logic
    from textworld.envs.pddl import textgen

    return textgen, pddl_logic


def speedups_enabled() -> bool:
    return bool(_ORIGINALS)


def set_speedups(enabled: bool) -> None:
    """Memoise TextWorld's repeated parsing (True) or restore stock TextWorld (False)."""
    textgen, pddl_logic = _textworld_modules()
    if enabled and not _ORIGINALS:
        _ORIGINALS.update(
            parse=textgen._parse_and_convert,
            rule=textgen.Rule,
            fd=pddl_logic.fast_downward,
            copy=textgen.copy_context,
            deepcopy=textgen.deepcopy,
        )
        textgen._parse_and_convert = _cached_symbols
        textgen.Rule = _CachedRule
        pddl_logic.fast_downward = _CachedDownward(_ORIGINALS["fd"])
        textgen.copy_context = _copy_context
        textgen.deepcopy = _copy_symbols
    elif not enabled and _ORIGINALS:
        textgen._parse_and_convert = _ORIGINALS["parse"]
        textgen.Rule = _ORIGINALS["rule"]
        pddl_logic.fast_downward = _ORIGINALS["fd"]
        textgen.copy_context = _ORIGINALS["copy"]
        textgen.deepcopy = _ORIGINALS["deepcopy"]
        _ORIGINALS.clear()


def _copy_context(context: dict) -> dict:
    """textgen's copy_context deep-copies the context's variables and mapping (entity infos and
    PDDL variables, each holding much of the game) for every symbol of every admissible command's
    derivation: most of a step's cost. Derivation adds entries to those dicts but never changes
    the objects in them, so new dicts over the same objects are copy enough."""
    return {**context, "variables": dict(context["variables"]), "mapping": dict(context["mapping"])}


def _cached_symbols(text: str, **kwargs: Any) -> Any:
    # derive() assigns contexts to the parsed symbols and pops them: hand out copies.
    key = (text, tuple(sorted(kwargs.items())))
    return _copy_symbols(_SYMBOLS.get_or(key, lambda: _ORIGINALS["parse"](text, **kwargs)))


def _copy_symbols(value: Any) -> Any:
    """textgen's deepcopy, for what it copies: parsed symbols (a list of them, or one), each
    made again with its own attributes and its nested symbol (a list's item, a condition's
    expression) copied likewise. Their strings and context dicts are shared, not copied:
    derivation gives a symbol a new context and never changes one in place (as `_copy_context`
    relies on). Anything else goes to copy.deepcopy. The same derivations at a fraction of
    deepcopy's cost (docs/performance.md, "ALFWorld's engine, second round")."""
    from textworld.envs.pddl.textgen import Symbol

    if isinstance(value, list) and all(isinstance(item, Symbol) for item in value):
        return [_copy_symbols(item) for item in value]
    if not isinstance(value, Symbol):
        return copy.deepcopy(value)
    made = object.__new__(type(value))
    made.__dict__.update(vars(value))
    for name in ("symbol", "expression"):
        inner = getattr(made, name, None)
        if isinstance(inner, Symbol):
            setattr(made, name, _copy_symbols(inner))
    return made


class _CachedRule:
    """Stands in for textworld.logic.Rule inside textgen, whose only use is parsing queries
    (read-only afterwards)."""

    @staticmethod
    def parse_conjunctive_query(expr: str) -> Any:
        return _QUERIES.get_or(expr, lambda: _ORIGINALS["rule"].parse_conjunctive_query(expr))


class _CachedDownward:
    """The fast_downward module as textworld's PDDL logic sees it, with a memoised translation.
    PddlState only reads the translated task. Also puts back sys.argv, which the translator
    overwrites."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def pddl2sas(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        def translate() -> Any:
            argv = sys.argv
            try:
                return self._module.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
            finally:
                sys.argv = argv

        key = (hashlib.sha1(domain.encode()).hexdigest(), hashlib.sha1(problem.encode()).hexdigest(), optimize)
        return _TRANSLATIONS.get_or(key, translate)


_TEMPLATE_TASK = "Your task is to: UNKNOWN GOAL."


def _fast_logic(domain: str, grammar: str) -> Any:
    """GameLogic for a game. Parsing the grammar file is the bulk of loading a game, and games
    differ only in their task sentence: parse the template once, swap in the task rule."""
    from textworld.envs.pddl.logic import GameLogic
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar

    goal = _goal_of(grammar)
    sentence = f"Your task is to: {goal}."
    template = grammar.replace(sentence, _TEMPLATE_TASK, 1) if goal else grammar
    digest = (hashlib.sha1(domain.encode()).hexdigest(), hashlib.sha1(template.encode()).hexdigest())
    # Anything unusual (no task line, a JSON escape in it, a grammar that differs elsewhere from
    # the template): parse the whole grammar, as stock does.
    if not goal or "\\" in goal or grammar.count(sentence) != 1 or _TEMPLATE_TASK not in template:
        return _LOGICS.get_or(
            digest + (hashlib.sha1(grammar.encode()).hexdigest(),), lambda: GameLogic(domain, grammar)
        )
    base = _LOGICS.get_or(digest, lambda: GameLogic(domain, template))
    logic = copy.copy(base)
    logic.grammar = ContextSensitiveGrammar()
    logic.grammar._rules = dict(base.grammar._rules)
    task = ContextSensitiveGrammar.parse(json.dumps({"task": [{"rhs": sentence}]}))
    logic.grammar._rules["task"] = task._rules["task"]
    return logic
