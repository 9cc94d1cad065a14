"""The application: `python -m harness` (harness/__main__.py), or from Python `harness.run`."""


def __getattr__(name: str):
    # `harness.run` without importing torch and the CLI until it is called
    if name == "run":
        from harness.api import run

        return run
    raise AttributeError(name)
