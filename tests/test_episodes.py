"""The episode loop every environment task plays (rollout/episodes.py), on scripted environments."""

from rollout.episodes import Answer, play
from tasks.base import Problem


class Scripted:
    """Two episodes: the first ends itself at its first turn (the environment's own end, won);
    the second goes on until the turn limit of 2 cuts it."""

    def __init__(self):
        self.turn, self.active = 0, [True, True]

    def step(self, commands):
        self.turn += 1
        out = [None, None]
        if commands[0] is not None:
            out[0] = Answer("You won.\n", "won", done=True, reward=1.0)
            self.active[0] = False
        if commands[1] is not None:
            cut = self.turn == 2
            out[1] = Answer("Nothing happens.\n> ", "room", done=cut, truncated=cut)
            self.active[1] = not cut
        return out


def test_only_an_episode_the_turn_limit_cut_is_truncated(tiny_dir):
    """An episode the environment ended is over, not truncated; one the turn limit ended is
    truncated (the step record's `completions/clipped_ratio` reads it)."""
    from harness.models import load_policy
    from rollout.decoding import RolloutEngine, SamplingArgs

    model, tokenizer = load_policy(tiny_dir)
    engine = RolloutEngine(model, tokenizer, SamplingArgs(max_new_tokens=3))
    episodes = [Problem("a", "Play.\n> ", ""), Problem("b", "Play.\n> ", "")]
    rollouts, answers = play(engine, episodes, Scripted(), max_turns=2, group_size=1)
    assert [len(a) for a in answers] == [1, 2] and [a[-1].done for a in answers] == [True, True]
    assert rollouts.truncated == [False, True]
