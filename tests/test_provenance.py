"""What a run records of where its numbers came from (harness/provenance.py), and the refusals
built on it: resuming, adding to a published suite and pairing runs from other starting weights."""

import json

import polars as pl
import pytest
import torch

from harness.provenance import OtherWeights, check_same_start, data_digest
from harness.start import weights_digest
from tasks.math import MathTask


def test_the_weights_digest_reads_content_not_files(tiny_dir, tmp_path):
    from harness.models import load_policy

    policy, _ = load_policy(tiny_dir)
    digest = weights_digest(policy)
    assert len(digest) == 16 and digest == weights_digest(load_policy(tiny_dir)[0])
    policy.save_pretrained(tmp_path / "copy", safe_serialization=False)  # another format, the same weights
    assert weights_digest(load_policy(tmp_path / "copy", attention="eager")[0]) == digest
    with torch.no_grad():
        next(policy.parameters()).view(-1)[0] += 1e-7  # one weight, one rounding step or so
    assert weights_digest(policy) != digest


def test_the_data_digest_follows_the_problems():
    one = data_digest(MathTask(train_size=30, eval_size=10))
    assert one == data_digest(MathTask(train_size=30, eval_size=10))
    assert one != data_digest(MathTask(train_size=30, eval_size=10, seed=7))
    assert one != data_digest(MathTask(train_size=31, eval_size=10))


def test_the_weights_digest_tells_same_shaped_tensors_apart_by_their_names():
    """Two 2x2 weights a = [[1, 2], [3, 4]] and b = [[5, 6], [7, 8]]. Exchanged between a and b,
    every dtype, shape and byte is still there; under b and c in place of a and b, even their
    order is: only the names tell these models apart, and they are other models."""

    def model(**weights):
        module = torch.nn.Module()
        for name, values in weights.items():
            module.register_parameter(name, torch.nn.Parameter(torch.tensor(values)))
        return module

    one, two = [[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]
    digest = weights_digest(model(a=one, b=two))
    assert weights_digest(model(b=two, a=one)) == digest  # the same names and tensors, declared in another order
    assert weights_digest(model(a=two, b=one)) != digest  # swapped
    assert weights_digest(model(b=one, c=two)) != digest  # the same bytes in the same order, other names


def test_the_data_digest_reads_the_held_out_split():
    """Two tasks with the same training problems whose held-out problems differ by one answer
    ("4" or "5"): the held-out set decides every accuracy a run records."""
    from tasks.base import Problem

    class Fixed(MathTask):
        def __init__(self, held_out_answer):
            super().__init__(train_size=2, eval_size=1)
            self.held_out_answer = held_out_answer

        def train_problems(self):
            return [Problem("t0", "1+1", "2"), Problem("t1", "2+1", "3")]

        def eval_problems(self):
            return [Problem("e0", "2+2", self.held_out_answer)]

    assert data_digest(Fixed("4")) == data_digest(Fixed("4"))
    assert data_digest(Fixed("4")) != data_digest(Fixed("5"))


def test_native_kernel_runs_agree_only_on_the_same_cpu_and_thread_count():
    """Portable kernels round alike on every CPU and thread count, so such runs share a key; the
    machine's own kernels do not, so a run on another CPU or at another thread count is keyed apart."""
    from harness.provenance import environment_key

    def record(mode, cpu="Intel Xeon", threads=2, aten="AVX2"):
        kernels = {"mode": mode, "aten": aten, "cpu": cpu, "threads": threads}
        return {"environment": {"device": "cpu", "cpu_kernels": kernels, "lock": {"digest": "abc", "differs": []}}}

    portable = environment_key(record("portable"))
    assert environment_key(record("portable", cpu="AMD EPYC", threads=4)) == portable
    native = environment_key(record("native"))
    assert native != portable and environment_key(record("native")) == native
    assert environment_key(record("native", cpu="AMD EPYC")) != native
    assert environment_key(record("native", threads=4)) != native
    assert environment_key(record("native", aten="AVX512")) != native


def test_a_task_gives_a_files_content_in_place_of_its_path(tmp_path):
    from tasks.base import Problem

    class FromFiles(MathTask):
        def __init__(self, folder):
            super().__init__(train_size=2, eval_size=2)
            self.folder = folder

        def train_problems(self):
            return [Problem("g", "play", str(self.folder / "game.txt"))]

        def eval_problems(self):
            return []

        def content(self, problem):
            with open(problem.answer, "rb") as game:
                return (problem.id, problem.prompt, game.read())

    for folder in (tmp_path / "a", tmp_path / "b"):
        folder.mkdir()
        (folder / "game.txt").write_text("the same game")
    assert data_digest(FromFiles(tmp_path / "a")) == data_digest(FromFiles(tmp_path / "b"))
    (tmp_path / "b" / "game.txt").write_text("another game")
    assert data_digest(FromFiles(tmp_path / "a")) != data_digest(FromFiles(tmp_path / "b"))


def test_runs_from_other_starting_weights_are_refused_naming_both_digests():
    check_same_start([("a", {"starting_weights_digest": "1111"}), ("b", {"starting_weights_digest": "1111"})], "x")
    check_same_start([("old", {}), ("b", {"starting_weights_digest": "1111"})], "x")  # recorded before digests
    with pytest.raises(OtherWeights, match=r"x: a started from weights 1111, b from 2222"):
        check_same_start([("a", {"starting_weights_digest": "1111"}), ("b", {"starting_weights_digest": "2222"})], "x")


def run(seed=0, digest="1111", **environment):
    from test_leaderboard import run_info, two_steps

    info = run_info(seed=seed, accuracy_before=0.5, accuracy_after=0.5)
    if digest is not None:
        info["starting_weights_digest"] = digest
    if environment:
        info["environment"] = environment
    return info, two_steps(), pl.DataFrame()


def test_add_refuses_other_starting_weights_and_names_what_it_replaces():
    from harness.records import added, replaced

    published = [run(0), run(1)]
    assert [r[0]["seed"] for r in added([run(1)], published)] == [0, 1]
    assert replaced([run(1)], published) == ["grpo-seed1"]
    with pytest.raises(
        OtherWeights, match=r"--add: grpo-seed1 \(added\) started from weights 2222, grpo-seed0 from 1111"
    ):
        added([run(1, digest="2222")], published)
    with pytest.raises(OtherWeights, match="2222"):  # replacing every published run does not hide it
        added([run(0, digest="2222"), run(1, digest="2222")], published)
    before_digests = [run(0, digest=None), run(1, digest=None)]
    assert len(added([run(1, digest=None)], before_digests)) == 2  # as before digests were kept
    # runs without a digest beside one with: nothing shows they started from the same weights
    with pytest.raises(OtherWeights, match="grpo-seed0, grpo-seed1 recorded no digest"):
        added([run(1)], before_digests)


def test_the_leaderboard_pairs_only_runs_from_the_same_weights_and_names_other_environments(tmp_path, capsys):
    from harness.leaderboard import environments_note, publish
    from harness.records import publish_records

    portable = {"device": "cpu", "cpu_kernels": {"mode": "portable", "aten": "AVX2", "threads": 2, "cpu": "A"}}
    other = {"device": "cpu", "cpu_kernels": {"mode": "portable", "aten": "AVX2", "threads": 8, "cpu": "B"}}
    native = {"device": "cpu", "cpu_kernels": {"mode": "native", "aten": "AVX512", "threads": 2, "cpu": "B"}}
    assert environments_note("s", [run(0, **portable), run(1, **other)]) == ""  # portable: any CPU, any threads
    note = environments_note("s", [run(0, **portable), run(1, **native)])
    assert "2 environments" in note and "grpo-seed0" in note and "native kernels (AVX512, 2 threads, B)" in note
    publish_records([run(0), run(1, digest="2222")], tmp_path / "s")
    with pytest.raises(OtherWeights, match="suite s: grpo-seed0 started from weights 1111, grpo-seed1 from 2222"):
        publish(tmp_path / "s")


def test_resuming_from_other_starting_weights_is_refused(tmp_path):
    from harness.resume import continued

    said = []
    origin = {"starting_weights_digest": "1111", "task_data_digest": "d", "environment": {"device": "cpu"}}
    assert continued(tmp_path, origin, resume=False, say=said.append) == origin
    assert json.loads((tmp_path / "provenance.json").read_text()) == origin
    moved = {**origin, "environment": {"device": "cuda: X"}}
    assert continued(tmp_path, moved, resume=True, say=said.append)["resumed_in"] == [{"device": "cuda: X"}]
    assert "resumed in another environment" in said[0]
    with pytest.raises(OtherWeights, match=r"the run started from weights 1111, its resume from 2222"):
        continued(tmp_path, {**origin, "starting_weights_digest": "2222"}, resume=True, say=said.append)


def test_this_environment_is_the_locks():
    """The README's commands install through the lock, so the tests run on the releases a user gets."""
    from harness.provenance import lock

    assert lock()["digest"] is not None
    assert lock()["differs"] == [], "installed off the lock: pip install -c constraints.txt -e '.[dev]'"


def test_cached_weights_built_on_other_kernels_or_another_lock_are_announced(tmp_path, capsys):
    from harness.start import built_elsewhere_warning, built_with

    here, before, other = tmp_path / "here", tmp_path / "before", tmp_path / "other"
    for folder, recipe in ((here, {"built_with": built_with()}), (before, {}), (other, {"built_with": {"lock": "x"}})):
        folder.mkdir()
        (folder / "recipe.json").write_text(json.dumps(recipe))
    assert built_elsewhere_warning(here) == here and capsys.readouterr().out == ""
    built_elsewhere_warning(before)
    assert "built with kernels and a lock not recorded" in capsys.readouterr().out
    built_elsewhere_warning(other)
    built_elsewhere_warning(other)  # once a process
    assert capsys.readouterr().out.count("{'lock': 'x'}") == 1
