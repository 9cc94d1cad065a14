"""Worker processes forked from the harness that keep their state from call to call: the
environments of a multi-turn task (ALFWorld's games, OpenEnv's environments) live in them, so
their steps run beside each other and their code never runs in the harness's process."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple


class Posted(NamedTuple):
    """A call whose shares the workers are running (`Workers.post`)."""

    items: int
    places: list[list[int]]  # each worker's items, by their place in the call
    shares: list[list]
    sent: list[bool]


Handler = Callable[[Any, str, list, Any], tuple[Any, list]]
"""handle(state, kind, items, extra) -> (state, one result per item), run in a worker: `state` is
what the worker's last call left (None at first), `extra` what the caller sent beside the items."""


class Workers:
    """`processes` workers, forked from this process on first use (so they start with what it has
    already loaded, and never touch the accelerator or torch it may hold), each running
    `handle` on the items it is dealt. A worker that dies takes its state with it: a call whose
    `died` is given marks it dead and answers its share with `died(pid, share)`; otherwise the
    workers are stopped and the call raises. Stopped or dead workers are forked anew on the next
    call after `close` (`any_dead` says when to)."""

    def __init__(self, processes: int, handle: Handler, name: str = "") -> None:
        self.processes, self.handle, self.name = processes, handle, name  # name: in errors, "ALFWorld worker 123"
        self.workers: list[tuple[Any, Any]] = []  # (process, connection); connection None: it died

    @property
    def any_dead(self) -> bool:
        return any(connection is None for _, connection in self.workers)

    def scatter(
        self,
        kind: str,
        items: Sequence,
        extra: Any = None,
        owners: Sequence[int] | None = None,
        died: Callable[[int, list], list] | None = None,
    ) -> list:
        """Deal `items` to the workers (item i to worker `owners[i]`, by default round-robin), run
        `kind` on each share, gather the results in the items' order."""
        return self.gather(self.post(kind, items, extra, owners), died)

    def post(self, kind: str, items: Sequence, extra: Any = None, owners: Sequence[int] | None = None) -> Posted:
        """`scatter`'s first half: the shares sent, the workers left to run them while this process
        goes on. `gather` the calls posted in the order they were posted (a worker answers its
        messages in turn)."""
        while len(self.workers) < self.processes:
            ours, theirs = multiprocessing.Pipe()
            process = multiprocessing.get_context("fork").Process(
                target=_serve, args=(theirs, ours, self.handle, self.name), daemon=True
            )
            process.start()
            theirs.close()
            self.workers.append((process, ours))
        if owners is None:
            owners = [i % self.processes for i in range(len(items))]
        places = [[i for i, owner in enumerate(owners) if owner == w] for w in range(self.processes)]
        shares = [[items[i] for i in place] for place in places]
        sent = []
        for (_, connection), share in zip(self.workers, shares):
            try:
                sent.append(bool(share) and connection is not None and connection.send((kind, share, extra)) is None)
            except OSError:
                sent.append(False)
        return Posted(len(items), places, shares, sent)

    def gather(self, posted: Posted, died: Callable[[int, list], list] | None = None) -> list:
        """The results of a `post`, in its items' order."""
        results: list = [None] * posted.items
        for w, ((process, connection), share) in enumerate(zip(self.workers, posted.shares)):
            if not share:
                continue
            try:
                status, value = connection.recv() if posted.sent[w] else ("died", None)
            except (EOFError, OSError):
                status, value = "died", None
            if status == "died" and died is not None:
                self.workers[w] = (process, None)
                value = died(process.pid, share)
            elif status != "ok":
                self.close()
                raise RuntimeError(value or f"the {self.name} worker {process.pid} died".replace("  ", " "))
            for i, result in zip(posted.places[w], value):
                results[i] = result
        return results

    def close(self) -> None:
        for process, connection in self.workers:
            try:
                if connection is not None:
                    connection.send(None)
            except OSError:
                pass
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
            if connection is not None:
                connection.close()
        self.workers = []


def _serve(connection: Any, parents_end: Any, handle: Handler, name: str) -> None:
    """A worker: its share of each call, until told None or the harness is gone."""
    parents_end.close()  # the fork's copy of it: held here, it would keep EOF from ever coming
    state = None
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        kind, items, extra = message
        try:
            state, results = handle(state, kind, items, extra)
            reply = ("ok", results)
        except Exception as error:  # noqa: BLE001 - the harness process raises it
            reply = ("error", f"{name} worker {os.getpid()}: {error!r}".lstrip())
        connection.send(reply)


def forked_starmap(function: Callable, jobs: Sequence[tuple], processes: int) -> list:
    """`function(*job)` of each job, in order, in `processes` processes forked from this one,
    which are let finish and joined, never terminated: `Pool.terminate` sends SIGTERM, and a
    worker forked inside a trainer's `fit` inherits the trainer's SIGTERM handler (Lightning's),
    survives it and blocks on the pool's queue, so the join hangs for good. The workers get the
    default handler back as well."""
    with multiprocessing.get_context("fork").Pool(processes, initializer=_default_sigterm) as pool:
        results = pool.starmap(function, jobs, chunksize=1)
        pool.close()
        pool.join()
    return results


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
