"""Every algorithm scores the tokens it trains on at the temperature they were sampled at: with
the weights that sampled them, the update's log-probs are the sampler's own."""

import pytest
import torch
import yaml
from test_e2e import suite

from harness.build import build_module
from harness.config import load_benchmark


@pytest.fixture(scope="module")
def three_algorithms(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("temperature")
    spec = suite("t", "tasks.math.MathTask", sampling={"max_new_tokens": 10, "temperature": 0.5})
    spec["algorithms"] = {
        "grpo": {"class_path": "algorithms.grpo.GRPO", "init_args": {"group_size": 4}},
        "hp_rlvr": {"class_path": "algorithms.hp_rlvr.HPRLVR", "init_args": {"segments": 2}},
        "ppo": {"class_path": "algorithms.ppo.PPO"},
    }
    config = tmp / "b.yaml"
    config.write_text(yaml.safe_dump({"cache_dir": str(tmp / "cache"), "suites": [spec]}))
    return load_benchmark(config)


@pytest.mark.parametrize("algorithm", ["grpo", "hp_rlvr", "ppo"])
def test_the_update_scores_tokens_at_the_sampling_temperature(three_algorithms, algorithm):
    module, _ = build_module(three_algorithms.suites[0], algorithm, 0, three_algorithms.cache_dir)
    assert module.sampling.temperature == 0.5
    torch.manual_seed(0)
    rollouts = module.task.rollout(module.engine, module.task.train_problems()[:4], module.group_size)
    with torch.no_grad():
        logprobs, _ = module.score(rollouts)
    eligible = rollouts.eligible
    torch.testing.assert_close(logprobs[eligible], rollouts.sample_logprobs[eligible], atol=1e-4, rtol=1e-4)
    # at T = 1 they would differ: the test can tell
    module.sampling.temperature = 1.0
    with torch.no_grad():
        at_one, _ = module.score(rollouts)
    assert (at_one[eligible] - rollouts.sample_logprobs[eligible]).abs().max() > 1e-2
