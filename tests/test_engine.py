import torch

from harness.engine import RolloutEngine, SamplingArgs, sequence_logprobs, token_logprobs
from harness.models import load_policy
from tasks.base import Problem


def problems(n):
    return [Problem(id=str(i), prompt="Q: " + "7+" * (i % 4) + "1\nA:", answer="1") for i in range(n)]


def test_token_logprobs_equals_log_softmax_in_chunks():
    logits = torch.randn(3, 11, 50)
    tokens = torch.randint(0, 50, (3, 11))
    expected = torch.log_softmax(logits / 0.7, -1).gather(-1, tokens[..., None]).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, tokens, 0.7, chunk=4), expected)


def peaked(model):
    """Random weights large enough that every prediction depends on its context and position,
    so that a misaligned or mis-padded forward pass shows (a fresh init is nearly uniform)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.3)
    return model


def test_masks_and_sampling_logprobs_align_with_a_training_forward(tiny_dir):
    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.8, max_new_tokens=12))
    rollouts = engine.generate(problems(6))
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    for row in range(len(rollouts)):
        ids, eligible, mask = rollouts.input_ids[row], rollouts.eligible[row], rollouts.attention_mask[row]
        prompt = tokenizer(rollouts.problems[row].prompt, add_special_tokens=False).input_ids
        positions = eligible.nonzero().flatten()
        first = int(positions[0])
        # the prompt's own tokens sit right before the completion, left padding before them
        assert ids[first - len(prompt) : first].tolist() == prompt
        assert not mask[: first - len(prompt)].any()
        # eligible: one contiguous run from the first generated token up to the first EOS
        assert (positions == torch.arange(first, first + len(positions))).all()
        generated = ids[positions].tolist()
        assert eos not in generated[:-1]
        assert mask[first:].bool().tolist() == eligible[first:].tolist()
        assert tokenizer.decode(generated, skip_special_tokens=True) == rollouts.completions[row]
        assert (ids[int(positions[-1]) + 1 :] == pad).all()
    # the sampler's log-probs are what a training forward pass computes at the same temperature
    forward = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 0.8)
    torch.testing.assert_close(forward[rollouts.eligible], rollouts.sample_logprobs[rollouts.eligible], atol=1e-4, rtol=1e-4)
    assert (rollouts.sample_logprobs[~rollouts.eligible] == 0).all()
    # ... and what the model gives each sequence alone, without any padding
    for row in range(len(rollouts)):
        keep = rollouts.attention_mask[row].bool()
        alone = sequence_logprobs(model, rollouts.input_ids[row, keep][None], torch.ones(1, int(keep.sum()), dtype=torch.long), 0.8)[0]
        torch.testing.assert_close(alone[rollouts.eligible[row, keep]], rollouts.sample_logprobs[row][rollouts.eligible[row]], atol=1e-4, rtol=1e-4)
    assert rollouts.sample_logprobs[rollouts.eligible].std() > 0.5  # the check above had something to compare


def test_chunked_generation_concatenates_aligned(tiny_dir):
    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=8, batch_size=4))
    rollouts = engine.generate(problems(10))
    assert len(rollouts) == 10 and rollouts.input_ids.shape == rollouts.eligible.shape
    forward = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 1.0)
    torch.testing.assert_close(forward[rollouts.eligible], rollouts.sample_logprobs[rollouts.eligible], atol=1e-4, rtol=1e-4)
    sub = rollouts.select(torch.tensor([1, 7]))
    assert sub.completions == [rollouts.completions[1], rollouts.completions[7]]
    assert sub.eligible.sum() == rollouts.eligible[[1, 7]].sum()


def test_logprobs_at_chosen_positions_equal_the_full_forward(tiny_dir):
    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    rollouts = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.7, max_new_tokens=9)).generate(problems(5))
    full = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 0.7)
    chosen = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 0.7, rollouts.eligible)
    torch.testing.assert_close(chosen[rollouts.eligible], full[rollouts.eligible], atol=1e-5, rtol=1e-5)
    assert (chosen[~rollouts.eligible] == 0).all()
