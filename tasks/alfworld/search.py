"""A searching expert: a game's walkthrough with every object it needs looked for, not known.

A walkthrough goes straight to where its object lies, which the room's first description does
not say, so a policy that imitates it learns where objects lay in the games it saw. This expert
keeps the walkthrough's actions (take, move, heat/cool/clean, use) and finds each object they
need by visiting the room's receptacles in a seeded order, opening the closed ones, until an
object of that kind shows. It remembers what it has seen, and takes the walkthrough's own object
where it has seen that one, else the first of the kind it saw (any apple does for "put an apple
in the fridge"; the task replays every demonstration to its outcome).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from tasks.alfworld.data import StepResult
from tasks.alfworld.env import AlfworldEnv

ACTION = re.compile(r"^(take|move|heat|cool|clean|use) ")
SEEN = re.compile(r"\ban? ([a-z]+ \d+)")


def kind(name: str) -> str:
    """'apple 2' -> 'apple'."""
    return name.rsplit(" ", 1)[0]


def searched(
    env: AlfworldEnv, admissible: Sequence[str], walkthrough: Sequence[str], rng: random.Random
) -> list[tuple[str, StepResult]]:
    """Play the walkthrough's actions on `env` (just reset; `admissible` its first commands),
    searching for each object; the (command, result) pairs played, cut where the episode ended."""
    order = [c.removeprefix("go to ") for c in admissible if c.startswith("go to ")]
    rng.shuffle(order)
    lies: dict[str, str] = {}  # object -> the receptacle it was seen in or on
    looked: set[str] = set()
    found: dict[str, str] = {}  # the walkthrough's object -> the one this expert took
    taken: set[str] = set()  # taken already (and perhaps put where the task wants it)
    closed: set[str] = set()  # receptacles seen closed and not opened since
    played: list[tuple[str, StepResult]] = []
    at = ""

    def play(command: str) -> StepResult:
        nonlocal at
        result = env.step(command)
        played.append((command, result))
        verb, _, receptacle = command.partition(" ")
        receptacle = receptacle.removeprefix("to ")
        if verb in ("go", "examine"):
            at = receptacle
        if verb in ("go", "examine", "open"):
            if f"The {receptacle} is closed" in result.observation:
                closed.add(receptacle)
            elif "you see" in result.observation:
                closed.discard(receptacle)
                looked.add(receptacle)
                lies.update((thing, receptacle) for thing in SEEN.findall(result.observation.partition("you see")[2]))
        return result

    def go(receptacle: str, open_it: bool = True) -> None:
        """Be at `receptacle` (opened, if `open_it` and it is closed). One that shares the place
        where the expert stands has no "go to": the expert examines it instead."""
        if at != receptacle and not env.done:
            play(f"go to {receptacle}" if f"go to {receptacle}" in env.admissible else f"examine {receptacle}")
        if open_it and receptacle in closed and not env.done:
            play(f"open {receptacle}")

    def fetch(wanted: str) -> str | None:
        """Go to an object of `wanted`'s kind, searching until one shows; its name, or None."""
        while not env.done:
            seen = [thing for thing in lies if kind(thing) == kind(wanted) and thing not in taken]
            if seen:
                thing = wanted if wanted in seen else seen[0]
                go(lies[thing])
                return thing
            unlooked = [r for r in order if r not in looked]
            if not unlooked:
                return None
            go(unlooked[0])
            looked.add(unlooked[0])  # even where its answer did not list contents
        return None

    for action in (c for c in walkthrough if ACTION.match(c)):
        if env.done:
            break
        verb, _, rest = action.partition(" ")
        if verb in ("take", "use"):
            wanted = rest.split(" from ")[0]
            thing = fetch(wanted)
            if thing is None:
                break
            found[wanted] = thing
            if verb == "take":
                taken.add(thing)
            play(f"take {thing} from {lies[thing]}" if verb == "take" else f"use {thing}")
            continue
        thing, preposition, place = rest.partition(" to " if verb == "move" else " with ")
        thing = found.get(thing, thing)
        go(place, open_it=verb == "move")
        if not env.done:
            play(f"{verb} {thing}{preposition}{place}")
    return played
