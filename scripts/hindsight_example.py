"""What HP-RLVR's hindsight view sees for one scored segment of a failed math rollout, with the
default template and the tiny model's tokenizer (docs/algorithms.md shows its output):
`python scripts/hindsight_example.py`."""

import random

from algorithms.hp_rlvr import HindsightTemplate, render_block, segment_bounds
from harness.tiny import build_tokenizer
from tasks.math import MathTask


def render_example(segments: int = 4, segment: int = 1, seed: int = 3) -> str:
    tokenizer, task = build_tokenizer(), MathTask(train_size=20, eval_size=5)
    problem = task.train_problems()[seed]
    completion = task.corrupt(problem, random.Random(seed))
    ids = tokenizer(completion, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    a, b = segment_bounds(0, len(ids), segments)[segment]
    block = render_block(tokenizer, HindsightTemplate(), ids[b:], task.verify(problem, completion).feedback)
    context = tokenizer.decode(block) + problem.prompt + tokenizer.decode(ids[:a])
    return (
        f"rollout:  {problem.prompt!r} -> {completion!r}\n"
        f"segment {segment} of {segments} (tokens {a}..{b - 1}): {tokenizer.decode(ids[a:b])!r}\n"
        f"hindsight context before its first token:\n{context}|"
    )


if __name__ == "__main__":
    print(render_example())
