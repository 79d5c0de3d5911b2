"""Episode cost of the ALFWorld adapter: pooled engines against a fresh engine per episode, and
rejected commands answered by the adapter against the engine's own answer.

Batched rollout creates one adapter per live episode. Each ALFWorld engine loads a private copy of
``libdownward.so`` that cannot be unloaded, so every engine ever built stays in memory; the
adapter hands engines back to a pool when an episode ends. This script plays the walkthroughs of the hand-written test games (or of
the games under ``--data``) for ``--episodes`` episodes, once with a new adapter per episode (the
pool at work) and once with a new engine per episode, and prints the time per episode, the growth
of resident and virtual memory, and their ratios.

Then it plays the same walkthroughs with ``--rejected`` of every step's commands text the game does
not accept (the initial policy's share is about 0.8), once through :meth:`GameEngine.step`, which
answers such text itself, and once through the engine it wraps, which recomputes the unchanged
state's admissible commands; the answers are checked equal and the time per step compared.

Last it starts ``--episodes`` episodes, each game ``--plays`` times in a row (an evaluation plays
each game once per view and decoding seed), once with Fast Downward's translation of each game kept
(:func:`kept_translations`) and once translated again at every load and reset, as TextWorld does;
the opening observations are checked equal and the time per start compared.

    .venv/bin/python benchmarks/alfworld_engines.py [--data DIR] [--episodes 24] [--rejected 0.8] \
        [--plays 4]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import fast_downward

from resail_pipeline.devices import machine_header
from resail_pipeline.envs.alfworld import AlfWorldEnv, GameEngine, kept_translations

FIXTURE_DATA = Path(__file__).parents[1] / "tests" / "envs" / "alfworld_data"


def memory_mb() -> tuple[float, float]:
    """Resident and virtual memory of this process, in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return tuple(float(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmSize"))


def run(label: str, episodes: int, play) -> tuple[float, float, float]:
    rss0, vm0 = memory_mb()
    start = time.perf_counter()
    for k in range(episodes):
        play(k)
    seconds = (time.perf_counter() - start) / episodes
    rss1, vm1 = memory_mb()
    print(
        f"{label}: {1e3 * seconds:.0f} ms per episode; memory +{rss1 - rss0:.0f} MB resident, "
        f"+{vm1 - vm0:.0f} MB virtual over {episodes} episodes"
    )
    return seconds, rss1 - rss0, vm1 - vm0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=FIXTURE_DATA, help="ALFWORLD_DATA root")
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--rejected", type=float, default=0.8, help="share of rejected commands")
    parser.add_argument("--plays", type=int, default=4, help="episodes of each game in a row")
    args = parser.parse_args()
    if not 0 <= args.rejected < 1:
        parser.error(f"--rejected: a share in [0, 1), got {args.rejected}")
    if args.plays < 1:
        parser.error(f"--plays: at least 1, got {args.plays}")
    print(machine_header())

    probe = AlfWorldEnv(data_path=args.data)
    ids = [t for split in ("train", "id", "ood") for t in probe.task_ids(split)]
    plays = {t: probe.walkthrough(t) for t in ids}
    probe.reset(ids[0])
    probe.close()  # one engine in the pool, as after the first episode of any run

    def pooled(k: int) -> None:
        env = AlfWorldEnv(data_path=args.data)  # one adapter per episode, as in batched rollout
        task_id = ids[k % len(ids)]
        env.reset(task_id)
        for action in plays[task_id]:
            result = env.step(action)
        assert result.success

    def fresh(k: int) -> None:
        engine = GameEngine()
        task_id = ids[k % len(ids)]
        engine.load(probe.game_file(task_id))
        engine.reset()
        for action in plays[task_id]:
            state = engine.step(action)
        assert state.won

    pool_s, pool_rss, pool_vm = run("pooled engines", args.episodes, pooled)
    fresh_s, fresh_rss, fresh_vm = run("fresh engine per episode", args.episodes, fresh)
    print(f"time per episode, pooled / fresh: {pool_s / fresh_s:.2f}")
    print(
        f"memory growth, pooled / fresh: resident {pool_rss:.0f} / {fresh_rss:.0f} MB, "
        f"virtual {pool_vm:.0f} / {fresh_vm:.0f} MB"
    )

    # a walkthrough with rejected text between its commands: `per` rejected for each accepted
    per = round(args.rejected / (1 - args.rejected))
    commands = {t: [c for a in plays[t] for c in [f"take {a}"] * per + [a]] for t in ids}
    engine = GameEngine()
    answers: dict[str, list] = {}

    def through(label: str, step) -> float:
        answers[label] = []
        start = time.perf_counter()
        for k in range(args.episodes):
            task_id = ids[k % len(ids)]
            engine.load(probe.game_file(task_id))
            engine.reset()
            answers[label] += [step(command) for command in commands[task_id]]
        seconds = (time.perf_counter() - start) / len(answers[label])
        print(f"{label}: {1e3 * seconds:.1f} ms per step, {per} rejected a step accepted")
        return seconds

    own_s = through(
        "the engine's own answer", lambda c: engine._state(engine._env.step(c)[0], None)
    )
    ours_s = through("GameEngine.step", engine.step)
    assert answers["GameEngine.step"] == answers["the engine's own answer"]
    print(f"time per step, GameEngine.step / the engine's own: {ours_s / own_s:.2f}")

    kept = kept_translations()
    openings: dict[str, list] = {}

    def started(label: str) -> float:
        openings[label] = []
        kept.cache_clear()
        start = time.perf_counter()
        for k in range(args.episodes):
            env = AlfWorldEnv(data_path=args.data)
            openings[label].append(env.reset(ids[k // args.plays % len(ids)]))
            env.close()
        seconds = (time.perf_counter() - start) / args.episodes
        print(f"{label}: {1e3 * seconds:.0f} ms per episode start, each game {args.plays} times")
        return seconds

    memo = fast_downward.pddl2sas
    # Fast Downward's own translation at every call, as without the memo
    fast_downward.pddl2sas = lambda domain, problem, verbose=False, optimize=False: (
        kept.__wrapped__(domain, problem, optimize)
    )
    every_s = started("translated at every load and reset")
    fast_downward.pddl2sas = memo
    kept_s = started("translation kept")
    assert openings["translation kept"] == openings["translated at every load and reset"]
    print(f"time per start, kept / translated every time: {kept_s / every_s:.2f}")


if __name__ == "__main__":
    main()
