"""ALFWorld as a multi-turn task: the policy plays a text game, one command per turn, and is
rewarded 1 if it wins within the turn limit.

An episode is one growing token row, so every algorithm's update and HP-RLVR's hindsight view
work on it unchanged:

    Your task is to: put a clean apple in fridge.          <- prompt
    You are in the middle of a room. Looking quickly around you, you see a cabinet 1, ...
    > go to countertop 1\n                                 <- the policy's tokens (eligible)
    You arrive at countertop 1. On the countertop 1, you see an apple 1.
    > take apple 1 from countertop 1\n                     <- eligible
    ...

The policy's tokens are the commands (each ending at its newline); the environment's answers
are context, never eligible. Each turn continues the same token ids (`rollout.conversation.Conversation`),
so the row is exactly what the policy saw and sampled. The admissible commands are not listed
(`show_admissible` lists them after each observation): the observations already name every
receptacle and object, and a list of ten commands a turn would triple the row.

Games come from `tasks.alfworld.generation` (generated over the alfworld package's PDDL domain and
layouts, or the official ones under $ALFWORLD_DATA). Demonstrations for the warm start are the
games' expert walkthroughs with random detours ("go to" a receptacle the expert had no reason
to visit) replayed in the engine: the expert knows where the object is; a policy must look, and
the detours show it looking, and fail often enough for RL to matter. `expert: search` has
demonstrations that look for each object instead (`tasks.alfworld.search`): on games it never
saw, a policy that imitated the walkthrough can only guess where an object lies.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import json
import os
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rollout.episodes import COMMAND_END, Answer, play, split_demonstration, transcript_example
from rollout.ranges import ConfigPath, NonNegativeInt, PositiveInt, UnitInterval
from tasks.alfworld.data import PLANNER_VERSION, TASK_TYPES, FailedStep, GameRecord, GameSize
from tasks.alfworld.env import AlfworldEnv
from tasks.alfworld.generation import generate_games
from tasks.alfworld.official import load_official_games
from tasks.alfworld.pool import EnvPool
from tasks.alfworld.search import searched
from tasks.base import ErrorSpans, Problem, Span, Task, Verdict
from tasks.workers import forked_starmap

if TYPE_CHECKING:
    from rollout.batch import Rollouts
    from rollout.decoding import RolloutEngine

PROMPT = "Your task is to: {task}.\n{observation}\n> "
ACTION_END = COMMAND_END
NAME = r"[a-z]+ \d+"  # an object or receptacle as the game names it: "dresser 1", "alarmclock 2"
COMMAND_FORMS = re.compile(
    rf"look|inventory|help|(?:go to|open|close|examine|use) {NAME}|take {NAME} from {NAME}|move {NAME} to {NAME}"
    rf"|put {NAME} (?:into|in) {NAME}|(?:heat|clean|cool|slice) {NAME} with {NAME}"
)
"""The command templates of ALFWorld's grammar (alfworld/data/alfred.twl2)."""


def well_formed(command: str) -> bool:
    """Whether a command is one the game's grammar can read, whatever the state: what GiGPO's
    invalid-action penalty asks, as verl-agent penalises an output whose action it cannot parse
    (not one the game could not carry out: "open drawer 3" at a shelf is a command, and wrong)."""
    return COMMAND_FORMS.fullmatch(command.strip()) is not None


@dataclass(frozen=True)
class Transcript:
    """A played episode as text pieces: the prompt, then (command, answer) per turn. `answer`
    already holds the next turn's "> " when the game goes on."""

    prompt: str
    turns: tuple[tuple[str, str], ...]
    won: bool


def answer_text(observation: str, done: bool, admissible: Sequence[str], show_admissible: bool) -> str:
    listed = f"\nCommands: {', '.join(admissible)}" if show_admissible and not done else ""
    return f"{observation}{listed}\n" + ("" if done else "> ")


def outcome(won: bool, turns: int) -> Verdict:
    """The outcome alone: the environment's answers are in the episode already, and the block
    of a hindsight view must never say a turn's own command back to it."""
    if won:
        return Verdict(1.0, f"won in {turns} turns")
    return Verdict(0.0, f"not won after {turns} turns")


@dataclass(frozen=True)
class Expert:
    """Whose play a game's demonstration is (`AlfworldTask`'s settings that shape it), and where it
    is cached beside the game: small enough to send to the processes that play them."""

    style: str  # "direct" or "search"
    seed: int
    max_turns: int
    detour_rate: float
    show_admissible: bool

    def file(self, game: GameRecord) -> Path:
        style = f"{self.detour_rate}" if self.style == "direct" else self.style  # direct: earlier caches' names
        return Path(game.path).with_name(f"demonstration-{style}-{self.max_turns}-{int(self.show_admissible)}.json")

    def demonstration(self, env: AlfworldEnv, game: GameRecord) -> Transcript:
        """The expert's play (walkthrough with seeded detours, or search), replayed; cached beside
        the game."""
        cached = self.file(game)
        if cached.exists():
            data = json.loads(cached.read_text())
            return Transcript(data["prompt"], tuple(map(tuple, data["turns"])), data["won"])
        rng = random.Random(f"{self.seed}/{game.game_id}")
        start = env.reset(game)
        prompt = PROMPT.format(task=start.task, observation=start.observation)
        if self.show_admissible:
            prompt = prompt.removesuffix("> ") + f"Commands: {', '.join(start.admissible)}\n> "
        if self.style == "search":
            played = searched(env, start.admissible, game.walkthrough, rng)
            turns = [(c, answer_text(r.observation, r.done, r.admissible, self.show_admissible)) for c, r in played]
            return self._cache(cached, Transcript(prompt, tuple(turns), bool(played) and played[-1][1].won))
        turns, admissible, won = [], start.admissible, False
        spare = self.max_turns - len(game.walkthrough)
        for command in game.walkthrough:
            detours = [c for c in admissible if c.startswith("go to ") and c != command]
            if command.startswith("go to ") and detours and spare > 0 and rng.random() < self.detour_rate:
                detour = rng.choice(detours)
                result = env.step(detour)
                turns.append(
                    (detour, answer_text(result.observation, result.done, result.admissible, self.show_admissible))
                )
                spare -= 1
            if env.done:
                break
            result = env.step(command)
            admissible, won = result.admissible, result.won
            turns.append(
                (command, answer_text(result.observation, result.done, result.admissible, self.show_admissible))
            )
        return self._cache(cached, Transcript(prompt, tuple(turns), won))

    @staticmethod
    def _cache(path: Path, transcript: Transcript) -> Transcript:
        tmp = path.with_suffix(f".tmp{os.getpid()}")  # processes building one suite at once
        tmp.write_text(json.dumps({"prompt": transcript.prompt, "turns": transcript.turns, "won": transcript.won}))
        tmp.replace(path)
        return transcript


@dataclass
class _Games:
    """The rollout pool as the episode loop's environments: each game's answer as the policy
    reads it, an empty command sent as "look"."""

    pool: EnvPool
    show_admissible: bool

    @property
    def active(self) -> list[bool]:
        return self.pool.active

    def start(self, commands: dict[int, str]) -> None:
        self.pool.start({i: command or "look" for i, command in commands.items()})

    def step(self, commands: Sequence[str | None]) -> list[Answer | None]:
        sent = [None if command is None else command or "look" for command in commands]
        stepped = self.pool.step(sent)
        return [
            None
            if r is None
            else Answer(
                text=answer_text(r.observation, r.done, r.admissible, self.show_admissible),
                state=r.observation,
                done=r.done,
                truncated=r.done and not r.won and not isinstance(r, FailedStep),  # its step limit is the turn limit
                reward=float(r.won),
                valid=well_formed(command),
                failed=r.observation if isinstance(r, FailedStep) else None,
            )
            for command, r in zip(sent, stepped)
        ]


class Unplannable(Exception):
    """The planner cannot judge an episode's commands (`AlfworldTask.wrong_commands`)."""


class AlfworldTask(Task):
    """Generated games (default) or the official ones (`source: official`, from $ALFWORLD_DATA
    or `official_root`)."""

    version = PLANNER_VERSION  # the demonstrations are the planner's walkthroughs: a new planner, new warm starts
    multi_turn = True
    supports_chat = False  # its turns are plain text after the first prompt

    def __init__(
        self,
        source: str = "generated",
        task_types: Sequence[str] = TASK_TYPES,
        train_games: PositiveInt = 300,
        eval_games: PositiveInt = 60,
        size: GameSize | dict | None = None,
        seed: int = 0,
        max_turns: PositiveInt = 12,
        detour_rate: UnitInterval = 0.3,
        expert: Literal["direct", "search"] = "direct",
        show_admissible: bool = False,
        cache_dir: ConfigPath = ".cache/alfworld",
        official_root: ConfigPath | None = None,
        env_processes: NonNegativeInt | None = None,
    ):
        """max_turns: commands per episode (an invalid one counts). expert: whose play the
        demonstrations are: "direct", the walkthrough, which goes straight to the objects, with a
        detour before each of its moves at `detour_rate`; "search", `tasks.alfworld.search`'s,
        which looks for each object until it shows (no detours). env_processes: worker
        processes that generate the games, play their demonstrations and step the rollouts'
        games (`EnvPool`); None: one per CPU core, at most 8; 0: in this process."""
        if source not in ("generated", "official"):
            raise ValueError(f"source: expected 'generated' or 'official', got {source!r}")
        for name, value in (("train_games", train_games), ("eval_games", eval_games), ("max_turns", max_turns)):
            if value < 1:
                raise ValueError(f"{name}: must be >= 1 (got {value})")
        if expert not in ("direct", "search"):
            raise ValueError(f"expert: expected 'direct' or 'search', got {expert!r}")
        if not 0 <= detour_rate <= 1:
            raise ValueError(f"detour_rate: must be in [0, 1] (got {detour_rate})")
        self.source, self.task_types = source, tuple(task_types)
        self.train_games, self.eval_games, self.seed = train_games, eval_games, seed
        self.size = GameSize(**size) if isinstance(size, dict) else size or GameSize()
        self.max_turns, self.detour_rate, self.show_admissible = max_turns, detour_rate, show_admissible
        self.expert = expert
        self.cache_dir, self.official_root = Path(cache_dir), official_root
        self.env_processes = min(os.cpu_count() or 1, 8) if env_processes is None else env_processes
        self._trusted: dict[tuple[str, str], Verdict] = {}

    @classmethod
    def unavailable(cls) -> str | None:
        missing = [m for m in ("alfworld", "textworld", "fast_downward") if importlib.util.find_spec(m) is None]
        return (
            f"needs alfworld and textworld, which the harness installs (pip install -e .); missing: {', '.join(missing)}"
            if missing
            else None
        )

    # ---- problems

    @cached_property
    def games(self) -> dict[str, GameRecord]:
        if self.source == "official":
            records = load_official_games(self.official_root, task_types=self.task_types)
            train = [g for g in records if g.split == "train"]
            held_out = [g for g in records if g.split != "train"][: self.eval_games]
            records = train[: self.train_games] + held_out
        else:
            common = dict(
                task_types=self.task_types,
                seed=self.seed,
                size=self.size,
                cache_dir=self.cache_dir / "games",
                processes=self.env_processes,
                then=functools.partial(_demonstrate, self.expert_play),  # while each game's translation is in memory
            )
            records = generate_games(count=self.train_games, split="train", **common) + generate_games(
                count=self.eval_games, split="eval", **common
            )
        return {g.game_id: g for g in records}

    @cached_property
    def _splits(self) -> tuple[list[Problem], list[Problem]]:
        train, held_out = [], []
        games = list(self.games.values())
        for game, transcript in zip(games, self.demonstrations(games)):
            problem = Problem(
                id=game.game_id,
                prompt=transcript.prompt,
                answer=game.path,
                demonstration="".join(command + ACTION_END + answer for command, answer in transcript.turns),
            )
            (train if game.split == "train" else held_out).append(problem)
            self._trusted[(problem.id, problem.demonstration)] = outcome(transcript.won, len(transcript.turns))
        return train, held_out

    def content(self, problem: Problem) -> tuple:
        game = hashlib.sha256(Path(problem.answer).read_bytes()).hexdigest()  # the game, not where it lies
        return (problem.id, problem.prompt, game, problem.demonstration)

    def train_problems(self) -> Sequence[Problem]:
        return self._splits[0]

    def eval_problems(self) -> Sequence[Problem]:
        return self._splits[1]

    def demonstrations(self, games: Sequence[GameRecord]) -> list[Transcript]:
        """The expert's demonstration of each game; those not cached yet are played in
        `env_processes` forked processes first (each is seeded by its game alone, so the same
        wherever it is played)."""
        expert = self.expert_play
        todo = [g for g in games if not expert.file(g).exists()]
        if self.env_processes > 1 and len(todo) > 1:
            forked_starmap(_demonstrate, [(expert, game) for game in todo], self.env_processes)
        (env,) = environments(1, self.max_turns)
        return [expert.demonstration(env, g) for g in games]

    @property
    def expert_play(self) -> Expert:
        """Whose play this task's demonstrations are, from its settings as they are now."""
        return Expert(self.expert, self.seed, self.max_turns, self.detour_rate, self.show_admissible)

    # ---- warm start: loss on the commands only

    def supervised_example(self, problem: Problem, tokenizer) -> tuple[list[int], list[int]]:
        return transcript_example(problem.prompt, problem.demonstration, tokenizer)

    # ---- rollouts: the environment loop

    def rollout(
        self, engine: RolloutEngine, problems: Sequence[Problem], group_size: int, greedy: bool = False
    ) -> Rollouts:
        episodes = [p for p in problems for _ in range(group_size)]
        pool = rollout_pool(self.env_processes, self.max_turns)
        pool.listed = self.show_admissible  # a policy not shown the commands: each step derives fewer
        pool.reset([self.games[p.id] for p in episodes])
        games = _Games(pool, self.show_admissible)
        rollouts, answers = play(engine, episodes, games, self.max_turns, group_size, greedy)
        won = [bool(own) and own[-1].reward == 1.0 for own in answers]
        failed = [next((a.failed for a in own if a.failed is not None), None) for own in answers]
        rollouts.verdicts = [
            outcome(w, len(own)) if why is None else Verdict(0.0, why, judged=False)
            for w, own, why in zip(won, answers, failed)
        ]
        return rollouts

    # ---- verification

    def own_work(self) -> list[tuple[object, str]]:
        # the rollouts' game engines, whether their games run here or in worker processes
        return [*super().own_work(), (EnvPool, "step"), (EnvPool, "start"), (EnvPool, "reset")]

    def verify_all(self, rollouts: Rollouts) -> list[Verdict]:
        """The outcomes the environment gave while the episodes were played."""
        return list(rollouts.verdicts)

    def error_spans(self, problem: Problem, completion: str) -> ErrorSpans | None:
        """The commands that leave every shortest plan, by the game's own planner from each state
        reached (`AlfworldEnv(plans=True)`): a command after which the fewest turns to a win did
        not fall by one (a detour, a look in the wrong place, a command the game refuses). The
        first is where the episode went wrong: after it, and after the turns it wastes, the game
        can no longer be won within its limit in as few turns as at the start. The planner sees
        the whole state; a policy must look for objects, so a search that a player could not
        avoid counts as wrong too. None where none is wrong, or where the game could not be won
        within the turn limit from its start."""
        try:
            wrong = tuple(self.wrong_commands(problem, completion))
        except Unplannable:
            return None
        return ErrorSpans(wrong[0], wrong) if wrong else None

    def first_error(self, problem: Problem, completion: str) -> Span | None:
        """`error_spans`' first, planned only up to it (a plan a turn is the cost: an episode
        usually goes wrong in its first commands). A planner failure after it does not hide it."""
        return _first_error(self.games[problem.id].path, completion, self.max_turns)

    def first_errors(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Span | None]:
        """Each located in a rollout worker that has loaded its game: there its PDDL translation,
        most of the cost of planning a game anew, is already made (docs/performance.md)."""
        games = [self.games[p.id].path for p in problems]
        pool = rollout_pool(self.env_processes, self.max_turns)
        jobs = [(game, completion, self.max_turns) for game, completion in zip(games, completions)]
        return pool.call(_first_error, games, jobs)

    def wrong_commands(self, problem: Problem, completion: str) -> Iterator[Span]:
        """The spans of `error_spans`' wrong commands, each as the replay reaches it; raises
        `Unplannable` where the planner fails (its search, not the game) or the game cannot be
        won within the turn limit from its start."""
        return wrong_commands(self.games[problem.id].path, completion, self.max_turns)

    def verify_trusted(self, problem: Problem, completion: str) -> Verdict:
        """Warm-start examples ask for the demonstrations' verdicts again and again: those were
        recorded when the demonstrations were played; anything else is replayed once."""
        key = (problem.id, completion)
        if key not in self._trusted:
            self._trusted[key] = self.verify(problem, completion)
        return self._trusted[key]

    def verify(self, problem: Problem, completion: str) -> Verdict:
        """Replay the commands of a transcript from the game's start: the engine is deterministic,
        so this is the outcome the transcript's own episode had."""
        (env,) = environments(1, self.max_turns)
        env.reset(self.games[problem.id])
        for command, _ in split_demonstration(completion):
            if env.done:
                break
            env.step(command)
        return outcome(env.won, env.steps)


_ENVIRONMENTS: list[AlfworldEnv] = []
_ROLLOUT_POOLS: dict[int, EnvPool] = {}


def _demonstrate(expert: Expert, game: GameRecord) -> None:
    (env,) = environments(1, expert.max_turns)
    expert.demonstration(env, game)


def environments(count: int, max_turns: int) -> list[AlfworldEnv]:
    """`count` engines, made once per process and reused by every rollout and run (building one
    costs ~0.2 s; resetting it to another game ~0.02 s)."""
    while len(_ENVIRONMENTS) < count:
        _ENVIRONMENTS.append(AlfworldEnv(max_steps=max_turns, list_help=False))
    for env in _ENVIRONMENTS[:count]:
        env.max_steps = max_turns
    return _ENVIRONMENTS[:count]


@functools.cache
def planning_environment(max_turns: int) -> AlfworldEnv:
    """An engine that plans from every state (`error_spans`'), made once per process."""
    return AlfworldEnv(max_steps=max_turns, list_help=False, plans=True)


def rollout_pool(processes: int, max_turns: int) -> EnvPool:
    """The pool that plays rollouts, one per worker count for the life of this process: its
    workers keep their parsed games from run to run."""
    if processes not in _ROLLOUT_POOLS:
        _ROLLOUT_POOLS[processes] = EnvPool(max_steps=max_turns, list_help=False, processes=processes)
        atexit.register(_ROLLOUT_POOLS[processes].close)
    _ROLLOUT_POOLS[processes].max_steps = max_turns
    return _ROLLOUT_POOLS[processes]


def wrong_commands(game: Path, completion: str, max_turns: int) -> Iterator[Span]:
    """`AlfworldTask.wrong_commands` of a game file: the transcript replayed with a plan from
    every state it reaches."""
    env = planning_environment(max_turns)
    try:
        env.reset(game)
    except Exception as error:
        raise Unplannable from error
    if env.plan is None or len(env.plan) > max_turns:
        raise Unplannable
    remaining, at = len(env.plan), 0
    for command, answer in split_demonstration(completion):
        start = completion.find(command, at)  # at a command's start, or just before it
        end = start + len(command)
        at = end + len(answer)
        if env.done:
            return
        try:
            env.step(command.strip() or "look")  # as the rollout sent it
        except Exception as error:
            raise Unplannable from error
        after = len(env.plan) if env.plan is not None else max_turns + 1
        if after >= remaining:
            yield start, end
        remaining = after


def _first_error(game: Path, completion: str, max_turns: int) -> Span | None:
    try:
        return next(wrong_commands(game, completion, max_turns), None)
    except Unplannable:
        return None
