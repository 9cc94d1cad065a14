import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

import rollout.decoding
from harness.models import load_policy
from rollout.batch import left_padded, stacked_left
from rollout.cache import GrowingLayer
from rollout.decoding import RolloutEngine, SamplingArgs, decode, sample_next
from rollout.scoring import activation_checkpointing, sequence_logprobs, token_logprobs
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
    torch.testing.assert_close(
        forward[rollouts.eligible], rollouts.sample_logprobs[rollouts.eligible], atol=1e-4, rtol=1e-4
    )
    assert (rollouts.sample_logprobs[~rollouts.eligible] == 0).all()
    # ... and what the model gives each sequence alone, without any padding
    for row in range(len(rollouts)):
        keep = rollouts.attention_mask[row].bool()
        alone = sequence_logprobs(
            model, rollouts.input_ids[row, keep][None], torch.ones(1, int(keep.sum()), dtype=torch.long), 0.8
        )[0]
        torch.testing.assert_close(
            alone[rollouts.eligible[row, keep]],
            rollouts.sample_logprobs[row][rollouts.eligible[row]],
            atol=1e-4,
            rtol=1e-4,
        )
    assert rollouts.sample_logprobs[rollouts.eligible].std() > 0.5  # the check above had something to compare


def test_chunked_generation_concatenates_aligned(tiny_dir):
    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=8, batch_size=4))
    rollouts = engine.generate(problems(10))
    assert len(rollouts) == 10 and rollouts.input_ids.shape == rollouts.eligible.shape
    forward = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 1.0)
    torch.testing.assert_close(
        forward[rollouts.eligible], rollouts.sample_logprobs[rollouts.eligible], atol=1e-4, rtol=1e-4
    )
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


def test_groups_prefilled_once_sample_what_unshared_rows_sample(tiny_dir):
    """GRPO's G copies of a prompt share one prefill; with the same random numbers they draw the
    same tokens with the same log-probs as G separately prefilled rows."""
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.9, max_new_tokens=10))
    repeated = [p for p in problems(4) for _ in range(3)]
    torch.manual_seed(5)
    shared = engine.generate(repeated, group_size=3)
    torch.manual_seed(5)
    alone = engine.generate(repeated, group_size=1)
    assert torch.equal(shared.input_ids, alone.input_ids) and torch.equal(shared.eligible, alone.eligible)
    torch.testing.assert_close(shared.sample_logprobs, alone.sample_logprobs, atol=1e-5, rtol=1e-5)
    assert len(set(shared.completions[:3])) > 1  # the copies did diverge: sharing stops at the prompt


def test_rows_leave_the_batch_at_their_stop_token_without_changing_the_others(tiny_dir):
    """A row's continuation must not depend on which other rows are still in the batch: greedy
    decoding of a batch equals decoding each row alone, and nothing follows a stop token."""
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    rows = [tokenizer(p.prompt, add_special_tokens=False).input_ids for p in problems(6)]
    ids, mask = left_padded(rows, 0, "cpu")
    # stop on the most common greedy first tokens so that rows stop at different steps
    first, _ = decode(model, ids, mask, stop_ids=[-1], max_new_tokens=12, greedy=True)
    stops = [int(first[0, 2]), int(first[3, 4])]
    batch, _ = decode(model, ids, mask, stop_ids=stops, max_new_tokens=12, greedy=True, pad_id=0)
    lengths = []
    for i, row in enumerate(rows):
        single, _ = decode(
            model,
            torch.tensor([row]),
            torch.ones(1, len(row), dtype=torch.long),
            stop_ids=stops,
            max_new_tokens=12,
            greedy=True,
        )
        n = single.shape[1]
        assert batch[i, :n].tolist() == single[0].tolist()
        assert (batch[i, n:] == 0).all()
        lengths.append(n)
    assert len(set(lengths)) > 1  # rows did leave the batch at different steps


def grouped_rollouts(tiny_dir, prompts: int, group_size: int):
    """A peaked tiny model and `prompts` x `group_size` rollouts of it, groups prefilled once."""
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    torch.manual_seed(0)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=8))
    return model, engine.generate([p for p in problems(prompts) for _ in range(group_size)], group_size=group_size)


def test_grouped_training_forward_equals_the_unshared_one_with_gradients(tiny_dir):
    model, rollouts = grouped_rollouts(tiny_dir, 3, 4)
    grads = []
    for group in (1, 4):
        model.zero_grad()
        logp = sequence_logprobs(
            model, rollouts.input_ids, rollouts.attention_mask, 1.0, rollouts.eligible, group_size=group
        )
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        grads.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-5, rtol=1e-5)
    for unshared, shared in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(unshared, shared, atol=1e-5, rtol=1e-4)
    # rows that do not repeat their group's prompt are scored unshared, not wrongly shared
    mixed = rollouts.select(torch.tensor([0, 1, 4, 5]))
    torch.testing.assert_close(
        sequence_logprobs(model, mixed.input_ids, mixed.attention_mask, 1.0, mixed.eligible, group_size=4),
        sequence_logprobs(model, mixed.input_ids, mixed.attention_mask, 1.0, mixed.eligible),
    )


def test_scoring_in_passes_by_length_equals_one_pass_with_gradients(tiny_dir):
    model, rollouts = grouped_rollouts(tiny_dir, 6, 4)
    lengths = rollouts.attention_mask.view(6, 4, -1).any(1).sum(-1)
    assert len(set(lengths.tolist())) > 2  # groups of several lengths, so passes differ in width
    results = []
    for slots in (None, 4 * int(lengths.max()) * 2):  # two groups a pass at most
        model.zero_grad()
        logp = sequence_logprobs(
            model, rollouts.input_ids, rollouts.attention_mask, 1.0, rollouts.eligible, group_size=4, slots=slots
        )
        (logp * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-6, rtol=1e-6)
    for one_pass, by_passes in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(by_passes, one_pass, atol=1e-5, rtol=1e-4)  # rounding: sums in another order


def test_groups_with_nothing_to_score_are_left_out_of_the_pass(tiny_dir):
    model, rollouts = grouped_rollouts(tiny_dir, 3, 4)
    positions = rollouts.eligible.clone()
    positions[4:8] = False  # the middle group: nothing to score
    rows_seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: rows_seen.append(out.shape[0]))
    results = []
    for scored in (rollouts.eligible, positions):
        model.zero_grad()
        logp = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 1.0, scored, group_size=4)
        weights = torch.linspace(-1, 1, logp.numel()).view_as(logp) * positions  # no weight on the middle group
        (logp * weights).sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    hook.remove()
    assert rows_seen == [3, 12, 2, 8]  # shared prompts then completions: 3 groups, then 2
    assert (results[1][0][4:8] == 0).all()
    torch.testing.assert_close(results[1][0][positions], results[0][0][positions], atol=1e-6, rtol=1e-6)
    for every_group, two in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(two, every_group, atol=1e-6, rtol=1e-5)


def test_passes_by_length_hold_whole_groups_shortest_first_within_their_slots():
    from rollout.scoring import by_length

    ends = [9, 3, 6, 2, 6, 9]  # each group's last used column; every row starts at column 1 or 2
    mask = torch.zeros(12, 10, dtype=torch.long)
    for g, end in enumerate(ends):
        mask[2 * g : 2 * g + 2, 1 + g % 2 : end + 1] = 1
    ids = (torch.arange(12)[:, None] + 1) * mask  # a row's tokens are its number + 1
    passes = []

    def score(input_ids, attention_mask, positions):
        passes.append(((input_ids[::2].amax(1) - 1) // 2).tolist())  # the groups of the pass
        assert attention_mask.any(0).all()  # trimmed to columns some row uses
        return (input_ids.float(),)

    (scored,) = by_length(score, ids, mask, mask.bool(), group_size=2, slots=2 * 2 * 7)
    assert torch.equal(scored, ids.float())  # every row back in its place, padding 0
    assert passes == [[3, 1], [2, 4], [0], [5]]  # shortest first; room for two groups of 7 columns: 6 fit, 9 not
    assert sorted(g for p in passes for g in p) == list(range(6))


def test_top_p_keeps_the_smallest_nucleus_and_renormalises():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.manual_seed(0)
    drawn = {int(sample_next(logits, 1.0, 0.7, False)[0]) for _ in range(300)}
    assert drawn == {0, 1}  # 0.5 < 0.7 needs the second token; 0.8 >= 0.7 stops there
    token, logp = sample_next(logits, 1.0, 0.7, False)
    assert abs(float(logp.exp()) - (0.5 if int(token) == 0 else 0.3) / 0.8) < 1e-6
    assert {int(sample_next(logits, 1.0, 0.4, False)[0]) for _ in range(50)} == {0}
    assert int(sample_next(logits, 1.0, 1.0, True)[0]) == 0


def test_sampling_draws_each_token_with_its_probability_at_the_temperature():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])).expand(100_000, 4)
    torch.manual_seed(0)
    token, logp = sample_next(logits, 0.5, 1.0, False)  # T = 0.5 squares and renormalises
    expected = torch.tensor([0.25, 0.09, 0.0225, 0.0025]) / 0.365
    torch.testing.assert_close(torch.bincount(token, minlength=4) / 100_000, expected, atol=0.006, rtol=0)
    torch.testing.assert_close(logp, expected.log()[token])


@pytest.mark.parametrize("top_p", [0.65, 0.85, 0.97])
def test_top_p_at_a_temperature_keeps_the_nucleus_of_the_tempered_distribution(top_p):
    """At T = 0.5 the probabilities 0.5, 0.3, 0.15, 0.05 become 0.685, 0.247, 0.062, 0.007
    (squared, renormalised): top_p 0.65 keeps {0}, 0.85 keeps {0, 1}, 0.97 keeps {0, 1, 2}. The
    nucleus of the untempered probabilities (cumulative 0.5, 0.8, 0.95) would differ at each."""
    temperature, probabilities = 0.5, [0.5, 0.3, 0.15, 0.05]
    tempered = [p ** (1 / temperature) for p in probabilities]
    tempered = [p / sum(tempered) for p in tempered]
    nucleus, mass = [], 0.0  # most likely first, while the mass before a token is below top_p
    for token in sorted(range(4), key=lambda t: -tempered[t]):
        if mass >= top_p:
            break
        nucleus.append(token)
        mass += tempered[token]
    assert nucleus == {0.65: [0], 0.85: [0, 1], 0.97: [0, 1, 2]}[top_p]
    expected = torch.tensor([tempered[t] / mass if t in nucleus else 0.0 for t in range(4)])
    logits = torch.log(torch.tensor(probabilities)).expand(40_000, 4)
    torch.manual_seed(0)
    token, logp = sample_next(logits, temperature, top_p, False)
    assert set(token.tolist()) == set(nucleus)
    torch.testing.assert_close(torch.bincount(token, minlength=4) / 40_000, expected, atol=0.01, rtol=0)
    torch.testing.assert_close(logp, expected.log()[token])


def test_a_rollout_is_truncated_when_its_own_tokens_hold_no_eos():
    """Only an EOS the policy generated ends a completion: one in the prompt, or EOS used as the
    padding token (as many tokenizers do), says nothing of how the completion ended."""
    from rollout.batch import Rollouts

    eos, pad = 2, 2
    # prompt | completion, left-padded; E = eligible
    rows = [
        ([5, eos, 6], [7, eos]),  # EOS in the prompt, and generated: ended by the policy
        ([5, eos, 6], [7, 8]),  # EOS in the prompt only: cut by the length limit
        ([5, 6], [7]),  # padded with EOS (left), none generated: cut
        ([9, 5, 6], [7, 8]),  # no EOS anywhere: cut
        ([9, 5, 6], [eos]),  # EOS as the first generated token: ended
    ]
    width = max(len(p) + len(c) for p, c in rows)
    ids, mask, eligible = [], [], []
    for prompt, completion in rows:
        padding = width - len(prompt) - len(completion)
        ids.append([pad] * padding + prompt + completion)
        mask.append([0] * padding + [1] * (len(prompt) + len(completion)))
        eligible.append([False] * (padding + len(prompt)) + [True] * len(completion))
    rollouts = Rollouts(
        problems=[Problem(id=str(i), prompt="", answer="") for i in range(len(rows))],
        input_ids=torch.tensor(ids),
        attention_mask=torch.tensor(mask),
        eligible=torch.tensor(eligible),
        sample_logprobs=torch.zeros(len(rows), width),
        completions=[""] * len(rows),
    )
    assert rollouts.truncations(eos) == [False, True, True, True, False]
    rollouts.truncated = [True, False, False, False, False]  # a multi-turn task says it itself
    assert rollouts.truncations(eos) == [True, False, False, False, False]


def test_a_conversation_continues_from_its_cache_as_a_fresh_pass_over_each_context_would(tiny_dir):
    """Multi-turn decoding with the cache kept between turns (padding holes, rows that stopped
    early, episodes that leave) samples what recomputing every context from scratch samples."""
    from rollout.conversation import Conversation

    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.8, max_new_tokens=5))
    starts = [tokenizer(p.prompt, add_special_tokens=False).input_ids for p in problems(6)]
    answers = [[5, 6], [7], [8, 9, 10, 11], [12, 13, 14]]  # the "environment" appends different lengths
    first, _ = decode(model, *left_padded(starts, 0, "cpu"), stop_ids=[-1], max_new_tokens=3, greedy=True)
    stops = [int(first[0, 1]), int(first[2, 2])]
    for greedy in (True, False):
        runs = []
        for incremental in (True, False):
            torch.manual_seed(3)
            rows = [list(r) for r in starts]
            conversation = Conversation(engine, stops, 5, greedy)
            transcript = []
            for turn in range(4):
                active = [i for i in range(6) if not (i == 4 and turn >= 1) and not (i == 1 and turn >= 2)]
                contexts = [rows[i] for i in active]
                fresh = Conversation(engine, stops, 5, greedy)  # each turn recomputed from scratch
                turns = (conversation if incremental else fresh).turn(active, contexts)
                for i, t in zip(active, turns):
                    rows[i] += t.tokens + answers[(i + turn) % 4]
                    transcript.append((turn, i, t.tokens, [round(x, 4) for x in t.logprobs]))
            runs.append(transcript)
        assert [x[:3] for x in runs[0]] == [x[:3] for x in runs[1]]
        for a, b in zip(runs[0], runs[1]):
            torch.testing.assert_close(torch.tensor(a[3]), torch.tensor(b[3]), atol=2e-4, rtol=0)
        assert len({len(x[2]) for x in runs[0]}) > 1  # turns of different lengths: rows stopped early


def test_gradient_checkpointing_gives_the_same_logprobs_and_gradients(tiny_dir):
    model, rollouts = grouped_rollouts(tiny_dir, 2, 3)
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            activation_checkpointing(model, enable=True)
        model.train()
        model.zero_grad()
        logp = sequence_logprobs(
            model, rollouts.input_ids, rollouts.attention_mask, 1.0, rollouts.eligible, group_size=3
        )
        logp.sum().backward()
        results.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    assert activation_checkpointing(model)
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-5)
    for plain, recomputed in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(plain, recomputed, atol=1e-5, rtol=1e-4)


def test_a_growing_cache_layer_holds_what_a_concatenating_one_holds():
    """Appends past its spare room, repeats rows for groups, drops rows that stopped, crops: after
    each, the keys and values are those DynamicLayer's concatenation holds."""
    torch.manual_seed(0)
    growing, plain = GrowingLayer(), DynamicLayer()

    def same():
        torch.testing.assert_close(growing.keys, plain.keys, rtol=0, atol=0)
        torch.testing.assert_close(growing.values, plain.values, rtol=0, atol=0)
        assert growing.get_seq_length() == plain.get_seq_length()

    def both(k, v):
        got, want = growing.update(k, v), plain.update(k, v)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        same()

    both(torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4))  # a prefill
    growing.batch_repeat_interleave(3)
    plain.batch_repeat_interleave(3)
    same()
    for _ in range(100):  # one column at a time, past the room the first update left
        both(torch.randn(6, 3, 1, 4), torch.randn(6, 3, 1, 4))
    keep = torch.tensor([0, 2, 5])
    growing.batch_select_indices(keep)
    plain.batch_select_indices(keep)
    same()
    both(torch.randn(3, 3, 7, 4), torch.randn(3, 3, 7, 4))
    growing.crop(-4)
    plain.crop(-4)
    same()
    both(torch.randn(3, 3, 1, 4), torch.randn(3, 3, 1, 4))


def test_decoding_with_the_growing_cache_draws_what_the_concatenating_cache_draws(tiny_dir, monkeypatch):
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.9, max_new_tokens=90))
    runs = []
    growing = rollout.decoding.decoding_cache
    for cache in (lambda m, length: growing(m), lambda m, length: DynamicCache(config=m.config)):
        monkeypatch.setattr(rollout.decoding, "decoding_cache", cache)
        torch.manual_seed(3)
        runs.append(engine.generate([p for p in problems(8) for _ in range(2)], group_size=2))
    growing, concatenating = runs
    assert growing.eligible.sum(-1).max() > 70  # past the room a short prompt's cache starts with
    assert torch.equal(growing.input_ids, concatenating.input_ids)
    torch.testing.assert_close(growing.sample_logprobs, concatenating.sample_logprobs)


def test_left_padding_through_a_flat_array_equals_padding_the_nested_lists():
    rows = [[5, 6, 7], [], [8], [9, 10]]
    ids, mask = left_padded(rows, pad=0, device="cpu")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 0], [0, 0, 8], [0, 9, 10]] and ids.dtype == torch.long
    assert mask.tolist() == [[1, 1, 1], [0, 0, 0], [0, 0, 1], [0, 1, 1]] and mask.dtype == torch.long
    flags = stacked_left([[True, False], [True]], False, torch.bool)
    assert flags.tolist() == [[True, False], [False, True]] and flags.dtype == torch.bool
    values = stacked_left([[0.25], [-1.5, 2.0]], 0.0, torch.float32)
    assert values.tolist() == [[0.0, 0.25], [-1.5, 2.0]] and values.dtype == torch.float32
    assert stacked_left([[], []], 0, torch.long).shape == (2, 0)


def test_a_rollout_that_emits_eos_keeps_it_eligible_and_attended(tiny_dir):
    """A model biased toward EOS (its output row 1.5 times that of a token greedy decoding picks):
    rows stop at their EOS, which is eligible and attended (what teaches a policy to stop), and
    nothing after it is; its log-prob is the training forward's."""
    torch.manual_seed(0)
    model, tokenizer = load_policy(tiny_dir)
    peaked(model)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(temperature=0.8, max_new_tokens=12))
    eos = tokenizer.eos_token_id
    first = engine.generate(problems(6), greedy=True)
    picked = int(first.input_ids[0][first.eligible[0]][2])
    with torch.no_grad():
        model.get_output_embeddings().weight[eos] = 1.5 * model.get_output_embeddings().weight[picked]
    rollouts = engine.generate(problems(6))
    stopped = 0
    for row in range(len(rollouts)):
        ids, eligible, mask = rollouts.input_ids[row], rollouts.eligible[row], rollouts.attention_mask[row]
        positions = eligible.nonzero().flatten()
        if ids[positions[-1]] == eos:
            stopped += len(positions) < 12
            last = int(positions[-1])
            assert mask[last] == 1 and not mask[last + 1 :].any() and not eligible[last + 1 :].any()
        assert eos not in ids[positions[:-1]].tolist()
    assert stopped >= 1  # EOS came before the length limit in some row: the path above ran
    forward = sequence_logprobs(model, rollouts.input_ids, rollouts.attention_mask, 0.8)
    at_eos = rollouts.eligible & (rollouts.input_ids == eos)
    torch.testing.assert_close(forward[at_eos], rollouts.sample_logprobs[at_eos], atol=1e-4, rtol=1e-4)
    assert rollouts.truncations(eos) == [
        bool(ids[e.nonzero().flatten()[-1]] != eos) for ids, e in zip(rollouts.input_ids, rollouts.eligible)
    ]
