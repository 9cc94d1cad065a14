"""A reward function for tests that need a `tasks.reward.RewardTask` (tests/data/say.jsonl)."""


def reward(prompt, completion, answer, **row):
    words = completion.split()
    return float(bool(words) and words[-1] == str(answer))
