"""The text-level ALFWorld layer: generator, official-data loader, environment."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tasks.alfworld import generation
from tasks.alfworld.data import PLANNER_VERSION, TASK_TYPES, GameRecord, GameSize
from tasks.alfworld.env import AlfworldEnv
from tasks.alfworld.generation import generate_games, goal_error
from tasks.alfworld.official import load_official_games
from tasks.alfworld.planner import plan_walkthrough
from tasks.alfworld.pool import EnvPool
from tasks.alfworld.speedups import set_speedups, speedups_enabled

COUNT = 12  # two games of each task type


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("alfworld_cache")


@pytest.fixture(scope="module")
def games(cache: Path) -> list[GameRecord]:
    return generate_games(TASK_TYPES, count=COUNT, seed=0, cache_dir=cache)


@pytest.fixture(scope="module")
def env() -> AlfworldEnv:
    return AlfworldEnv(max_steps=50)


def play(env: AlfworldEnv, game: GameRecord | Path, commands: list[str]) -> list[object]:
    transcript: list[object] = [env.reset(game)]
    for command in commands:
        transcript.append(env.step(command))
    return transcript


def test_every_task_type_is_generated_and_its_walkthrough_wins(games, env):
    assert [g.task_type for g in games] == [TASK_TYPES[i % 6] for i in range(COUNT)]
    assert len({g.game_id for g in games}) == COUNT
    for game in games:
        data = json.loads(Path(game.path).read_text())
        assert data["solvable"] and data["walkthrough"] == list(game.walkthrough)
        assert (Path(game.path).parent / "traj_data.json").is_file()
        observation, task, admissible = env.reset(game)
        assert task == game.goal and task in data["grammar"]
        assert observation.startswith("You are in the middle of a room. Looking quickly around you, you see")
        for i, command in enumerate(game.walkthrough):
            assert command in admissible, (game.goal, command)
            _, done, won, admissible = env.step(command)
            assert won == done == (i == len(game.walkthrough) - 1), (game.goal, command)


def test_small_rooms_give_short_lists(games, env):
    for game in games:
        observation, _, admissible = env.reset(game)
        assert len(admissible) <= 15 and len(observation) < 300


def test_generation_is_deterministic_and_prefix_stable(games, cache, tmp_path):
    again = generate_games(TASK_TYPES, count=6, seed=0, cache_dir=tmp_path / "fresh")
    assert [(g.game_id, g.goal, g.walkthrough) for g in again] == [
        (g.game_id, g.goal, g.walkthrough) for g in games[:6]
    ]
    for a, b in zip(again, games):
        assert Path(a.path).read_text() == Path(b.path).read_text()
    other = generate_games(TASK_TYPES, count=6, seed=1, cache_dir=cache)
    assert not {g.game_id for g in other} & {g.game_id for g in games}


def test_second_call_loads_from_the_cache(games, cache, monkeypatch):
    def no_building(*args, **kwargs):
        raise AssertionError("a cached game was generated again")

    monkeypatch.setattr(generation, "_build_game", no_building)
    assert generate_games(TASK_TYPES, count=COUNT, seed=0, cache_dir=cache) == games


def test_a_cache_planned_by_an_older_planner_is_not_read(games, tmp_path, monkeypatch):
    """Games cached before the planner's hashing was fixed may hold other walkthroughs."""
    older = tmp_path / "older"
    older.mkdir()
    for game in games:
        folder = Path(game.path).parent
        assert folder.name == f"{game.game_id}-p{PLANNER_VERSION}"
        (older / game.game_id).symlink_to(folder)  # the layout before PLANNER_VERSION named folders
    built, real = [], generation._build_game
    monkeypatch.setattr(generation, "_build_game", lambda *a, **k: built.append(1) or real(*a, **k))
    again = generate_games(TASK_TYPES, count=2, seed=0, cache_dir=older)
    assert [g.game_id for g in again] == [g.game_id for g in games[:2]]
    assert len(built) == 2


def test_train_and_eval_splits_are_disjoint(games, cache):
    held_out = generate_games(TASK_TYPES, count=COUNT, seed=0, cache_dir=cache, split="eval")
    assert {g.split for g in games} == {"train"} and {g.split for g in held_out} == {"eval"}
    problems = {json.loads(Path(g.path).read_text())["pddl_problem"] for g in games}
    assert not {json.loads(Path(g.path).read_text())["pddl_problem"] for g in held_out} & problems
    assert not {g.game_id for g in held_out} & {g.game_id for g in games}


def test_open_rooms_need_no_opening(tmp_path, env):
    size = GameSize(receptacles=4, distractors=1, closed_receptacles=False)
    for game in generate_games(TASK_TYPES, count=6, seed=3, size=size, cache_dir=tmp_path):
        assert not any(c.startswith("open ") for c in game.walkthrough)
        assert play(env, game, list(game.walkthrough))[-1].won


def test_impossible_goals_are_refused():
    assert goal_error("pick_and_place_simple", "Apple", "Cabinet") is not None
    assert goal_error("pick_heat_then_place_in_recep", "Book", "Desk") is not None
    assert goal_error("pick_cool_then_place_in_recep", "Apple", "Fridge") is not None
    assert goal_error("pick_clean_then_place_in_recep", "Apple", "Fridge") is None
    assert goal_error("look_at_obj_in_light", "Book", toggle="DeskLamp") is None
    with pytest.raises(ValueError):
        GameSize(receptacles=2)
    with pytest.raises(ValueError):
        generate_games(["pick_and_juggle"], count=1, cache_dir="unused")


def test_an_invalid_command_is_a_turn_that_changes_nothing(games):
    env = AlfworldEnv(max_steps=2)
    _, _, admissible = env.reset(games[0])
    observation, done, won, after = env.step("dance with the fridge")
    assert (observation, done, won, after) == ("Nothing happens.", False, False, admissible)
    assert env.steps == 1
    # commands are matched after normalising case and spaces
    observation, done, won, _ = env.step("  " + games[0].walkthrough[0].upper())
    assert observation.startswith("You arrive at") and done and not won  # max_steps reached
    with pytest.raises(RuntimeError):
        env.step("look")


def test_pool_steps_games_in_lockstep(games):
    chosen = [games[0], games[5], games[3]]  # walkthroughs of different lengths
    pool = EnvPool(len(chosen), max_steps=30)
    starts = pool.reset(chosen)
    assert [s.task for s in starts] == [g.goal for g in chosen]
    plans = [list(g.walkthrough) for g in chosen]
    turn, won = 0, [False] * len(chosen)
    while any(pool.active):
        commands = [plan[turn] if turn < len(plan) else None for plan in plans]
        for i, result in enumerate(pool.step(commands)):
            if commands[i] is None:
                assert result is None
            else:
                won[i] = result.won
        turn += 1
    assert won == [True] * len(chosen)
    assert turn == max(len(p) for p in plans)


def test_pool_workers_play_what_this_process_plays(games):
    """The same episodes and commands (admissible ones, invalid ones, episodes ending at
    different turns) stepped by two worker processes and in this process: identical transitions."""
    import random

    rng = random.Random(0)
    chosen = [games[i % len(games)] for i in range(7)]
    with EnvPool(max_steps=6) as here, EnvPool(max_steps=6, processes=2) as there:
        for episodes in (chosen, chosen[2:5]):  # the workers serve a second, smaller batch
            starts = here.reset(episodes)
            assert there.reset(episodes) == starts
            admissible = [s.admissible for s in starts]
            while any(here.active):
                commands = [rng.choice(a + ["dance"]) if going else None for a, going in zip(admissible, here.active)]
                results = here.step(commands)
                assert there.step(commands) == results
                assert there.active == here.active
                admissible = [r.admissible if r else a for r, a in zip(results, admissible)]
        assert len(there.workers) == 2


def test_a_worker_that_fails_raises_here(games, tmp_path):
    with EnvPool(processes=2) as pool:
        with pytest.raises(RuntimeError, match="ALFWorld worker"):
            pool.reset([games[0], tmp_path / "missing" / "game.tw-pddl"])
        assert pool.workers == []  # stopped; a later call starts fresh ones
        assert pool.reset([games[0]])[0].task == games[0].goal


def test_workers_leave_when_the_harness_dies_without_closing(games, tmp_path):
    """A harness killed before it closes its pool (no atexit, no `close`) must not leave its
    workers waiting forever: each sees its pipe end and exits."""
    import os
    import subprocess
    import sys
    import time

    script = (
        "import os, sys; sys.path.insert(0, %r)\n"
        "from tasks.alfworld.pool import EnvPool\n"
        "pool = EnvPool(processes=2); pool.reset([%r, %r])\n"
        "print(*[p.pid for p, _ in pool.workers], flush=True); os._exit(0)\n"
    ) % (str(Path(__file__).parents[1]), str(games[0].path), str(games[1].path))
    # into files, not pipes: workers that never leave would hold a pipe open and stall the run
    out, err = tmp_path / "pids", tmp_path / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        subprocess.run([sys.executable, "-c", script], stdout=stdout, stderr=stderr, timeout=120)
    pids = [int(p) for p in out.read_text().split()]
    assert len(pids) == 2, err.read_text()[-2000:]
    deadline = time.monotonic() + 20
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
    for pid in alive:
        os.kill(pid, 9)
    assert not alive


def test_fast_env_matches_stock_textworld(games):
    commands = {g.game_id: ["look", "dance", *g.walkthrough[:3], "inventory", *g.walkthrough[3:]] for g in games[:3]}
    fast = AlfworldEnv(max_steps=50, fast=True)
    expected = {g.game_id: play(fast, g, commands[g.game_id]) for g in games[:3]}
    try:
        stock = AlfworldEnv(max_steps=50, fast=False)
        assert not speedups_enabled()
        for g in games[:3]:
            assert play(stock, g, commands[g.game_id]) == expected[g.game_id]
    finally:
        set_speedups(True)


def test_random_play_matches_stock_textworld_command_for_command(games):
    """Every game, 12 turns of commands drawn from what each state admits (and some it does not):
    the memoised engine (`speedups`: cached parses, shallow contexts, symbols copied without
    deepcopy) gives the observations, ends, wins and admissible commands stock TextWorld gives."""
    import random

    def transcripts(env):
        rng, out = random.Random(0), []
        for game in games:
            start = env.reset(game)
            out.append((start.observation, start.task, start.admissible))
            admissible = start.admissible
            for _ in range(12):
                command = rng.choice(admissible) if rng.random() < 0.85 else "take nothing from nowhere"
                result = env.step(command)
                out.append(tuple(result))
                admissible = result.admissible or admissible
                if result.done:
                    break
        return out

    fast = transcripts(AlfworldEnv(max_steps=50, fast=True))
    try:
        assert transcripts(AlfworldEnv(max_steps=50, fast=False)) == fast
    finally:
        set_speedups(True)
    assert len(fast) > 10 * len(games)


def test_an_env_that_lists_no_commands_plays_as_stock_and_derives_fewer(games, monkeypatch):
    """listed=False: the same observations, ends and wins as stock TextWorld, the admissible
    commands the same when read, and a step that plays an admissible command derives fewer
    commands' texts than there are."""
    from tasks.alfworld import env as env_module

    commands = {g.game_id: ["look", "dance", *g.walkthrough[:3], "inventory", *g.walkthrough[3:]] for g in games[:3]}
    derived, index = [], env_module._Commands.index

    def counted(listing, command):
        try:
            return index(listing, command)
        finally:
            derived.append((len(listing.derived), len(listing)))

    monkeypatch.setattr(env_module._Commands, "index", counted)
    lean, read = AlfworldEnv(max_steps=50, listed=False), AlfworldEnv(max_steps=50, listed=False)
    transcripts = {}
    for g in games[:3]:
        lean.reset(g)
        start = read.reset(g)
        transcript = [(start.observation, start.task, read.admissible)]
        for command in commands[g.game_id]:
            result = lean.step(command)
            assert result.admissible == [] and read.step(command) == result
            transcript.append((*result[:3], read.admissible))
        transcripts[g.game_id] = transcript
    assert sum(d for d, _ in derived) < sum(n for _, n in derived) and any(d < n for d, n in derived[::2])
    try:
        stock = AlfworldEnv(max_steps=50, fast=False)
        for g in games[:3]:
            expected = [(s.observation, s.task, s.admissible) for s in [stock.reset(g)]]
            expected += [(*r[:3], r.admissible) for r in map(stock.step, commands[g.game_id])]
            assert transcripts[g.game_id] == expected
    finally:
        set_speedups(True)


def test_planner_agrees_and_can_be_cut_short(games, env):
    game = games[4]  # look_at_obj_in_light
    plan = plan_walkthrough(game.path, timeout_s=120)
    assert plan is not None and play(env, game, plan)[-1].won
    assert plan_walkthrough(game.path, timeout_s=0.01) is None


def test_the_planner_runs_with_fixed_string_hashing_whatever_the_callers(games, monkeypatch):
    """Ties between equally short plans fall to set order, which follows string hashing: with the
    caller's, a fresh cache's walkthroughs (and so its warm start) differed from an earlier one's
    (docs/tasks.md)."""
    import subprocess

    import tasks.alfworld.planner as planner

    seen = []

    def run(command, **kwargs):
        seen.append(kwargs["env"]["PYTHONHASHSEED"])
        return subprocess.CompletedProcess(command, 0, stdout='["look"]\n', stderr="")

    monkeypatch.setenv("PYTHONHASHSEED", "1")
    monkeypatch.setattr(planner.subprocess, "run", run)
    assert plan_walkthrough(games[0].path) == ["look"] and seen == ["0"]


def test_official_tree_loads_like_alfworld(games, tmp_path, monkeypatch, env):
    """A fake json_2.1.1 tree in the official layout, made from generated games."""
    tree = tmp_path / "alfworld" / "json_2.1.1"
    expected = {}
    for i, game in enumerate(games[:6]):
        split = "train" if i % 2 == 0 else "valid_seen"
        traj = json.loads((Path(game.path).parent / "traj_data.json").read_text())
        params = traj["pddl_params"]
        trial = (
            tree
            / split
            / f"{game.task_type}-{params['object_target']}-None-{params['parent_target']}-1"
            / f"trial_T{i}"
        )
        shutil.copytree(Path(game.path).parent, trial)
        expected[trial.relative_to(tree).as_posix()] = (game, split)
    # what AlfredTWEnv skips: movable and sliced trials, unsolvable games, folders without a game
    for skipped in (
        "movable_recep-Apple-Bowl-Fridge-1/trial_T9",
        "pick_and_place_simple-AppleSliced-None-Fridge-1/trial_T9",
    ):
        shutil.copytree(Path(games[0].path).parent, tree / "train" / skipped)
    unsolvable = tree / "train" / "pick_and_place_simple-Apple-None-Fridge-2" / "trial_T9"
    shutil.copytree(Path(games[0].path).parent, unsolvable)
    data = json.loads((unsolvable / "game.tw-pddl").read_text())
    (unsolvable / "game.tw-pddl").write_text(json.dumps({**data, "solvable": False}))
    (tree / "train" / "empty" / "trial_T9").mkdir(parents=True)

    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "alfworld"))
    loaded = load_official_games()
    assert [g.game_id for g in loaded] == sorted(expected)
    for record in loaded:
        game, split = expected[record.game_id]
        assert (record.task_type, record.goal, record.walkthrough, record.split) == (
            game.task_type,
            game.goal,
            game.walkthrough,
            split,
        )
        assert play(env, record, list(record.walkthrough))[-1].won
    assert {g.split for g in load_official_games(splits=["valid_seen"])} == {"valid_seen"}
    assert {g.task_type for g in load_official_games(task_types=["look_at_obj_in_light"])} <= {"look_at_obj_in_light"}
    with pytest.raises(FileNotFoundError):
        load_official_games(tmp_path / "nowhere")


def test_forked_workers_end_under_a_trainer_that_keeps_sigterm(tmp_path):
    """Games and demonstrations are made in forked pools, sometimes inside a trainer's `fit`,
    whose SIGTERM handler (Lightning's) the workers inherit. `Pool.terminate` relies on SIGTERM:
    a worker that survives it blocks on the pool's queue and the harness waits for it forever
    (it did, in `harness bench` on ALFWorld: 2 of 3 tries of 100 pools hung). `forked_starmap`
    joins its workers instead. Run in a child process, so a hang is a timeout, not a stuck suite."""
    import subprocess
    import sys

    script = tmp_path / "pools.py"
    script.write_text(
        "import signal\n"
        "from tasks.workers import forked_starmap\n"
        "signal.signal(signal.SIGTERM, lambda *_: None)  # a trainer's handler: SIGTERM survived\n"
        "def square(x):\n"
        "    return x * x\n"
        "for _ in range(300):\n"
        "    assert forked_starmap(square, [(1,), (2,), (3,)], 2) == [1, 4, 9]\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(script)], cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120
    )
    assert done.returncode == 0
