"""reasoning-gym as a task (tasks/reasoning_gym): splits from one stream per generator, the same in
any process, scorers probed and run in a confined process of their own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from tasks.reasoning_gym import ReasoningGymTask  # noqa: E402
from tasks.reasoning_gym.task import allocate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SMALL_SUMS = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}


def test_the_task_asks_for_the_release_the_extra_pins(monkeypatch):
    import importlib.metadata
    import tomllib

    from tasks.reasoning_gym.task import RELEASE

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["reasoning-gym"] == [f"reasoning-gym=={RELEASE}"]
    assert ReasoningGymTask.unavailable() is None
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.1.24")
    assert ReasoningGymTask.unavailable().startswith(f"needs reasoning-gym {RELEASE}, not 0.1.24: pip install")


def test_allocate_splits_a_total_by_weight_to_the_last_problem():
    assert allocate(10, [1, 1]) == [5, 5]
    assert allocate(10, [1, 2]) == [3, 7]  # 3.33 and 6.67: the larger remainder gets the odd one
    assert allocate(7, [1, 1, 1]) == [3, 2, 2]
    assert sum(allocate(1001, [0.3, 0.5, 0.2])) == 1001


def test_splits_are_disjoint_deduplicated_and_mixed_in_every_prefix():
    # one-digit sums have 2 * 9 * 9 = 162 distinct questions at most: duplicates are met and left out
    task = ReasoningGymTask(["spell_backward", SMALL_SUMS], train_size=120, eval_size=30, seed=3)
    train, held_out = task.train_problems(), task.eval_problems()
    questions = [p.prompt for p in [*train, *held_out]]
    assert len(train) == 120 and len(held_out) == 30 and len(set(questions)) == 150
    assert sum(p.id.startswith("chain_sum/") for p in held_out) == 15
    assert 5 <= sum(p.id.startswith("chain_sum/") for p in train[:20]) <= 15  # the mix, not one generator first
    # held out first from each stream, at its start: the same held-out problems whatever the train size
    again = ReasoningGymTask(["spell_backward", SMALL_SUMS], train_size=60, eval_size=30, seed=3)
    assert [p.id for p in again.eval_problems()] == [p.id for p in held_out]
    other = ReasoningGymTask(["spell_backward", SMALL_SUMS], train_size=60, eval_size=30, seed=4)
    assert {p.prompt for p in other.eval_problems()} != {p.prompt for p in held_out}


def test_a_generator_with_too_few_distinct_problems_is_named():
    tiny = {"name": "chain_sum", "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}
    with pytest.raises(ValueError, match=r"generators\[0\] \(chain_sum\): only \d+ distinct problems"):
        ReasoningGymTask([tiny], train_size=400, eval_size=10).train_problems()


SPLIT_DIGEST = """
import hashlib, json
from tasks.reasoning_gym import ReasoningGymTask
task = ReasoningGymTask(["isomorphic_strings"], train_size=40, eval_size=10)
print(hashlib.sha256(json.dumps([(p.id, p.prompt, p.answer) for p in task.train_problems() + list(task.eval_problems())]).encode()).hexdigest())
"""

DIRECT_DIGEST = """
import hashlib, json, reasoning_gym
ds = reasoning_gym.create_dataset("isomorphic_strings", size=10, seed=5)
print(hashlib.sha256(json.dumps([ds[i]["question"] for i in range(10)]).encode()).hexdigest())
"""


def run_with_hash_seed(code: str, hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_a_split_is_the_same_in_processes_with_different_hash_seeds():
    # the hazard is real: the library itself makes other isomorphic_strings problems under another hash seed
    assert run_with_hash_seed(DIRECT_DIGEST, "1") != run_with_hash_seed(DIRECT_DIGEST, "2")
    assert run_with_hash_seed(SPLIT_DIGEST, "1") == run_with_hash_seed(SPLIT_DIGEST, "2")


def test_a_broken_scorer_is_refused_with_its_name():
    # game_of_life_halting scores any non-empty answer 1
    task = ReasoningGymTask(["spell_backward", "game_of_life_halting"], train_size=20, eval_size=10)
    with pytest.raises(
        ValueError,
        match=r"generators\[1\] \(game_of_life_halting\): its scorer is broken: it scores "
        r"another problem's answer",
    ):
        task.train_problems()
    with pytest.raises(ValueError, match="game_of_life_halting"):
        ReasoningGymTask.check_args({"generators": ["game_of_life_halting"], "train_size": 20, "eval_size": 10})


def test_bad_settings_are_named():
    for args, field in [
        ({"generators": []}, "generators"),
        ({"generators": "spell_backward"}, "generators"),
        ({"generators": [{"name": "spell_backward", "weight": 0}]}, r"generators\[0\]: weight"),
        ({"generators": [{"name": "spell_backward", "config": {"seed": 1}}]}, r"generators\[0\]: config"),
        ({"generators": ["spell_backward", "spell_backward"]}, "generators"),
        ({"generators": ["spell_backward"], "answer_format": "boxed"}, "answer_format"),
        ({"generators": ["spell_backward"], "eval_size": 0}, "eval_size"),
    ]:
        with pytest.raises(ValueError, match=f"^{field}"):
            ReasoningGymTask.check_args(args)
    with pytest.raises(ValueError, match=r"^generators\[0\] \(no_such_thing\): no generator named"):
        ReasoningGymTask.check_args({"generators": ["no_such_thing"], "train_size": 5, "eval_size": 5})
    with pytest.raises(ValueError, match=r"^generators\[0\] \(spell_backward\): config: "):
        ReasoningGymTask.check_args({"generators": [{"name": "spell_backward", "config": {"no_field": 1}}]})


def test_the_plain_format_refuses_text_its_tokenizer_cannot_write():
    with pytest.raises(ValueError, match=r"generators\[0\] \(emoji_mystery\): its problems hold"):
        ReasoningGymTask(["emoji_mystery"], train_size=5, eval_size=5).eval_problems()
    tagged = ReasoningGymTask(["emoji_mystery"], train_size=5, eval_size=5, answer_format="tagged")
    assert len(tagged.eval_problems()) == 5
    # its scorer gives an empty answer 0.01: nothing under a 0/1 reward, a reward with partial credit
    partial = ReasoningGymTask(
        ["emoji_mystery"], train_size=5, eval_size=5, answer_format="tagged", partial_credit=True
    )
    with pytest.raises(ValueError, match=r"\(emoji_mystery\): its scorer is broken: it scores an empty answer"):
        partial.eval_problems()


@pytest.fixture(scope="module")
def plain():
    """One generator process for the tests that only score."""
    return ReasoningGymTask(["spell_backward"], train_size=10, eval_size=5)


def test_verdicts_from_the_librarys_scorers_in_both_formats(plain):
    problem = plain.eval_problems()[0]
    assert problem.prompt.startswith("Q: ") and problem.prompt.endswith("\nA:")
    assert plain.verify(problem, problem.demonstration).reward == 1.0
    assert plain.verify(problem, f" {problem.answer}\n").reward == 1.0  # the whole completion, stripped
    wrong = plain.verify(problem, " x" + problem.answer)
    assert (wrong.reward, wrong.feedback) == (0.0, f"wrong: expected {problem.answer}")

    tagged = ReasoningGymTask(["spell_backward"], train_size=10, eval_size=5, answer_format="tagged")
    problem = tagged.eval_problems()[0]
    assert problem.demonstration == f" <answer>{problem.answer}</answer>"
    assert tagged.verify(problem, f"thinking <answer>no</answer> then <answer>{problem.answer}</answer>").reward == 1.0
    missing = tagged.verify(problem, problem.answer)
    assert missing.reward == 0.0 and "no final answer" in missing.feedback


def test_partial_credit_is_the_scorers_value_only_when_asked(plain):
    import reasoning_gym

    exact = plain
    partial = ReasoningGymTask(["spell_backward"], train_size=10, eval_size=5, partial_credit=True)
    problem = exact.eval_problems()[0]
    padded = f"{problem.answer}{problem.answer}"  # spell_backward's scorer credits the letters in place: 0.8
    _, index = exact.place(problem)
    library = reasoning_gym.create_dataset("spell_backward", seed=exact.stream_seed(0), size=index + 1)
    expected = library.score_answer(padded, library[index])
    assert 0 < expected < 1
    assert exact.verify(problem, padded).reward == 0.0
    verdict = partial.verify(partial.eval_problems()[0], padded)
    assert verdict.reward == pytest.approx(expected) and "partial credit" in verdict.feedback


def test_an_answer_the_scorer_evaluates_reaches_nothing_and_one_that_hangs_scores_zero(tmp_path):
    # string_insertion's scorer calls eval() on an answer that is not the right one
    task = ReasoningGymTask(["string_insertion"], train_size=10, eval_size=5, score_timeout_s=2)
    problem = task.eval_problems()[0]
    marks = [tmp_path / name for name in ("ran", "written", "forked")]
    attacks = [
        f"__import__('os').system('touch {marks[0]}') or 'x'",
        f"open('{marks[1]}', 'w').write('x') and 'x'",
        f"(__import__('os').fork() or open('{marks[2]}', 'w')) and 'x'",
        "__import__('socket').create_connection(('127.0.0.1', 9)) and 'x'",
        "[c for c in iter(int, 1)]",  # would never end
        "__import__('os')._exit(3)",  # would end the scorer's process
        problem.answer,
    ]
    verdicts = [task.verify(problem, attack) for attack in attacks]
    assert not any(mark.exists() for mark in marks)
    assert [v.reward for v in verdicts] == [0.0] * 6 + [1.0] and all(v.judged for v in verdicts)


def scorer_with(name: str, count: int = 3):
    """A generator process for one generator, and its first `count` problems as (question, answer)."""
    from tasks.reasoning_gym.scorer import ScorerProcess

    process = ScorerProcess({"generators": [{"name": name}], "seeds": [0], "size": 50}, timeout_s=5)
    return process, process.ask({"op": "draw", "g": 0, "start": 0, "count": count})["items"]


FORGED = "__import__('sys').stdout.write('{\"score\": 1.0}\\n')"
"""An answer that, run as code in the scorer, writes the scorer's reply for itself."""
EVALUATED = [
    ("n_queens", f"({FORGED}, [])[1]"),
    ("spiral_matrix", f"({FORGED}, [])[1]"),
    ("binary_matrix", f"({FORGED}, [])[1]"),
    ("string_insertion", f"({FORGED}, 'x')[1]"),
    ("countdown", FORGED),
    ("puzzle24", FORGED),
    ("polynomial_multiplication", FORGED),
    ("simple_integration", FORGED),
    ("intermediate_integration", FORGED),
]


@pytest.mark.parametrize(("name", "forged"), EVALUATED, ids=[name for name, _ in EVALUATED])
def test_an_answer_the_scorer_evaluates_cannot_write_its_own_score(name, forged):
    """Every generator whose scorer evaluates answers: the forged reply scores what an unreadable
    answer does (some scorers give those a little), the answers after it keep their own scores,
    and the right answer still scores 1 (read without eval)."""
    process, items = scorer_with(name)
    try:
        honest = process.scores([(0, 0, "?"), (0, 0, "0"), (0, 0, items[0][1])])
        assert honest[0] < 1.0 and honest[2] == 1.0
        assert process.scores([(0, 0, forged), (0, 0, "0"), (0, 0, items[0][1])]) == honest
    finally:
        process.close()


def test_an_answer_cannot_patch_the_scorer_for_the_answers_after_it():
    process, items = scorer_with("string_insertion")
    patch = "setattr(__import__('builtins'), 'float', lambda score: 1.0) or 'x'"
    try:
        assert process.scores([(0, 0, patch), (0, 1, "wrong"), (0, 2, "wrong")]) == [0.0, 0.0, 0.0]
    finally:
        process.close()


def test_honest_answers_with_arithmetic_and_sympy_functions_are_read():
    """The safe reader keeps what honest answers write: sympy's functions, powers, fractions, pi."""
    from sympy import Symbol, parse_expr, sqrt

    from tasks.reasoning_gym.answers import Refused, literal, read_safely

    x = Symbol("x")
    with read_safely({}):
        assert parse_expr("3*x**2/2 + sin(x) - exp(2*x)/4 + C", local_dict={"x": x, "C": Symbol("C")}).has(x)
        assert parse_expr("sqrt(8)*pi") == 2 * sqrt(2) * parse_expr("pi")
        assert parse_expr("(7 - 5)*6*2") == 24
        with pytest.raises(Refused):
            parse_expr("x.func")
        with pytest.raises(Refused):
            parse_expr("exec('1')")
    assert literal("[['Q', '_'], ['_', 'Q']]") == [["Q", "_"], ["_", "Q"]]
    with pytest.raises(Refused):
        literal("[1] * 3")


def test_a_scorer_that_died_while_idle_is_started_again_without_blaming_an_answer():
    process, items = scorer_with("spiral_matrix", count=1)
    try:
        assert process.scores([(0, 0, items[0][1])]) == [1.0]
        process.process.kill()
        process.process.wait()
        assert process.scores([(0, 0, items[0][1]), (0, 0, "1 2")]) == [1.0, 0.0]
    finally:
        process.close()


def test_files_in_the_working_directory_are_not_imported_by_the_scorer(tmp_path, monkeypatch):
    (tmp_path / "json.py").write_text("raise SystemExit(9)\n")
    (tmp_path / "tasks").mkdir()  # a package that would hide the harness's own
    (tmp_path / "tasks" / "__init__.py").write_text("raise SystemExit(9)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", ".")
    process, items = scorer_with("spiral_matrix", count=1)
    try:
        assert process.scores([(0, 0, items[0][1])]) == [1.0]
    finally:
        process.close()


def test_the_confined_scorer_can_make_or_change_no_file(tmp_path):
    """Device nodes, FIFOs, modes, times and owners: refused once the process is confined."""
    pytest.importorskip("pyseccomp")
    (tmp_path / "kept").write_text("x")
    script = f"""
import os
from tasks.reasoning_gym.worker import confine
confine()
refused = 0
for attempt in (lambda: os.mkfifo("{tmp_path}/fifo"), lambda: os.mknod("{tmp_path}/node"),
                lambda: os.chmod("{tmp_path}/kept", 0o777), lambda: os.utime("{tmp_path}/kept", (0, 0)),
                lambda: os.chown("{tmp_path}/kept", 0, 0)):
    try:
        attempt()
    except PermissionError:
        refused += 1
print(refused)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "5"
    assert not (tmp_path / "fifo").exists() and not (tmp_path / "node").exists()
    assert (tmp_path / "kept").stat().st_mtime > 0


def test_an_answer_that_hangs_the_scorer_scores_zero_and_the_next_is_scored():
    process, items = scorer_with("countdown", count=2)
    process.timeout_s = 2
    try:
        verdicts = process.scores([(0, 0, "9**9**9**9"), (0, 1, items[1][1])])
        assert verdicts[0].why == "the scorer ran past 2 s on this answer" and verdicts[1] == 1.0
    finally:
        process.close()


def test_a_scorer_that_cannot_start_leaves_its_answers_unjudged_and_keeps_one_finalizer(monkeypatch):
    """The scorer's own failure is not the policy's: its answers are unjudged, not wrong. A
    restarted process replaces the finalizer that would kill the old one."""
    from tasks.reasoning_gym.scorer import ScorerGone, ScorerProcess

    task = ReasoningGymTask([SMALL_SUMS], train_size=10, eval_size=5)
    problem = task.eval_problems()[0]
    first = task.scorer.finalizer
    task.scorer.close()
    assert task.verify(problem, problem.answer).reward == 1.0  # started again
    assert first is not None and not first.alive and task.scorer.finalizer.alive
    task.scorer.close()

    def fails(self):
        raise ScorerGone(timed_out=False)

    monkeypatch.setattr(ScorerProcess, "start", fails)
    verdicts = task.verify_each([problem, problem], [problem.answer, "0"])
    assert [(v.reward, v.judged) for v in verdicts] == [(0.0, False)] * 2
    assert verdicts[0].feedback == "the scorer could not start: the generator process ended"


@pytest.mark.slow
def test_grpo_and_hp_rlvr_train_on_generators_from_a_yaml(tmp_path):
    import polars as pl
    import yaml
    from test_e2e import suite

    from harness.__main__ import main

    spec = suite("gym", "tasks.reasoning_gym.ReasoningGymTask", steps=2)
    spec["task"]["init_args"] |= {"generators": ["spell_backward", SMALL_SUMS], "train_size": 100, "eval_size": 8}
    spec["algorithms"]["hp_rlvr"] = {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}}
    config = tmp_path / "bench.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp_path / "cache"), "suites": [spec]}))
    assert main(["run", str(config), "--results", str(tmp_path / "runs")]) == 0
    grpo = pl.read_parquet(tmp_path / "runs" / "gym" / "grpo-seed0" / "metrics.parquet")
    hp_rlvr = pl.read_parquet(tmp_path / "runs" / "gym" / "hp_rlvr-seed0" / "metrics.parquet")
    assert grpo["rollouts"].to_list() == [16, 16] and hp_rlvr["rollouts"].to_list() == [4, 4]
    assert (tmp_path / "runs" / "gym" / "leaderboard.parquet").exists()
