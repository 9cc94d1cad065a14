import torch

from harness.models import SupervisedWarmStart, WarmStartArgs, load_policy, padded


def test_loss_over_length_sorted_parts_equals_one_padded_batch(tiny_dir):
    model, tokenizer = load_policy(tiny_dir)
    g = torch.Generator().manual_seed(0)
    rows = []
    for n in (5, 9, 14, 22, 30):
        ids = torch.randint(2, 90, (n,), generator=g).tolist()
        prompt = n // 3
        rows.append((ids, [-100] * prompt + ids[prompt:]))
    module = SupervisedWarmStart(model, WarmStartArgs())
    module.log = lambda *args, **kwargs: None
    parts = module.training_step({"parts": [padded(rows[:2], 0), padded(rows[2:], 0)]}, 0)
    whole = model(**padded(rows, 0)).loss
    torch.testing.assert_close(parts, whole)
