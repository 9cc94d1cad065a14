"""OpenEnv environments as a task (docs/tasks.md#openenv): any `Environment` class, by class path.
`tasks.openenv.guess` is a small one, with an expert, that needs the extra: `pip install -e '.[openenv]'`."""

from tasks.openenv.task import Episodes, OpenEnvTask

__all__ = ["Episodes", "OpenEnvTask"]
