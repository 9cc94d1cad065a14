"""What an algorithm teaches the warm start: examples that show a small model how to read the
algorithm's privileged context (HP-RLVR's hindsight block, SDPO's teacher prompt).

An algorithm whose context must be taught sets `teaching` on its class to a subclass of
`Teaching`: its settings (a config's `model.warm_start.teach.<the algorithm's class path>`) and
`example`, which writes one example. The warm start (harness/start.py, harness/models.py) lays
out a `fraction` of its examples by each teaching it is given and names no algorithm itself.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from rollout.ranges import UnitInterval, check_fields
from tasks.base import Problem, Task


@dataclass
class Teaching:
    """Settings of the examples that teach one privileged context."""

    fraction: UnitInterval = 0.0
    """Share of the warm start's examples laid out this way. Every algorithm of a suite starts
    from the same weights, so this is part of the suite's base model, not of one algorithm's run."""

    def __post_init__(self):
        check_fields(self)

    def example(self, task: Task, problem: Problem, tokenizer, rng: random.Random) -> tuple[list[int], list[int]]:
        """(input_ids, labels) of one example (labels -100 where nothing is learnt), drawing any
        randomness from `rng` (the warm start's own: its examples are then the same every build)."""
        raise NotImplementedError

    def key(self) -> dict:
        """These settings as the starting weights' cache key holds them (entries of its
        `warm_start`): by default under the teaching's class path, apart from any other's."""
        return {f"{type(self).__module__}.{type(self).__qualname__}": asdict(self)}

    def templates(self) -> dict:
        """The templates its examples are written in, by name (entries of the weights' recipe):
        a template changed changes the key, and the weights are built again."""
        return {}
