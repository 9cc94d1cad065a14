"""reasoning-gym's procedural generators as a task: problems, scorers and the library's answers as
demonstrations, from one stream per generator (docs/tasks.md#reasoning-gym).

What the library leaves to its user, and what this task does about it:
- problem i of a dataset is drawn from Random(seed + i), so seed 2 is seed 1 shifted by one: the
  held-out and training problems come from one stream per generator, held-out first, with every
  question met before left out (disjoint and deduplicated);
- generators that depend on the hash seed, reseed numpy or `eval` an answer run in a process of
  their own (worker.py, under a fixed PYTHONHASHSEED, confined before its first score);
- some scorers are broken (game_of_life_halting scores any non-empty answer 1) or give credit to
  nonsense: each generator's scorer is probed before use, and the reward is 0/1 unless
  `partial_credit` is asked for.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import random
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Sequence

from rollout.ranges import NonNegativeInt, PositiveFloat, PositiveInt, check_fields
from tasks.base import Problem, Task, Verdict
from tasks.reasoning_gym.scorer import ScorerProcess, Unscored

RELEASE = "0.1.25"
"""The release the task's splits were made with (pyproject's `reasoning-gym` extra pins it)."""
TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.S)
TAGGED_INSTRUCTION = "Give your final answer between <answer> and </answer>."
PRINTABLE = re.compile(r"[\t\n\x20-\x7e]*")
"""What the tiny model's character tokenizer can write (harness/tiny.py): the `plain` format's texts."""


@dataclass(frozen=True)
class Generator:
    """One reasoning-gym generator of the task's mix."""

    name: str
    """Its name in the library (`reasoning_gym.factory.DATASETS`): spell_backward, chain_sum, ..."""
    weight: PositiveFloat = 1.0
    """Its share of the problems, relative to the others' weights."""
    config: dict = field(default_factory=dict)
    """Fields of its config class (min_word_len, max_terms, ...); `seed` and `size` are the task's."""
    level: NonNegativeInt | None = None
    """A level of the generator's own curriculum, which sets its config (`config` then overrides it)."""

    def __post_init__(self):
        check_fields(self)
        for reserved in ("seed", "size"):
            if reserved in self.config:
                raise ValueError(
                    f"config: {reserved} is the task's (its `seed`, and the split sizes), not a generator's"
                )


def allocate(total: int, weights: Sequence[float]) -> list[int]:
    """`total` split by `weights`, largest remainders first (ties to the earlier generator)."""
    shares = [total * w / sum(weights) for w in weights]
    counts = [int(s) for s in shares]
    for k in sorted(range(len(shares)), key=lambda k: counts[k] - shares[k])[: total - sum(counts)]:
        counts[k] += 1
    return counts


class ReasoningGymTask(Task):
    """Problems of one or more reasoning-gym generators, scored by the library's own scorers."""

    def __init__(
        self,
        generators: Sequence[str | dict | Generator],
        train_size: PositiveInt = 20000,
        eval_size: PositiveInt = 500,
        seed: int = 1234,
        answer_format: Literal["plain", "tagged"] = "plain",
        partial_credit: bool = False,
        score_timeout_s: PositiveFloat = 5.0,
        probe_size: PositiveInt = 16,
    ):
        """generators: names, or {name, weight, config, level}. answer_format: `plain` is the tiny
        model's (`Q: ...\\nA:`, the whole completion is the answer, printable ASCII only); `tagged` asks
        for the answer between <answer> tags, as the library's own examples do (chat models).
        partial_credit: the scorer's value as the reward, not 1 for a full score and 0 otherwise.
        score_timeout_s: an answer whose scoring runs longer scores 0 (the scorer process is killed).
        probe_size: held-out problems of each generator its scorer is probed on before use."""
        if isinstance(generators, (str, dict)) or not generators:
            raise ValueError("generators: a list of one or more generator names or {name, weight, config, level}")
        made = []
        for k, spec in enumerate(generators):
            try:
                made.append(
                    spec
                    if isinstance(spec, Generator)
                    else Generator(spec)
                    if isinstance(spec, str)
                    else Generator(**spec)
                )
            except (TypeError, ValueError) as error:
                raise ValueError(f"generators[{k}]: {error}") from None
        names = [g.name for g in made]
        if len(set(names)) < len(names):
            raise ValueError("generators: a generator is named twice (give it one weight)")
        for name, size in (("train_size", train_size), ("eval_size", eval_size), ("probe_size", probe_size)):
            if size < 1:
                raise ValueError(f"{name}: must be >= 1 (got {size})")
        if answer_format not in ("plain", "tagged"):
            raise ValueError(f"answer_format: 'plain' or 'tagged' (got {answer_format!r})")
        if not score_timeout_s > 0:
            raise ValueError(f"score_timeout_s: must be > 0 (got {score_timeout_s})")
        self.generators = made
        self.train_size, self.eval_size, self.seed = train_size, eval_size, seed
        self.answer_format, self.partial_credit = answer_format, partial_credit
        self.score_timeout_s, self.probe_size = score_timeout_s, probe_size

    @classmethod
    def unavailable(cls) -> str | None:
        """Missing, or another release than the pinned one (which may make other problems from the
        same seed under the same warm-start key)."""
        install = "pip install -c constraints.txt -e '.[reasoning-gym]'"
        if importlib.util.find_spec("reasoning_gym") is None:
            return f"needs reasoning-gym: {install}"
        installed = importlib.metadata.version("reasoning-gym")
        if installed != RELEASE:
            return f"needs reasoning-gym {RELEASE}, not {installed}: {install}"
        return None

    @classmethod
    def check_args(cls, args: dict) -> None:
        """The generators made and their scorers probed (seconds: the problems are drawn to do it)."""
        task = cls(**args)
        if cls.unavailable() is None:
            task._splits

    # ---- problems

    def stream_seed(self, k: int) -> int:
        """The seed of generator k's one stream: from the task's seed and the generator's name and place."""
        digest = hashlib.sha256(f"{self.seed}/{k}/{self.generators[k].name}".encode()).hexdigest()
        return int(digest[:8], 16)

    @cached_property
    def scorer(self) -> ScorerProcess:
        counts = [e + t for e, t in zip(self.counts("eval"), self.counts("train"))]
        setup = {
            "generators": [{"name": g.name, "config": g.config, "level": g.level} for g in self.generators],
            "seeds": [self.stream_seed(k) for k in range(len(self.generators))],
            "size": 4 * max(counts) + self.probe_size,  # room for duplicates
        }
        return ScorerProcess(setup, self.score_timeout_s)

    def counts(self, split: str) -> list[int]:
        return allocate(self.eval_size if split == "eval" else self.train_size, [g.weight for g in self.generators])

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        held_out, train, seen = [], [], set()
        for k, (evals, trains) in enumerate(zip(self.counts("eval"), self.counts("train"))):
            drawn = self.draw(k, evals + trains, seen)
            self.probe(k, drawn[:evals])
            held_out += [problem for _, problem in drawn[:evals]]
            train += [problem for _, problem in drawn[evals:]]
        random.Random(f"{self.seed}/order").shuffle(train)  # every prefix (schedule.prompt_pool) holds the mix
        return train, held_out

    def draw(self, k: int, count: int, seen: set[str]) -> list[tuple[int, Problem]]:
        """The first `count` distinct problems of generator k's stream, with their places in it."""
        generator, size = self.generators[k], self.scorer.setup["size"]
        out, start = [], 0
        while len(out) < count:
            if start >= size:
                raise ValueError(
                    f"generators[{k}] ({generator.name}): only {len(out)} distinct problems in {size} drawn, "
                    f"{count} needed (widen its config or ask for fewer)"
                )
            chunk = min(size - start, max(count - len(out), 64), 2048)  # a slow generator's answer stays in time
            items = self.scorer.ask({"op": "draw", "g": k, "start": start, "count": chunk})["items"]
            for i, (question, answer) in enumerate(items, start):
                if question in seen or len(out) == count:
                    continue
                seen.add(question)
                out.append((i, self.problem(k, i, question, answer)))
            start += chunk
        return out

    def problem(self, k: int, i: int, question: str, answer: str) -> Problem:
        name = self.generators[k].name
        if self.answer_format == "plain":
            for text in (question, answer):
                if not PRINTABLE.fullmatch(text):
                    odd = next(c for c in text if not PRINTABLE.fullmatch(c))
                    raise ValueError(
                        f"generators[{k}] ({name}): its problems hold {odd!r}, which the plain format's character "
                        "tokenizer cannot write (answer_format: tagged, with a model that can)"
                    )
            prompt, demonstration = f"Q: {question}\nA:", f" {answer}"
        else:
            prompt, demonstration = f"{question}\n{TAGGED_INSTRUCTION}", f" <answer>{answer}</answer>"
        return Problem(id=f"{name}/{i}", prompt=prompt, answer=answer, demonstration=demonstration)

    def place(self, problem: Problem) -> tuple[int, int]:
        """(its generator's index, its place in that generator's stream), read from its id."""
        name, i = problem.id.rsplit("/", 1)
        return [g.name for g in self.generators].index(name), int(i)

    def probe(self, k: int, drawn: list[tuple[int, Problem]]) -> None:
        """Refuse a scorer that does not score its own answer 1, an empty one nothing (0 with partial
        credit; below 1 without, where 0.01 still rewards nothing), and another problem's (a different
        answer) below 1."""
        name, drawn = self.generators[k].name, drawn[: self.probe_size]
        pairs, shown = [], []
        for n, (i, problem) in enumerate(drawn):
            other = next((d for d in drawn[n + 1 :] + drawn[:n] if d[1].answer != problem.answer), None)
            pairs.append([i, other[0] if other else i])
            shown.append((problem.answer, other[1].answer if other else None))
        scores = self.scorer.ask({"op": "probe", "g": k, "pairs": pairs})
        for (i, _), (answer, other), right, empty, wrong in zip(
            pairs, shown, scores["right"], scores["empty"], scores["other"]
        ):
            if right != 1.0:
                why = f"scores its own answer {answer!r} to problem {i} {right}, not 1"
            elif empty >= 1.0 or (self.partial_credit and empty != 0.0):
                why = f"scores an empty answer to problem {i} {empty}, not 0"
            elif other is not None and wrong >= 1.0:
                why = f"scores another problem's answer {other!r} to problem {i} (answer {answer!r}) {wrong}"
            else:
                continue
            raise ValueError(f"generators[{k}] ({name}): its scorer is broken: it {why}")

    def train_problems(self) -> Sequence[Problem]:
        return self._splits[0]

    def eval_problems(self) -> Sequence[Problem]:
        return self._splits[1]

    # ---- verifier

    def answer(self, completion: str) -> str | None:
        """The answer a completion states: all of it (plain), or the last <answer> block's contents."""
        if self.answer_format == "plain":
            return completion.strip()
        found = TAG.findall(completion)
        return found[-1].strip() if found else None

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return self.verify_each([problem], [completion])[0]

    def verify_all(self, rollouts) -> list[Verdict]:
        return self.verify_each(rollouts.problems, rollouts.completions)

    def verify_each(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        """Every answer scored in the generator process, in one exchange."""
        answers = [self.answer(c) for c in completions]
        asked = [(*self.place(p), a) for p, a in zip(problems, answers) if a is not None]
        scores = iter(self.scorer.scores(asked))
        verdicts = []
        for problem, answer in zip(problems, answers):
            if answer is None:
                verdicts.append(Verdict(0.0, "no final answer found (expected '<answer>...</answer>')"))
                continue
            score = next(scores)
            if isinstance(score, Unscored):
                verdicts.append(Verdict(0.0, score.why, judged=score.judged))
            elif score >= 1.0:
                verdicts.append(Verdict(1.0, "correct"))
            elif self.partial_credit and score > 0:
                verdicts.append(Verdict(score, f"partial credit {score:.2f}: expected {problem.answer}"))
            else:
                verdicts.append(Verdict(0.0, f"wrong: expected {problem.answer}"))
        return verdicts
