"""Genuine ALFWorld games, generated offline and cached: a room drawn from one of the alfworld
package's scene layouts (kept small, so that a tiny model can read it), objects placed where
ALFRED's own rules allow, a goal from ALFRED's goal library, and a walkthrough checked to win in
the engine. Each game is written in the official layout (`game.tw-pddl`, `traj_data.json`).

    games = generate_games(TASK_TYPES, count=60, seed=0, cache_dir=".cache/alfworld")

`python -m tasks.alfworld.generation --count N --cache-dir DIR` generates from the shell."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.alfworld.data import (
    _ACTION_CLASS,
    _APPLIANCE,
    _LAMP_HOLDERS,
    _LAMPS,
    _SPLIT_BUCKETS,
    GENERATOR_VERSION,
    PLANNER_VERSION,
    SPLITS,
    TASK_TYPES,
    GameRecord,
    GameSize,
    _alfworld,
    _digest,
    _Receptacle,
    _rules,
    _Scene,
    _scene,
    _scene_names,
)
from tasks.alfworld.env import AlfworldEnv
from tasks.alfworld.official import _read_game_dir
from tasks.alfworld.planner import plan_walkthrough
from tasks.workers import forked_starmap

# --------------------------------------------------------------------------------------------
# Goals: what the domain can satisfy


def goal_error(task_type: str, obj: str, recep: str = "", toggle: str = "") -> str | None:
    """Why ALFRED's rules make this goal impossible (None when it is fine). A goal the domain
    cannot satisfy makes TextWorld fail at load time with a bare KeyError, so refuse it up front."""
    rules = _rules()
    if task_type not in TASK_TYPES:
        return f"unknown task type {task_type!r} (expected one of {', '.join(TASK_TYPES)})"
    if obj not in rules["pickupable"]:
        return f"{obj} cannot be picked up"
    if task_type == "look_at_obj_in_light":
        return None if toggle in _LAMPS else f"{toggle!r} is not a lamp"
    if recep not in rules["holds"]:
        return f"{recep!r} is not a receptacle"
    if obj not in rules["holds"][recep]:
        return f"a {obj} cannot go in a {recep}"
    if task_type in _ACTION_CLASS and obj not in rules["action"][_ACTION_CLASS[task_type]]:
        return f"a {obj} is not {_ACTION_CLASS[task_type].lower()}"
    if task_type in _APPLIANCE and recep == _APPLIANCE[task_type][0]:
        return f"the target receptacle is the task's own appliance ({recep})"
    return None


# --------------------------------------------------------------------------------------------
# Sampling a game (pure Python, deterministic in its seed)


@dataclass(frozen=True)
class _Spec:
    """A sampled game before it is written as PDDL."""

    task_type: str
    scene: str
    obj: str
    recep: str  # target receptacle type ("" for look_at_obj_in_light)
    toggle: str  # lamp type (look_at_obj_in_light only)
    sentence: str
    receptacles: tuple[_Receptacle, ...]
    objects: tuple[tuple[str, str, str], ...]  # (alfred id, type, receptacle id)
    targets: tuple[str, ...]  # ids of the task's object(s), in the order the expert moves them
    target_recep: str  # id of the receptacle the expert uses (target, or the lamp's)
    appliance: str  # id of the sink/microwave/fridge the expert uses ("")
    start: str
    opened: tuple[str, ...]


def _candidate_scenes(task_type: str) -> list[_Scene]:
    rules = _rules()
    scenes = []
    for name in _scene_names():
        scene = _scene(name)
        if scene.room not in rules["valid_rooms"][task_type]:
            continue
        types = {r.type for r in scene.receptacles}
        if task_type in _APPLIANCE and _APPLIANCE[task_type][0] not in types:
            continue
        if task_type == "look_at_obj_in_light" and not (scene.lamps and types & _LAMP_HOLDERS):
            continue
        scenes.append(scene)
    return scenes


def _object_id(otype: str, near: str, rng: random.Random, taken: set[str]) -> str:
    """An ALFRED-style id for an object placed in receptacle `near` (ids only need to be unique;
    ALFWorld shows them as "apple 1")."""
    x, y, z = (float(v) for v in near.split("|")[1:4])
    while True:
        coords = (x + rng.uniform(-0.4, 0.4), y + rng.uniform(0.0, 0.3), z + rng.uniform(-0.4, 0.4))
        oid = "|".join([otype] + [f"{c:+06.2f}" for c in coords])
        if oid not in taken:
            taken.add(oid)
            return oid


def _sample_spec(task_type: str, size: GameSize, rng: random.Random) -> _Spec | None:
    """One candidate game, or None when this draw hit a dead end (the caller draws again)."""
    rules = _rules()
    holds = rules["holds"]
    scene = rng.choice(_candidate_scenes(task_type))
    by_type: dict[str, list[_Receptacle]] = {}
    for r in scene.receptacles:
        by_type.setdefault(r.type, []).append(r)

    toggle = recep = ""
    appliance: _Receptacle | None = None
    lamp_holder: _Receptacle | None = None
    if task_type in _APPLIANCE:
        appliance = rng.choice(by_type[_APPLIANCE[task_type][0]])
    if task_type == "look_at_obj_in_light":
        toggle = rng.choice(scene.lamps)
        lamp_holder = rng.choice([r for r in scene.receptacles if r.type in _LAMP_HOLDERS])

    # The object: one ALFRED puts in this scene, with a receptacle here to take it from and
    # (except for look_at_obj_in_light) a receptacle type here to bring it to.
    options = []
    for obj in scene.object_types:
        if obj in rules["movable"] and obj not in rules["pickupable"]:
            continue
        targets = sorted(t for t in by_type if goal_error(task_type, obj, t, toggle) is None)
        if task_type == "look_at_obj_in_light":
            targets = [""] if goal_error(task_type, obj, "", toggle) is None else []
        for target in targets:
            sources = [
                r
                for r in scene.receptacles
                if obj in holds[r.type]
                and r.type != target
                # a fridge makes what it holds cool: the goal would already be half done
                and not (task_type == "pick_cool_then_place_in_recep" and r.type == "Fridge")
            ]
            if sources:
                options.append((obj, target, sources))
    if not options:
        return None
    obj, recep, sources = rng.choice(options)
    copies = 2 if task_type == "pick_two_obj_and_place" else 1
    source_receps = [rng.choice(sources) for _ in range(copies)]
    target_recep = lamp_holder if lamp_holder is not None else rng.choice(by_type[recep])

    # The room: what the task needs, then other receptacles of the layout.
    needed = [*source_receps, target_recep] + ([appliance] if appliance else [])
    room: list[_Receptacle] = []
    for r in needed:
        if r not in room:
            room.append(r)
    if len(room) > size.receptacles:
        return None
    others = [r for r in scene.receptacles if r not in room]
    rng.shuffle(others)
    room += others[: size.receptacles - len(room)]
    room.sort(key=lambda r: r.id)

    taken: set[str] = set()
    objects: list[tuple[str, str, str]] = []
    targets = []
    for src in source_receps:
        oid = _object_id(obj, src.id, rng, taken)
        objects.append((oid, obj, src.id))
        targets.append(oid)
    if toggle:
        objects.append((_object_id(toggle, lamp_holder.id, rng, taken), toggle, lamp_holder.id))

    # Distractors: other object types of the scene, where some receptacle of the room holds them.
    kinds = [t for t in scene.object_types if t != obj and t in rules["pickupable"]]
    rng.shuffle(kinds)
    placed = 0
    for kind in kinds:
        if placed == size.distractors:
            break
        spots = [r for r in room if kind in holds[r.type]]
        if not spots:
            continue
        spot = rng.choice(spots)
        objects.append((_object_id(kind, spot.id, rng, taken), kind, spot.id))
        placed += 1

    goal = _alfworld()["goals"][task_type]
    sentence = rng.choice(goal["templates"]).format(
        obj=obj.lower(), recep=recep.lower(), toggle=toggle.lower(), mrecep=""
    )
    opened = () if size.closed_receptacles else tuple(r.id for r in room if r.type in rules["openable"])
    return _Spec(
        task_type=task_type,
        scene=scene.name,
        obj=obj,
        recep=recep,
        toggle=toggle,
        sentence=sentence,
        receptacles=tuple(room),
        objects=tuple(sorted(objects)),
        targets=tuple(targets),
        target_recep=target_recep.id,
        appliance=appliance.id if appliance else "",
        start=rng.choice(scene.free_locations),
        opened=opened,
    )


# --------------------------------------------------------------------------------------------
# Writing a game


_MANGLE = {"-": "_minus_", "#": "-", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}
_MANGLE_RE = re.compile("|".join(re.escape(k) for k in _MANGLE))


def _mangle(text: str) -> str:
    """ALFRED's PDDL-safe names (all replacements at once, as its `fix_pddl_str_chars`)."""
    return _MANGLE_RE.sub(lambda m: _MANGLE[m.group(0)], text)


def _problem(spec: _Spec) -> str:
    """The PDDL problem, in the shape of ALFWorld's own (types as constants, canContain from
    ALFRED's rules, ALFRED's goal library), without the distance table the domain never reads."""
    rules = _rules()
    holds = rules["holds"]
    action = rules["action"]
    receptacle_types = {r.type for r in spec.receptacles}
    object_types = {t for _, t, _ in spec.objects}
    # The domain names these in its actions: they must exist, each declared exactly once.
    rtypes = sorted(receptacle_types | {"SinkBasin", "Microwave", "Fridge"} | ({spec.recep} if spec.recep else set()))
    otypes = sorted(object_types | {"Knife", "ButterKnife"})
    locations = sorted({r.location for r in spec.receptacles} | {spec.start})
    where = {r.id: r for r in spec.receptacles}

    m = _mangle
    objects = ["agent1 - agent"]
    objects += [f"{t}Type - otype" for t in otypes]
    objects += [f"{t}Type - rtype" for t in rtypes]
    objects += [f"{m(oid)} - object" for oid, _, _ in spec.objects]
    objects += [f"{m(r.id)} - receptacle" for r in spec.receptacles]
    objects += [f"{m(loc)} - location" for loc in locations]

    init = ["(= (total-cost) 0)"]
    init += [f"(receptacleType {m(r.id)} {r.type}Type)" for r in spec.receptacles]
    init += [f"(objectType {m(oid)} {t}Type)" for oid, t, _ in spec.objects]
    init += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if o in holds.get(r, ())]
    for oid, t, _ in spec.objects:
        if t in rules["pickupable"]:
            init.append(f"(pickupable {m(oid)})")
        if t in rules["movable"]:
            init.append(f"(isReceptacleObject {m(oid)})")
        for cls, pred in (
            ("Cleanable", "cleanable"),
            ("Heatable", "heatable"),
            ("Coolable", "coolable"),
            ("Sliceable", "sliceable"),
            ("Toggleable", "toggleable"),
        ):
            if t in action[cls]:
                init.append(f"({pred} {m(oid)})")
    init += [f"(openable {m(r.id)})" for r in spec.receptacles if r.type in rules["openable"]]
    init += [f"(opened {m(rid)})" for rid in spec.opened]
    init.append(f"(atLocation agent1 {m(spec.start)})")
    init += [f"(receptacleAtLocation {m(r.id)} {m(r.location)})" for r in spec.receptacles]
    for oid, _, rid in spec.objects:
        init.append(f"(inReceptacle {m(oid)} {m(rid)})")
        init.append(f"(objectAtLocation {m(oid)} {m(where[rid].location)})")
        if where[rid].type == "Fridge":  # as ALFRED does: what sat in the fridge is cool
            init.append(f"(isCool {m(oid)})")

    goal = _alfworld()["goals"][spec.task_type]["pddl"]
    goal = goal.format(obj=spec.obj, recep=spec.recep, toggle=spec.toggle, mrecep="").replace("#", "-")
    # The goal library's text closes the `define`; fast-downward wants the metric after the goal.
    goal = goal.rstrip().removesuffix(")").rstrip()
    pad = "\n        "
    return (
        f"\n(define (problem plan_{spec.scene.lower()})\n    (:domain alfred)\n"
        f"    (:objects{pad}{pad.join(objects)}\n    )\n"
        f"    (:init{pad}{pad.join(init)}\n    )\n"
        f"{goal}\n    (:metric minimize (total-cost))\n)\n"
    )


def _game_data(spec: _Spec, problem: str) -> dict[str, Any]:
    data = _alfworld()
    return {
        "pddl_domain": data["domain"],
        "grammar": data["grammar"].replace("UNKNOWN GOAL", spec.sentence),
        "pddl_problem": problem,
    }


def _traj_data(spec: _Spec, seed_label: str) -> dict[str, Any]:
    """ALFWorld's per-game metadata file, in the fields AlfredTWEnv reads (task_type, pddl_params)
    plus the scene and where the game came from."""
    return {
        "task_type": spec.task_type,
        "pddl_params": {
            "object_target": spec.obj,
            "parent_target": spec.recep,
            "toggle_target": spec.toggle,
            "mrecep_target": "",
            "object_sliced": False,
        },
        "scene": {"floor_plan": spec.scene},
        "turk_annotations": {"anns": [{"task_desc": spec.sentence}]},
        "generator": {"name": "tasks.alfworld_games", "version": GENERATOR_VERSION, "seed": seed_label},
    }


def _scripted_walkthrough(spec: _Spec, names: Mapping[str, str]) -> list[str]:
    """The obvious expert: fetch each target object (opening what is closed), use the appliance
    or lamp, bring it to the target receptacle. `names` maps ALFRED ids to the game's display
    names ("apple 1"). The generator replays it to `won` before keeping a game."""
    rules = _rules()
    types = {r.id: r.type for r in spec.receptacles}
    where = {oid: rid for oid, _, rid in spec.objects}
    opened = set(spec.opened)
    at = ""
    plan: list[str] = []

    def go(rid: str) -> None:
        nonlocal at
        if at != rid:
            plan.append(f"go to {names[rid]}")
            at = rid
        if types[rid] in rules["openable"] and rid not in opened:
            plan.append(f"open {names[rid]}")
            opened.add(rid)

    for oid in spec.targets:
        go(where[oid])
        plan.append(f"take {names[oid]} from {names[where[oid]]}")
        if spec.task_type in _APPLIANCE:
            verb = _APPLIANCE[spec.task_type][1]
            if at != spec.appliance:
                plan.append(f"go to {names[spec.appliance]}")
                at = spec.appliance
            plan.append(f"{verb} {names[oid]} with {names[spec.appliance]}")
        if spec.task_type == "look_at_obj_in_light":
            if at != spec.target_recep:
                plan.append(f"go to {names[spec.target_recep]}")
                at = spec.target_recep
            lamp = next(o for o, t, _ in spec.objects if t == spec.toggle)
            plan.append(f"use {names[lamp]}")
        else:
            go(spec.target_recep)
            plan.append(f"move {names[oid]} to {names[spec.target_recep]}")
    return plan


# --------------------------------------------------------------------------------------------
# Generation with a cache


def _split_of(world_hash: str) -> str:
    return "eval" if int(world_hash[:8], 16) % _SPLIT_BUCKETS == 0 else "train"


def generate_games(
    task_types: Sequence[str] = TASK_TYPES,
    count: int = 60,
    seed: int = 0,
    size: GameSize = GameSize(),
    cache_dir: str | Path = ".cache/alfworld_games",
    split: str = "train",
    expert: str = "scripted",
    planner_timeout_s: float = 20.0,
    processes: int = 1,
    then: Callable[[GameRecord], Any] | None = None,
) -> list[GameRecord]:
    """`count` distinct solvable games, round-robin over `task_types` (game i has type
    task_types[i % len]), deterministic in (task_types, count, seed, size, split); a longer list
    with the same arguments starts with the shorter one. Each type's games are a stream of their
    own, so `processes` > 1 generates the types in that many forked processes, the same games.

    Each game is written once as cache_dir/<game_id>-p<PLANNER_VERSION>/game.tw-pddl with a
    traj_data.json beside it (the official ALFWorld layout, so `load_official_games(cache_dir)` and alfworld's own
    AlfredTWEnv read it too); later calls find it there and play nothing. A game is kept only if
    its walkthrough, replayed, wins. `expert`: "scripted" (instant; falls back to the planner if
    its plan ever fails) or "planner" (fast-downward's optimal plan, in a subprocess killed after
    `planner_timeout_s`: its search has no time limit of its own).

    `split` ("train" or "eval") picks games by a hash of their content, so the two splits never
    share a game whatever their seeds and counts.

    `then(game)` runs on each game in the process that made it, where the game's PDDL translation
    (most of loading it) is still in memory: AlfworldTask plays its demonstrations so."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if expert not in ("scripted", "planner"):
        raise ValueError(f"expert must be 'scripted' or 'planner', got {expert!r}")
    if not task_types:
        raise ValueError("task_types is empty")
    for t in task_types:
        if t not in TASK_TYPES:
            raise ValueError(f"unknown task type {t!r} (expected one of {', '.join(TASK_TYPES)})")
    cache = Path(cache_dir).resolve()
    cache.mkdir(parents=True, exist_ok=True)

    order = [task_types[i % len(task_types)] for i in range(count)]
    jobs = [
        (t, order.count(t), then, seed, size, cache, split, expert, planner_timeout_s) for t in dict.fromkeys(order)
    ]
    if processes > 1 and len(jobs) > 1:
        firsts = forked_starmap(_first_games, jobs, min(processes, len(jobs)))
    else:
        firsts = [_first_games(*job) for job in jobs]
    streams = {job[0]: iter(games) for job, games in zip(jobs, firsts)}
    return [next(streams[t]) for t in order]


def _first_games(task_type: str, count: int, then: Callable | None, *stream_args: Any) -> list[GameRecord]:
    games = list(itertools.islice(_games_of_type(task_type, *stream_args), count))
    if then is not None:
        for game in games:
            then(game)
    return games


_MAX_ATTEMPTS = 100_000  # draws per type and split before giving up (a draw takes ~1 ms)


def _games_of_type(
    task_type: str, seed: int, size: GameSize, cache: Path, split: str, expert: str, planner_timeout_s: float
) -> Iterator[GameRecord]:
    """The endless, deterministic stream of distinct solvable games of one type and split."""
    seen: set[str] = set()
    env: AlfworldEnv | None = None
    failures = 0
    for attempt in range(_MAX_ATTEMPTS):
        label = f"{GENERATOR_VERSION}:{seed}:{task_type}:{size.receptacles}:{size.distractors}:{size.closed_receptacles}:{attempt}"
        spec = _sample_spec(task_type, size, random.Random(label))
        if spec is None:
            continue
        problem = _problem(spec)
        world = _digest(str(GENERATOR_VERSION), task_type, problem)
        if world in seen or _split_of(world) != split:
            continue
        seen.add(world)
        game_id = _digest(world, spec.sentence, expert)[:16]
        folder = cache / f"{game_id}-p{PLANNER_VERSION}"
        record = _read_game_dir(folder, split=split, game_id=game_id)
        if record is None and not (folder / "game.tw-pddl").exists():
            if env is None:
                env = AlfworldEnv(max_steps=200)
            record = _build_game(spec, problem, folder, game_id, split, label, env, expert, planner_timeout_s)
        if record is None:
            failures += 1
            continue
        yield record
    raise RuntimeError(f"no more {task_type} games after {_MAX_ATTEMPTS} draws ({failures} unsolvable)")


def _build_game(
    spec: _Spec,
    problem: str,
    folder: Path,
    game_id: str,
    split: str,
    label: str,
    env: AlfworldEnv,
    expert: str,
    planner_timeout_s: float,
) -> GameRecord | None:
    data = _game_data(spec, problem)
    env.reset(data)
    walkthrough: list[str] | None = None
    if expert == "scripted":
        names = env.display_names()
        walkthrough = _scripted_walkthrough(spec, {rid: names[_mangle(rid).lower()] for rid in _all_ids(spec)})
        if not _wins(env, data, walkthrough):
            walkthrough = None
    if walkthrough is None:
        walkthrough = plan_walkthrough(data, timeout_s=planner_timeout_s)
        if walkthrough is not None and not _wins(env, data, walkthrough):
            walkthrough = None
    data["solvable"] = walkthrough is not None
    data["walkthrough"] = walkthrough or []
    staging = folder.with_name(folder.name + f".tmp{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "game.tw-pddl").write_text(json.dumps(data))
    (staging / "traj_data.json").write_text(json.dumps(_traj_data(spec, label), indent=1))
    try:
        staging.rename(folder)  # atomic: a cache entry is complete or absent
    except OSError:  # another process wrote it first
        for f in staging.iterdir():
            f.unlink()
        staging.rmdir()
    return _read_game_dir(folder, split=split, game_id=game_id)


def _all_ids(spec: _Spec) -> list[str]:
    return [r.id for r in spec.receptacles] + [oid for oid, _, _ in spec.objects]


def _wins(env: AlfworldEnv, game: Mapping[str, Any], walkthrough: Sequence[str]) -> bool:
    """Replaying `walkthrough` wins exactly at its last command, every command admissible."""
    _, _, admissible = env.reset(game)
    for i, command in enumerate(walkthrough):
        if command not in admissible:
            return False
        _, _, won, admissible = env.step(command)
        if won != (i == len(walkthrough) - 1):
            return False
    return bool(walkthrough)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tasks.alfworld.generation", description="generate games into a cache folder"
    )
    parser.add_argument("--cache-dir", required=True)
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", default="train", choices=SPLITS)
    parser.add_argument("--task-types", nargs="+", default=list(TASK_TYPES))
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    games = generate_games(
        args.task_types, args.count, args.seed, cache_dir=args.cache_dir, split=args.split, processes=args.processes
    )
    for g in games:
        print(f"{g.game_id}  {g.task_type:32s} {g.scene:13s} {g.goal}")
    print(f"{len(games)} games in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
