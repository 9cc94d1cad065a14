"""reasoning-gym's generators as a task (an optional extra: `pip install -e '.[reasoning-gym]'`)."""

from tasks.reasoning_gym.task import Generator, ReasoningGymTask

__all__ = ["Generator", "ReasoningGymTask"]
