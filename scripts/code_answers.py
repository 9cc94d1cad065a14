"""What a policy gets wrong on the code task, line by line: each answer read back into its
pipeline (`tasks.code.parse_body`) and compared with the problem's own, step by step.

    python scripts/code_answers.py .cache/policies/<key> [--problems 500] [--samples 8]

The task is rebuilt from the policy's recipe.json (a warm-started tiny policy's cache entry).
Greedy answers on held-out and training problems are classed as `exact`, or by what differs:
`kind` (another step, e.g. `above` for `below`), `const` (the right step, another constant),
`red` (another reduction), `nsteps` (a step too many or too few), `unparsed`; `passed, not exact`
counts wrong bodies the hidden tests let through. Sampled at the given temperature with the
harness's own engine: the mean reward, pass@k (one of k samples right) and the share of groups
with both outcomes (those GRPO learns from). Judged as the warm start judges: an answer in the
task's own grammar by interpreting its pipeline, any other in the sandbox (`verify_trusted`).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, installed or not

from harness.config import ClassSpec
from harness.models import load_policy
from rollout.decoding import RolloutEngine, SamplingArgs
from tasks.code import parse_body


def classify(task, problem, completion: str) -> tuple[bool, str]:
    passed = task.verify_trusted(problem, completion).reward == 1.0
    parsed = parse_body(completion)
    if parsed is None:
        return passed, "unparsed"
    (steps, reduction), (steps_want, reduction_want, _) = parsed, task.pipelines[problem.id]
    wrong = []
    if len(steps) != len(steps_want):
        wrong.append("nsteps")
    else:
        for (kind, k), (kind_want, k_want) in zip(steps, steps_want):
            wrong += ["kind"] if kind != kind_want else ["const"] if k != k_want else []
    wrong += ["red"] if reduction != reduction_want else []
    return passed, "+".join(wrong) or "exact"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("policy", type=Path, help="a warm-started policy's directory (with its recipe.json)")
    parser.add_argument("--problems", type=int, default=500, help="of each split")
    parser.add_argument("--samples", type=int, default=8, help="k of pass@k")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()

    recipe = json.loads((args.policy / "recipe.json").read_text())
    cls = ClassSpec(recipe["task"]["class_path"]).resolve()
    made, current = recipe["task"].get("version", 0), cls.version
    if made != current:
        print(
            f"{args.policy}: warm-started on version {made} of the task's problems; this tree makes {current}",
            file=sys.stderr,
        )
        sys.exit(2)
    task = cls(**recipe["task"]["init_args"])
    model, tokenizer = load_policy(args.policy)
    model.eval()
    torch.manual_seed(0)
    sampling = SamplingArgs(temperature=args.temperature, top_p=1.0, max_new_tokens=args.max_new_tokens)
    engine = RolloutEngine(model, tokenizer, sampling)
    for split, problems in (("held-out", task.eval_problems()), ("training", task.train_problems())):
        problems = random.Random(0).sample(list(problems), min(args.problems, len(problems)))
        with torch.no_grad():
            greedy = engine.generate(problems, greedy=True)
            sampled = engine.generate([p for p in problems for _ in range(args.samples)], group_size=args.samples)
        classes = [classify(task, p, c) for p, c in zip(problems, greedy.completions)]
        counts = collections.Counter(label for _, label in classes)
        print(f"{split}: {len(problems)} problems, greedy accuracy {sum(ok for ok, _ in classes) / len(classes):.3f}")
        print("  " + ", ".join(f"{label} {n}" for label, n in counts.most_common()))
        print(f"  passed, not exact: {sum(ok and label != 'exact' for ok, label in classes)}")
        rewards = [task.verify_trusted(p, c).reward for p, c in zip(sampled.problems, sampled.completions)]
        groups = [rewards[i : i + args.samples] for i in range(0, len(rewards), args.samples)]
        print(
            f"  T = {args.temperature}: mean reward {sum(rewards) / len(rewards):.3f}, "
            f"pass@{args.samples} {sum(max(g) for g in groups) / len(groups):.3f}, "
            f"groups with both outcomes {sum(0 < sum(g) < len(g) for g in groups) / len(groups):.3f}"
        )


if __name__ == "__main__":
    main()
