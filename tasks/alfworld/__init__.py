"""ALFWorld, text only and offline, as a multi-turn task. One module per concern: `data` (what
the alfworld package ships, and the record types), `generation` (seeded games, cached),
`official` (reading games from disk), `planner` (fast-downward's walkthroughs), `speedups`
(memoised TextWorld parses), `env` (one game), `pool` (many games, in worker processes),
`search` (demonstrations that look for objects), `task` (`AlfworldTask`: prompts, the multi-turn
rollout, the verifier)."""


def __getattr__(name: str):
    # `tasks.alfworld.AlfworldTask` (the class path configs name) without importing torch into
    # processes that only generate or plan games
    if name == "AlfworldTask":
        from tasks.alfworld.task import AlfworldTask

        return AlfworldTask
    raise AttributeError(f"module 'tasks.alfworld' has no attribute {name!r}")
