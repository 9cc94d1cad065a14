"""The lowest layer, which tasks, algorithms and the application stand on: the rollout batch and
its padding (`batch`), sampling it from a policy (`decoding`, `cache`, `conversation`), scoring
tokens under a policy (`scoring`), and what several processes share (`distributed`, `memory`).
It imports nothing of the project's."""
