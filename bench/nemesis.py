"""The nemesis, long: ``python3 bench/nemesis.py --minutes 30 --seed S`` runs tests/nemesis with a
schedule of faults that many minutes long (a random seed when none is given; it is printed, and
``--seed`` replays it). Servers: the test Postgres for the world's tables
(``OUTLAST_TEST_DATABASE_URL``, else the embedded default, as the tests); the nemesis starts its own
Postgres pair and Redis. A violation keeps the logs and the journal under ``.nemesis/`` (or
``--keep``)."""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the fault schedule")
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: random)")
    parser.add_argument("--keep", default=None, help="folder for a failing run's logs and journal")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    print(f"nemesis: seed {seed}, {args.minutes:g} minutes of faults", flush=True)
    env = dict(os.environ, OUTLAST_NEMESIS_SEED=str(seed), OUTLAST_NEMESIS_SECONDS=str(args.minutes * 60))
    if args.keep:
        env["OUTLAST_NEMESIS_KEEP"] = args.keep
    command = [sys.executable, "-m", "pytest", "tests/nemesis", "-q", "-s", "-p", "no:cacheprovider"]
    code = subprocess.call(command, cwd=ROOT, env=env)
    if code:
        again = f"python3 bench/nemesis.py --minutes {args.minutes:g} --seed {seed}"
        print(f"nemesis: seed {seed} failed; replay: {again}")
    return code


if __name__ == "__main__":
    sys.exit(main())
