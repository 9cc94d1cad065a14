"""Measure the ALFWorld layer on this machine: generation time per game, reset/step time with
the parse caches, without listing the admissible commands, and with stock TextWorld (checking
that all give identical transitions), and how long observations and admissible-command lists are
at a given GameSize.

    python scripts/alfworld_bench.py --count 24 --cache-dir /tmp/alfworld-bench

Every episode plays the game's walkthrough with an inadmissible command and a few random
admissible ones mixed in, so the states measured are not only the expert's.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere, uninstalled
from tasks.alfworld.data import TASK_TYPES, GameRecord, GameSize
from tasks.alfworld.env import AlfworldEnv
from tasks.alfworld.generation import generate_games
from tasks.alfworld.speedups import _TRANSLATIONS, set_speedups


def episode(
    env: AlfworldEnv, game: GameRecord, rng: random.Random, expert: bool
) -> tuple[list[object], list[float], float]:
    """Transcript, per-step seconds and reset seconds of one episode: the walkthrough with an
    inadmissible command and some harmless detours (look, examine, ...) mixed in, or (expert
    False) 20 random admissible commands."""
    start = time.perf_counter()
    first = env.reset(game)
    reset_s = time.perf_counter() - start
    transcript: list[object] = [first]
    steps: list[float] = []
    admissible = first.admissible
    plan = ["dance with the fridge"]
    for command in game.walkthrough if expert else [None] * 20:
        plan += [None, command] if expert else [None]
    for command in plan:
        if env.done:
            break
        if command is None:  # decided now that the state is known
            harmless = [c for c in admissible if c.startswith(("look", "inventory", "examine"))]
            command = rng.choice(admissible if not expert else harmless)
            if expert and rng.random() < 0.6:
                continue
        start = time.perf_counter()
        result = env.step(command)
        steps.append(time.perf_counter() - start)
        transcript.append((command, result))
        admissible = result.admissible
    return transcript, steps, reset_s


def summary(values: list[float], unit: str = "", digits: int = 3) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return f"median {statistics.median(values):.{digits}f}{unit}, p90 {p90:.{digits}f}{unit}, max {values[-1]:.{digits}f}{unit} (n={len(values)})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", default="/tmp/alfworld-bench")
    parser.add_argument("--receptacles", type=int, default=GameSize().receptacles)
    parser.add_argument("--distractors", type=int, default=GameSize().distractors)
    parser.add_argument("--open", action="store_true", help="openable receptacles start open")
    parser.add_argument("--stock", action="store_true", help="also time stock TextWorld and compare transitions")
    args = parser.parse_args()  # before anything loads a game: the PDDL translator overwrites sys.argv

    size = GameSize(args.receptacles, args.distractors, closed_receptacles=not args.open)
    shutil.rmtree(args.cache_dir, ignore_errors=True)
    start = time.perf_counter()
    games = generate_games(TASK_TYPES, args.count, args.seed, size, args.cache_dir)
    generation_s = time.perf_counter() - start
    start = time.perf_counter()
    again = generate_games(TASK_TYPES, args.count, args.seed, size, args.cache_dir)
    cached_s = time.perf_counter() - start
    assert again == games
    print(
        f"generation: {generation_s / len(games):.3f} s/game fresh ({len(games)} games, incl. one env start), "
        f"{cached_s * 1000:.1f} ms for all on the second call"
    )

    start = time.perf_counter()
    env = AlfworldEnv(max_steps=60, fast=True)
    print(f"env start: {time.perf_counter() - start:.2f} s")
    transcripts, resets, steps, observations, commands, cold = [], [], [], [], [], []
    _TRANSLATIONS.clear()  # generation translated every game: make the first round cold again
    for rounds in range(2):  # the second round shows the warm caches
        for i, game in enumerate(games):
            for expert in (True, False):
                transcript, step_s, reset_s = episode(env, game, random.Random(i), expert)
                if rounds == 0 and expert:
                    cold.append(reset_s)
                if rounds == 1:
                    transcripts.append(transcript)
                    resets.append(reset_s)
                    steps += step_s
    for transcript in transcripts:
        first = transcript[0]
        observations.append(len(first.observation))
        commands.append(len(first.admissible))
        for _, result in transcript[1:]:
            observations.append(len(result.observation))
            commands.append(len(result.admissible))
    print(f"fast reset, first time this process sees the game: {summary(cold, ' s')}")
    print(f"fast reset, seen before (a different game each time): {summary(resets, ' s')}")
    print(f"fast step: {summary([t * 1000 for t in steps], ' ms', 2)}")
    print(f"observation chars: {summary(observations, digits=0)}")
    print(f"admissible commands: {summary(commands, digits=0)}")
    won = sum(bool(t[-1][1].won) for t in transcripts[::2])
    print(
        f"walkthroughs (with detours) won: {won}/{len(games)}; random play won {sum(bool(t[-1][1].won) for t in transcripts[1::2])}"
    )

    # The same commands played by an env that lists no commands (a policy not shown them): a step
    # derives the commands' texts only up to the one it plays.
    lean = AlfworldEnv(max_steps=60, fast=True, listed=False)
    lean_steps, lean_same = [], 0
    for transcript, game in zip(transcripts, [g for g in games for _ in (True, False)]):
        lean.reset(game)
        played = []
        for command, result in transcript[1:]:
            start = time.perf_counter()
            played.append((command, lean.step(command)[:3] == result[:3]))
            lean_steps.append(time.perf_counter() - start)
        lean_same += all(same for _, same in played)
    print(f"fast step, no commands listed: {summary([t * 1000 for t in lean_steps], ' ms', 2)}")
    print(f"identical transitions listed vs not: {lean_same}/{len(transcripts)}")

    if args.stock:
        set_speedups(False)
        stock = AlfworldEnv(max_steps=60, fast=False)
        s_resets, s_steps, same = [], [], 0
        for i, game in enumerate(games):
            for j, expert in enumerate((True, False)):
                transcript, step_s, reset_s = episode(stock, game, random.Random(i), expert)
                s_resets.append(reset_s)
                s_steps += step_s
                same += transcript == transcripts[2 * i + j]
        print(f"stock reset: {summary(s_resets, ' s')}")
        print(f"stock step: {summary(s_steps, ' s')}")
        print(f"identical transcripts fast vs stock: {same}/{len(transcripts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
