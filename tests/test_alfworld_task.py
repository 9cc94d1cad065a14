"""ALFWorld as a multi-turn task: masks cover exactly the commands, the row is what the policy
sampled, the hindsight view scores commands only."""

import time

import pytest
import torch

from harness.models import load_policy
from rollout.decoding import RolloutEngine, SamplingArgs
from rollout.scoring import sequence_logprobs
from tasks.alfworld.task import _ROLLOUT_POOLS, AlfworldTask, split_demonstration
from tests.test_engine import peaked


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return AlfworldTask(train_games=6, eval_games=2, max_turns=10, cache_dir=str(tmp_path_factory.mktemp("alfworld")))


def test_demonstrations_win_and_tokenise_with_loss_on_commands_only(task, tiny_dir):
    _, tokenizer = load_policy(tiny_dir)
    for problem in task.train_problems():
        assert task.verify(problem, problem.demonstration) == task.verify_trusted(problem, problem.demonstration)
        pairs = split_demonstration(problem.demonstration)
        assert "".join(c + "\n" + a for c, a in pairs) == problem.demonstration
        ids, labels = task.supervised_example(problem, tokenizer)
        trained = tokenizer.decode([t for t, label in zip(ids, labels) if label != -100])
        assert trained == "".join(c + "\n" for c, _ in pairs)
        assert task.verify(problem, problem.demonstration).reward == 1.0  # detours included


def looked_before_taking(problem) -> int:
    """How many receptacles a demonstration went to or examined before its first take, checking
    that it takes only what an earlier answer showed."""
    shown, looked = problem.prompt, 0
    for command, answer in split_demonstration(problem.demonstration):
        if command.startswith("take "):
            assert command.removeprefix("take ").split(" from ")[0] in shown
            return looked
        looked += command.startswith(("go to ", "examine "))
        shown += answer
    return looked


def test_searching_demonstrations_look_before_they_take_and_win(tmp_path):
    args = dict(train_games=12, eval_games=1, max_turns=20, cache_dir=str(tmp_path))
    search, direct = AlfworldTask(expert="search", **args), AlfworldTask(detour_rate=0.0, **args)
    assert [p.id for p in search.train_problems()] == [p.id for p in direct.train_problems()]
    for problem in search.train_problems():
        assert search.verify(problem, problem.demonstration).reward == 1.0
    # the walkthrough goes straight to the object; the searcher finds it in the first receptacle
    # it looks into only where its seeded order happens to start there
    assert {looked_before_taking(p) for p in direct.train_problems()} == {1}
    searched = [looked_before_taking(p) for p in search.train_problems()]
    assert min(searched) >= 1 and sum(searched) / len(searched) > 1.5
    with pytest.raises(ValueError, match="expert"):
        AlfworldTask(expert="oracle")


def test_games_and_demonstrations_made_in_worker_processes_equal_those_made_here(tmp_path):
    def made(processes: int, folder: str) -> list:
        task = AlfworldTask(
            train_games=8, eval_games=4, expert="search", cache_dir=str(tmp_path / folder), env_processes=processes
        )
        return [(p.id, p.prompt, p.demonstration) for p in [*task.train_problems(), *task.eval_problems()]]

    here = made(0, "here")
    assert made(2, "forked") == here and len({id for id, _, _ in here}) == 12


def test_an_invalid_command_is_a_turn_and_fails(task):
    problem = task.train_problems()[0]
    verdict = task.verify(problem, "dance\n> " * 9 + "dance\n")
    assert verdict.reward == 0.0 and "not won after 10 turns" in verdict.feedback


def test_rollout_rows_are_what_the_policy_sampled(task, tiny_dir):
    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.9, max_new_tokens=6))
    problems = task.train_problems()[:3]
    rollouts = task.rollout(engine, problems, group_size=2)
    assert len(rollouts) == 6 and [p.id for p in rollouts.problems] == [p.id for p in problems for _ in range(2)]
    for row in range(len(rollouts)):
        ids, eligible, mask = rollouts.input_ids[row], rollouts.eligible[row], rollouts.attention_mask[row]
        prompt = tokenizer(rollouts.problems[row].prompt, add_special_tokens=False).input_ids
        start = int(mask.nonzero().min())
        assert ids[start : start + len(prompt)].tolist() == prompt and not eligible[: start + len(prompt)].any()
        # every turn: a run of command tokens, then the engine's answer (not eligible)
        runs = torch.diff(eligible.int(), prepend=torch.tensor([0])).eq(1).sum()
        assert 1 <= runs <= task.max_turns
        assert not eligible[-1]  # every command gets the engine's answer: a row ends on it
        answers = ids[mask.bool() & ~eligible][len(prompt) :]
        assert tokenizer.decode(answers.tolist()).count("\n") >= 1
        # one state per run of command tokens: the prompt, then the game's answer that precedes the run
        states = rollouts.turn_states[row]
        assert len(states) == runs and states[0] == rollouts.problems[row].prompt
        starts = (torch.diff(eligible.int(), prepend=torch.tensor([0])) == 1).nonzero().view(-1).tolist()
        for state, start, previous in zip(states[1:], starts[1:], starts):
            between = ids[previous:start][~eligible[previous:start]]
            assert tokenizer.decode(between.tolist()).startswith(state)
    forward = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 0.9)
    torch.testing.assert_close(
        forward[rollouts.eligible], rollouts.sample_logprobs[rollouts.eligible], atol=1e-4, rtol=1e-4
    )
    assert all(v.feedback.startswith(("won", "not won")) for v in task.verify_all(rollouts))


def test_an_episode_the_turn_limit_cut_is_lost_and_truncated(task, tiny_dir):
    """The game's verdict, not the episode's end: an untrained policy never wins, so every episode
    plays all `max_turns` turns and ends done (the limit) but not won: reward 0, said so, and
    counted as cut by the limit (completions/clipped_ratio)."""
    from tasks.base import Verdict

    model, tokenizer = load_policy(tiny_dir)
    torch.manual_seed(0)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=1.0, max_new_tokens=4))
    rollouts = task.rollout(engine, task.train_problems()[:2], group_size=2)
    starts = torch.diff(rollouts.eligible.int(), prepend=torch.zeros(len(rollouts), 1, dtype=torch.int)).eq(1)
    assert starts.sum(-1).tolist() == [task.max_turns] * 4  # every episode ran to the limit
    assert rollouts.verdicts == [Verdict(0.0, f"not won after {task.max_turns} turns")] * 4
    assert rollouts.truncated == [True] * 4 and rollouts.truncations(tokenizer.eos_token_id) == [True] * 4


def test_rollouts_stepped_by_worker_processes_equal_those_stepped_here(task, tiny_dir, monkeypatch):
    """In workers, a game steps as soon as its command has ended, while the policy decodes the
    others' (`EnvPool.start`): the same rows, log-probs and verdicts as stepping here, after."""
    from tasks.alfworld.pool import EnvPool

    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.9, max_new_tokens=6))
    monkeypatch.setattr("rollout.episodes.spare_cores", lambda engine: True)  # as on an accelerator
    early, step = [], EnvPool.step  # how many episodes of each step were started before it
    monkeypatch.setattr(EnvPool, "step", lambda pool, commands: early.append(len(pool.started)) or step(pool, commands))
    runs, default = [], task.env_processes
    try:
        for processes in (0, 2):
            task.env_processes = processes
            torch.manual_seed(1)
            runs.append(task.rollout(engine, task.train_problems()[:3], group_size=2))
    finally:
        task.env_processes = default
    here, workers = runs
    assert len(_ROLLOUT_POOLS[2].workers) == 2  # the second run was played by the workers
    assert torch.equal(here.input_ids, workers.input_ids) and torch.equal(here.eligible, workers.eligible)
    assert torch.equal(here.sample_logprobs, workers.sample_logprobs)
    assert here.verdicts == workers.verdicts and here.turn_states == workers.turn_states
    assert sum(early) > 0  # some games stepped while other commands were still decoding


def test_games_step_beside_decoding_only_where_a_core_is_spare(tiny_dir, monkeypatch):
    from rollout.episodes import spare_cores

    model, tokenizer = load_policy(tiny_dir)
    engine = RolloutEngine(model, tokenizer, SamplingArgs())
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    for threads, spare in ((2, False), (1, True)):
        monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
        assert spare_cores(engine) is spare


def test_a_started_step_is_gathered_by_the_next_step(task):
    from tasks.alfworld.pool import EnvPool

    games = [task.games[p.id] for p in task.train_problems()[:4]]
    commands = ["look", "inventory", "look", "go to nowhere"]
    with EnvPool(max_steps=10, list_help=False) as here, EnvPool(max_steps=10, list_help=False, processes=2) as pool:
        here.reset(games)
        pool.reset(games)
        pool.start({1: commands[1], 2: commands[2]})
        assert pool.step(commands) == here.step(commands)
        pool.start({0: "look"})
        with pytest.raises(ValueError, match="another command"):
            pool.step(["inventory", *commands[1:]])
        pool.reset(games)  # a step started and never gathered is read off: the next calls answer in turn
        here.reset(games)
        assert pool.step(commands) == here.step(commands)


def test_hindsight_view_scores_commands_with_the_future_after_them(task, tiny_dir):
    from algorithms.hp_rlvr import HindsightTemplate, hindsight_views

    torch.manual_seed(1)
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=1.0, max_new_tokens=5))
    rollouts = task.rollout(engine, task.train_problems()[:2], group_size=1)
    rollouts.verdicts = task.verify_all(rollouts)
    views = hindsight_views(rollouts, segments=8, tokenizer=tokenizer, template=HindsightTemplate())
    scored = set(zip(views.causal_rows.tolist(), views.causal_cols.tolist()))
    assert scored == set(map(tuple, rollouts.eligible.nonzero().tolist()))  # commands, and only them
    for r, c, hr, hc in zip(views.causal_rows, views.causal_cols, views.hindsight_rows, views.hindsight_cols):
        assert views.input_ids[hr, hc] == rollouts.input_ids[r, c]  # same token, same history after the block


def test_hindsight_warm_start_example_trains_one_span_of_commands(task, tiny_dir):
    import random

    from algorithms.hp_rlvr import HindsightTemplate, hindsight_example

    _, tokenizer = load_policy(tiny_dir)
    problem = task.train_problems()[0]
    commands = [c + "\n" for c, _ in split_demonstration(problem.demonstration)]
    for seed in range(6):
        ids, labels = hindsight_example(task, problem, tokenizer, HindsightTemplate(), 3, random.Random(seed))
        trained = tokenizer.decode([t for t, label in zip(ids, labels) if label != -100])
        # whole commands of consecutive turns, nothing the engine said
        assert trained and any(
            trained == "".join(commands[i:j]) for i in range(len(commands)) for j in range(i + 1, len(commands) + 1)
        )
        assert tokenizer.decode(ids).startswith(HindsightTemplate().open)


def test_a_game_that_fails_mid_episode_ends_it_unjudged(task, tiny_dir, monkeypatch):
    """The environment's own failure (#33): the episode ends there, its verdict is unjudged (left
    out of the update, counted), and the other episodes play on as before."""
    from tasks.alfworld.env import AlfworldEnv

    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.9, max_new_tokens=6))
    problems = task.train_problems()[:2]
    monkeypatch.setattr(task, "env_processes", 0)  # played here, where the failure is patched in
    torch.manual_seed(3)
    clean = task.rollout(engine, problems, group_size=2)
    real, calls = AlfworldEnv.step, []

    def breaks_once(env, command):
        calls.append(command)
        if len(calls) == 2:  # the second episode's first turn
            raise RuntimeError("the game engine broke")
        return real(env, command)

    monkeypatch.setattr(AlfworldEnv, "step", breaks_once)
    torch.manual_seed(3)
    broken = task.rollout(engine, problems, group_size=2)
    assert [v.judged for v in broken.verdicts] == [True, False, True, True]
    assert broken.verdicts[1].feedback.startswith("the environment failed (RuntimeError(")
    assert broken.verdicts[0] == clean.verdicts[0] and broken.verdicts[2:] == clean.verdicts[2:]
    assert not broken.trainable(2).eligible[:2].any() and broken.trainable(2).eligible[2:].any()


def test_a_worker_that_dies_mid_episode_fails_its_episodes_and_is_replaced(task):
    """A worker process that dies takes its games with it: each of its episodes still going ends
    unjudged, the other worker's play on, and the next reset starts the pool afresh."""
    import os
    import signal

    from tasks.alfworld.data import FailedStep
    from tasks.alfworld.pool import EnvPool

    games = [task.games[p.id] for p in task.train_problems()[:4]]
    with EnvPool(max_steps=10, list_help=False, processes=2) as pool:
        pool.reset(games)
        first = pool.workers[0][0]
        os.kill(first.pid, signal.SIGKILL)
        first.join()
        results = pool.step(["look"] * 4)
        assert [isinstance(r, FailedStep) for r in results] == [True, False, True, False]
        assert pool.active == [False, True, False, True]
        assert [r is None for r in pool.step(["look"] * 4)] == [True, False, True, False]
        pool.reset(games)
        assert all(connection is not None for _, connection in pool.workers) and first not in [
            p for p, _ in pool.workers
        ]
        assert not any(isinstance(r, FailedStep) for r in pool.step(["look"] * 4))


def test_the_warm_start_batches_are_those_of_the_tokenizer_without_its_memo(task, tiny_dir, monkeypatch):
    """ALFWorld's examples extend the token lists they get: the memo must hand out copies."""
    import harness.models
    from tests.test_warm_start import batches

    _, tokenizer = load_policy(tiny_dir)
    memoised = batches(task, tokenizer, 6, segments=4)
    monkeypatch.setattr(harness.models, "TokenMemo", lambda tokenizer: tokenizer)
    assert batches(task, tokenizer, 6, segments=4) == memoised


def played(task, problem, commands: list[str]) -> str:
    """The completion a rollout sending `commands` would have: each command, its newline and the
    game's answer, as the task's rollout writes them."""
    from tasks.alfworld.env import AlfworldEnv
    from tasks.alfworld.task import answer_text

    env = AlfworldEnv(max_steps=task.max_turns, list_help=False)
    env.reset(task.games[problem.id])
    text = ""
    for command in commands:
        result = env.step(command)
        text += command + "\n" + answer_text(result.observation, result.done, result.admissible, task.show_admissible)
        if result.done:
            break
    return text


def test_error_spans_are_the_commands_that_leave_every_shortest_plan(task):
    """On each game: its shortest plan has no wrong command; a detour first is the first error
    (and the only one: the plan goes on from there); a command the game refuses is one; every
    span is its command's text in the completion."""
    from tasks.alfworld.task import planning_environment

    env = planning_environment(task.max_turns)
    checked = 0
    for problem in task.train_problems():
        env.reset(task.games[problem.id])
        plan = list(env.plan)
        if len(plan) + 1 > task.max_turns:
            continue
        assert task.error_spans(problem, played(task, problem, plan)) is None
        elsewhere = next(c for c in env.admissible if c.startswith("go to ") and c != plan[0] and c not in plan)
        detour = played(task, problem, [elsewhere, *plan])
        errors = task.error_spans(problem, detour)
        assert detour[slice(*errors.first)] == elsewhere and errors.wrong == (errors.first,)
        refused = played(task, problem, [plan[0], "jump over the fridge", *plan[1:]])
        errors = task.error_spans(problem, refused)
        assert refused[slice(*errors.first)] == "jump over the fridge" and len(errors.wrong) == 1
        for completion in (detour, refused):
            assert task.first_error(problem, completion) == task.error_spans(problem, completion).first
        both = played(task, problem, [elsewhere, "jump over the fridge", *plan])  # two wrong commands
        errors = task.error_spans(problem, both)
        assert len(errors.wrong) >= 2 and both[slice(*task.first_error(problem, both))] == elsewhere
        checked += 1
    assert checked >= 3


def test_a_command_after_which_the_game_cannot_be_won_is_wrong(monkeypatch):
    """A planner that finds no plan after a command (the apple sliced, which the goal needed
    whole) says the game can no longer be won: that command is wrong, the first error, and so is
    every command after it. The game's own planner is replaced by plans written out: 4 turns to
    a win at the start, 3 after "go to a" (on a shortest plan), none after "slice the apple"."""
    from pathlib import Path

    import tasks.alfworld.task as alfworld

    class Planned:
        plans = {"go to a": ["take apple", "go to b", "put apple"], "slice the apple": None, "look": None}

        def reset(self, game):
            self.plan, self.done = ["go to a", "take apple", "go to b", "put apple"], False

        def step(self, command):
            self.plan = self.plans[command]

    monkeypatch.setattr(alfworld, "planning_environment", lambda max_turns: Planned())
    completion = "go to a\nYou arrive at a.\n> slice the apple\nYou slice the apple.\n> look\nYou see a b.\n"
    wrong = list(alfworld.wrong_commands(Path("game"), completion, max_turns=10))
    assert [completion[a:b] for a, b in wrong] == ["slice the apple", "look"]
    assert completion[slice(*alfworld._first_error(Path("game"), completion, 10))] == "slice the apple"


def test_the_first_error_is_planned_only_up_to_it(task, monkeypatch):
    """`first_error` replays an episode up to its first wrong command and no further: a plan a
    turn is what locating errors costs, and an episode usually goes wrong early."""
    from tasks.alfworld.task import planning_environment

    env = planning_environment(task.max_turns)
    for problem in task.train_problems():
        env.reset(task.games[problem.id])
        plan = list(env.plan)
        if len(plan) + 1 <= task.max_turns:
            break
    elsewhere = next(c for c in env.admissible if c.startswith("go to ") and c not in plan)
    completion = played(task, problem, [plan[0], elsewhere, *plan[1:]])
    steps = []
    step = type(env).step
    monkeypatch.setattr(type(env), "step", lambda self, command: steps.append(command) or step(self, command))
    assert completion[slice(*task.first_error(problem, completion))] == elsewhere
    assert steps == [plan[0], elsewhere]
    steps.clear()
    assert task.error_spans(problem, completion).first == task.first_error(problem, completion)
    assert len(steps) == len(split_demonstration(completion)) + 2  # the whole episode, then up to its first error
    assert task.first_error(problem, played(task, problem, plan)) is None


def test_errors_are_located_in_the_workers_that_loaded_their_games(task):
    """`first_errors` runs each replay in a rollout worker that holds its game's translation,
    and finds what `first_error` finds in this process."""
    import os

    from tasks.alfworld.pool import EnvPool
    from tasks.alfworld.task import _first_error, planning_environment

    problems = task.train_problems()[:2]
    env = planning_environment(task.max_turns)
    completions = []
    for problem in problems:
        env.reset(task.games[problem.id])
        plan = list(env.plan)
        elsewhere = next(c for c in env.admissible if c.startswith("go to ") and c not in plan)
        completions.append(played(task, problem, [elsewhere, *plan]))
    games = [task.games[p.id].path for p in problems]
    with EnvPool(max_steps=task.max_turns, list_help=False, processes=2) as pool:
        pool.reset([games[1], games[0]])  # game 1 to worker 0, game 0 to worker 1
        pids = [process.pid for process, _ in pool.workers]
        assert pool.call(os.getpid, [*games, games[0]], [()] * 3) == [pids[1], pids[0], pids[1]]
        jobs = [(game, completion, task.max_turns) for game, completion in zip(games, completions)]
        located = pool.call(_first_error, games, jobs)
    assert located == [task.first_error(p, c) for p, c in zip(problems, completions)]
    assert [c[slice(*span)] for c, span in zip(completions, located)] == [c.split("\n")[0] for c in completions]


def test_a_steps_fidelity_reads_an_episodes_turns(task, tiny_dir):
    """An episode with a detour first, as a token row (commands eligible, answers not), through
    the step's own path: blame on the detour's tokens alone is all on the error, uniform blame
    has a lift of exactly 1, and every token of the detour command counts as on it."""
    from algorithms.fidelity import eligible_spans, on_span, step_fidelity
    from rollout.batch import Rollouts, Verdict
    from tasks.alfworld.task import planning_environment

    _, tokenizer = load_policy(tiny_dir)
    problem = task.train_problems()[0]
    env = planning_environment(task.max_turns)
    env.reset(task.games[problem.id])
    plan = list(env.plan)
    elsewhere = next(c for c in env.admissible if c.startswith("go to ") and c not in plan)
    completion = played(task, problem, [elsewhere, *plan[:2]])
    ids, eligible = tokenizer(problem.prompt, add_special_tokens=False).input_ids, []
    eligible = [False] * len(ids)
    for command, answer in split_demonstration(completion):
        for piece, keep in ((command + "\n", True), (answer, False)):
            piece_ids = tokenizer(piece, add_special_tokens=False).input_ids
            ids, eligible = ids + piece_ids, eligible + [keep] * len(piece_ids)
    rollouts = Rollouts(
        problems=[problem],
        input_ids=torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        eligible=torch.tensor([eligible]),
        sample_logprobs=torch.zeros(1, len(ids)),
        completions=[completion],
    )
    rollouts.verdicts = [Verdict(0.0, "not won")]
    errors = task.error_spans(problem, completion)
    on = on_span(eligible_spans(tokenizer, rollouts, 0, multi_turn=True), errors.first)
    detour_tokens = len(tokenizer(elsewhere + "\n", add_special_tokens=False).input_ids)
    assert on == [True] * detour_tokens + [False] * (len(on) - detour_tokens)
    uniform = -rollouts.eligible.float()
    assert step_fidelity(task, rollouts, uniform, tokenizer)["credit/blame_lift"] == 1.0
    focused = torch.zeros_like(uniform)
    focused[0, rollouts.eligible[0].nonzero().view(-1)[torch.tensor(on)]] = -1.0
    stats = step_fidelity(task, rollouts, focused, tokenizer)
    assert stats["credit/blame_on_error"] == 1.0 and stats["credit/fidelity_rollouts"] == 1.0


def test_the_bench_splits_a_rollouts_turns_into_their_parts(task, tiny_dir):
    """`harness bench`'s clock of a multi-turn rollout: one count a turn played, time in every
    part (the first prefill, the answers' prefills, decoding, draws, the tokenizer), each part's
    time inside the rollout's; and afterwards every patched name is as it was."""
    from types import SimpleNamespace

    from harness.bench import TURN_PARTS, TurnClock
    from rollout import conversation
    from rollout.conversation import Conversation

    model, tokenizer = load_policy(tiny_dir)
    patched = lambda: (  # noqa: E731
        Conversation._feed,
        Conversation.turn,
        conversation.prefill,
        conversation.sample_next,
        vars(type(tokenizer)).get("__call__"),
        vars(tokenizer).get("batch_decode"),
    )
    before = patched()
    torch.manual_seed(0)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=1.0, max_new_tokens=4))
    clock = TurnClock()
    with clock.around(SimpleNamespace(task=task, tokenizer=tokenizer)):
        started = time.perf_counter()
        task.rollout(engine, task.train_problems()[:2], group_size=2)
        spent = time.perf_counter() - started
    assert clock.turns == task.max_turns  # an untrained policy plays every turn (the test above)
    assert all(clock.parts[part].seconds > 0 for part in TURN_PARTS)
    assert sum(clock.parts[part].seconds for part in TURN_PARTS) < spent
    assert patched() == before


def test_a_command_is_well_formed_when_the_games_grammar_reads_it():
    """GiGPO's invalid-action penalty, mapped from verl-agent's (an action it cannot parse): a
    command of one of ALFWorld's templates is well formed whether or not the game can carry it
    out here; text of no template is not."""
    from tasks.alfworld.task import well_formed

    for command in ("go to dresser 1", "open drawer 3", "take alarmclock 2 from desk 1", "move mug 1 to shelf 2",
                    "heat egg 1 with microwave 1", "look", "inventory", " examine sofa 1 "):  # fmt: skip
        assert well_formed(command), command
    for command in (
        "go to",
        "take mug 1",
        "dresser 1",
        "go to dresser",
        "move mug 1 into shelf 2",
        "gotodresser 1",
        "",
    ):
        assert not well_formed(command), command
