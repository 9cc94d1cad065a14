import torch

from harness.models import SupervisedWarmStart, WarmStartArgs, first_fit, layout, load_policy, packed_lines, padded


def packed(rows, pad_id):
    """Rows packed into lines as wide as the longest, as `layout` packs them."""
    width = max(len(ids) for ids, _ in rows)
    return packed_lines(first_fit(rows, width), width, pad_id)


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
    loss = module.training_step({"parts": [batch]}, 0)
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


def test_loss_over_length_sorted_halves_equals_one_padded_batch(tiny_dir):
    model, _ = load_policy(tiny_dir)
    rows = rows_of((5, 9, 14, 22, 30))
    module = SupervisedWarmStart(model, WarmStartArgs())
    module.log = lambda *args, **kwargs: None
    parts = module.training_step({"parts": [padded(rows[:2], 0), padded(rows[2:], 0)]}, 0)
    torch.testing.assert_close(parts, model(**padded(rows, 0)).loss)


def test_layout_packs_mixed_lengths_and_pads_similar_ones():
    mixed = layout(rows_of((60, 60, 60, 60, 60, 60, 100, 40, 40, 40, 40, 40, 40, 38)), pad_id=0)
    assert len(mixed) == 1 and "position_ids" in mixed[0]
    similar = layout(rows_of((30, 34, 38, 40, 36, 32)), pad_id=0)
    assert len(similar) == 2 and all("attention_mask" in part for part in similar)


def test_rl_only_problems_are_never_demonstrated_nor_in_the_vocabulary():
    """The first `rl_only` training problems stay out of the warm start's batches and out of the
    corpus a trained vocabulary is built from; the rest are all drawn."""
    import itertools

    import pytest

    from harness.models import Demonstrations, task_corpus
    from harness.tiny import build_tokenizer
    from tasks.math import MathTask

    task = MathTask(train_size=40, eval_size=4)
    tokenizer = build_tokenizer()
    args = WarmStartArgs(rl_only=25)
    kept = {p.prompt for p in task.train_problems()[25:]}
    drawn = set()
    for batch in itertools.islice(iter(Demonstrations(task, tokenizer, 8, 0, rl_only=args.rl_only)), 30):
        for part in batch["parts"]:
            text = "".join(tokenizer.decode(row) for row in part["input_ids"].tolist())
            drawn |= {p for p in kept if p in text}
            assert not any(p.prompt in text for p in task.train_problems()[:25])
    assert drawn == kept
    assert task_corpus(task, args.rl_only) == [p.prompt + p.demonstration for p in task.train_problems()[25:]]
    with pytest.raises(ValueError, match="rl_only: must be >= 0"):
        WarmStartArgs(rl_only=-1)


def test_split_digits_keeps_every_digit_a_token_and_earlier_keys():
    """A vocabulary trained on the code task's texts fuses constants with the words beside them
    ('6, add '); with `split_digits` each digit is a token of its own, and the option's default
    stays out of the recipe key, so caches written before it existed keep theirs."""
    from harness.start import tiny_key
    from harness.tiny import TinyConfig, build_tokenizer
    from tasks.code import CodeTask

    task = CodeTask(train_size=200, eval_size=10)
    corpus = [p.prompt + p.demonstration for p in task.train_problems()]
    text = task.train_problems()[0].prompt
    fused = build_tokenizer(corpus, vocabulary=400)
    split = build_tokenizer(corpus, vocabulary=400, split_digits=True)
    pieces = [split.decode([i]) for i in split(text, add_special_tokens=False).input_ids]
    assert "".join(pieces) == text
    assert all(len(p) == 1 for p in pieces if any(c.isdigit() for c in p))
    assert any(len(p) > 1 and any(c.isdigit() for c in p) for p in map(fused.decode, fused(corpus[0]).input_ids))
    assert "split_digits" not in tiny_key(TinyConfig(vocabulary=512))
    assert tiny_key(TinyConfig(vocabulary=512, split_digits=True))["split_digits"] is True


def test_token_memo_tokenises_a_text_once_and_hands_out_lists_of_their_own():
    from harness.models import TokenMemo
    from harness.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    memo, calls = TokenMemo(tokenizer), []
    memo.tokenizer = lambda *args, **kwargs: calls.append(args) or tokenizer(*args, **kwargs)
    first = memo("12+3=", add_special_tokens=False)
    first.input_ids.append(99)  # callers extend what they get (ALFWorld's supervised_example)
    again = memo("12+3=", add_special_tokens=False)
    assert again.input_ids == again["input_ids"] == tokenizer("12+3=", add_special_tokens=False).input_ids
    assert len(calls) == 1
    assert (
        memo(["a", "b"], add_special_tokens=False).input_ids
        == tokenizer(["a", "b"], add_special_tokens=False).input_ids
    )
    assert len(calls) == 2 and TokenMemo(tokenizer).eos_token_id == tokenizer.eos_token_id


def test_a_token_memo_survives_pickling():
    import pickle

    from harness.models import TokenMemo
    from harness.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    memo = TokenMemo(tokenizer)
    memo("12+3=", add_special_tokens=False)
    copy = pickle.loads(pickle.dumps(memo))  # DataLoader workers pickle their dataset's parts
    assert copy.ids == memo.ids and copy.eos_token_id == tokenizer.eos_token_id


def batches(task, tokenizer, count: int, **kwargs) -> list:
    import itertools

    from algorithms.hp_rlvr import HindsightTeaching
    from harness.models import Demonstrations

    data = Demonstrations(task, tokenizer, 8, 0, [HindsightTeaching(fraction=0.5, **kwargs)])
    return [
        [{k: v.tolist() for k, v in part.items()} for part in b["parts"]] for b in itertools.islice(iter(data), count)
    ]


def test_the_warm_start_batches_are_those_of_the_tokenizer_without_its_memo(monkeypatch):
    import harness.models
    from harness.tiny import build_tokenizer
    from tasks.math import MathTask

    task, tokenizer = MathTask(train_size=20, eval_size=4), build_tokenizer()
    memoised = batches(task, tokenizer, 12)
    monkeypatch.setattr(harness.models, "TokenMemo", lambda tokenizer: tokenizer)
    assert batches(task, tokenizer, 12) == memoised
