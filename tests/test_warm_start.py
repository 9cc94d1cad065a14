import torch

from harness.models import SupervisedWarmStart, WarmStartArgs, load_policy, packed


def rows_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n in lengths:
        ids = torch.randint(2, 90, (n,), generator=g).tolist()
        prompt = n // 3  # 0 for the shortest: a row whose first token is labelled
        rows.append((ids, [-100] * prompt + ids[prompt:]))
    return rows


def one_row_per_line_loss(model, rows):
    """The token mean of the loss with every row alone in its own forward pass."""
    total, count = 0.0, 0
    for ids, labels in rows:
        n = sum(label != -100 for label in labels[1:])
        total = total + model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss * n
        count += n
    return total / count


def test_packed_rows_give_the_loss_and_gradients_of_rows_alone(tiny_dir):
    model, _ = load_policy(tiny_dir)
    rows = rows_of((5, 9, 14, 22, 30, 7, 2, 30))
    batch = packed(rows, pad_id=0)
    assert batch["input_ids"].shape[1] == 30 and batch["input_ids"].shape[0] < len(rows)  # really packed
    module = SupervisedWarmStart(model, WarmStartArgs())
    module.log = lambda *args, **kwargs: None
    loss = module.training_step(batch, 0)
    (grad_packed,) = torch.autograd.grad(loss, model.model.layers[0].self_attn.q_proj.weight)
    reference = one_row_per_line_loss(model, rows)
    (grad_alone,) = torch.autograd.grad(reference, model.model.layers[0].self_attn.q_proj.weight)
    torch.testing.assert_close(loss, reference)
    torch.testing.assert_close(grad_packed, grad_alone)


def test_packing_keeps_every_token_once_with_positions_restarting_per_row():
    rows = rows_of((4, 6, 10, 2, 8))
    batch = packed(rows, pad_id=0)
    starts = batch["position_ids"] == 0
    kept = sorted(
        tuple(line[s:e].tolist())
        for line, restart in zip(batch["input_ids"], starts)
        for s, e in zip(restart.nonzero().flatten().tolist(), [*restart.nonzero().flatten().tolist()[1:], len(line)])
    )
    real = sorted(tuple(ids) for ids, _ in rows)
    assert [k for k in kept if any(k)] == real  # each row intact, once; the rest is padding tails
