"""The nemesis's schedule (no server): a seed replays the same faults; several overlap, never two
at once on one worker, link, Postgres or Redis; one failover at most; and the plan of runs is the
same for the producers and the checker."""

from __future__ import annotations

from tests.nemesis import LINK_FAULTS, PG_FAULTS, REDIS_FAULTS, WORKER_FAULTS, schedule
from tests.nemesis.workload import plan


def held(kind: str, target: int) -> set[str]:
    if kind in WORKER_FAULTS:
        return {f"w{target}"}
    if kind in LINK_FAULTS:
        return {f"w{target}", *(f"l{target}{s}" for s in ("pg", "redis") if s in kind or kind == "cut_both")}
    return {"pg" if kind in PG_FAULTS else "redis"}


def test_a_seed_replays_its_schedule_and_its_runs() -> None:
    assert schedule(7, 120) == schedule(7, 120) != schedule(8, 120)
    assert plan(7, 0, 50) == plan(7, 0, 50) != plan(7, 1, 50)


def test_faults_overlap_but_never_on_one_thing() -> None:
    for seed in range(20):
        faults = schedule(seed, 300)
        assert sum(f.kind == "failover" for f in faults) <= 1
        overlapping = 0
        for i, f in enumerate(faults):
            for g in faults[i + 1 :]:
                if g.at < f.at + f.length:
                    overlapping += 1
                    assert not held(f.kind, f.target) & held(g.kind, g.target), (seed, f, g)
        assert overlapping > len(faults) // 4, f"seed {seed}: faults hardly overlap"
    kinds = {f.kind for seed in range(20) for f in schedule(seed, 300)}
    assert kinds == {*WORKER_FAULTS, *LINK_FAULTS, *PG_FAULTS, *REDIS_FAULTS}
