"""The results: per-system medians over the interleaved rounds, ratios to outlast with their
min/median/max over rounds, the targets of issue 9 met or missed, a Markdown file and a PNG chart."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from common import Result


@dataclass
class Cell:
    """One row of the throughput table: its rounds, and the outlast rounds it is compared with."""

    name: str
    k: int
    processes: int
    rounds: list[Result]
    failed: str | None = None
    unit: str = "ops"  # "writes" for the fenced-append limit, "xadd" for Redis

    def median(self) -> Result:
        ordered = sorted(self.rounds, key=lambda r: r.seconds / max(r.runs, 1))
        return ordered[len(ordered) // 2]


def spread(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def ratios(cell: Cell, ref: Cell, per: str = "ops") -> list[float]:
    """Per round: the cell's rate over the reference's (same round, back to back)."""
    out = []
    for r, o in zip(cell.rounds, ref.rounds, strict=False):
        mine = r.writes / r.seconds if per == "writes" and r.writes else r.ops_per_s
        theirs = o.writes / o.seconds if per == "writes" and o.writes else o.ops_per_s
        out.append(mine / theirs)
    return out


def fmt_spread(values: list[float], spec: str = ".2f", suffix: str = "x") -> str:
    if not values:
        return "-"
    lo, mid, hi = spread(values)
    if len(values) == 1:
        return f"{mid:{spec}}{suffix}"
    return f"{mid:{spec}}{suffix} ({lo:{spec}}-{hi:{spec}})"


def throughput_table(cells: list[Cell], reference: dict[tuple[int, int], Cell]) -> str:
    lines = [
        "| system | K | procs | runs/s | ops/s | / outlast, median (min-max) | writes/commit "
        "| worker CPU | host CPU |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for c in cells:
        if c.failed or not c.rounds:
            lines.append(f"| {c.name} | {c.k} | {c.processes} | failed: {c.failed} | | | | | |")
            continue
        r = c.median()
        ref = reference.get((c.k, c.processes))
        ratio = (
            "-"
            if ref is None or ref is c or c.unit != "ops" or not ref.rounds
            else fmt_spread(ratios(c, ref))
        )
        if ref is c:
            ratio = "1.00x"
        per_commit = "-" if not r.commits or r.writes is None else f"{r.writes / r.commits:.1f}"
        ops = f"{r.ops_per_s:,.0f}" if c.unit == "ops" else f"{r.ops_per_s:,.0f} {c.unit}/s"
        lines.append(
            f"| {c.name} | {c.k} | {c.processes} | {r.runs_per_s:,.0f} | {ops} | {ratio} | {per_commit} "
            f"| {100 * r.cpu / r.seconds:.0f}% | {100 * r.host_busy / r.seconds:.0f}% |"
        )
    return "\n".join(lines)


def targets_table(rows: list[tuple[str, str, list[float], float, bool]]) -> str:
    """rows: (target, unit suffix, values over rounds, bound, higher is better). A bound that
    must hold every time (takeover: "at any backlog") is judged on its worst sample, the others on
    the median."""
    lines = ["| target | measured, median (min-max) | met |", "|---|--:|:-:|"]
    for name, suffix, values, bound, higher in rows:
        if not values:
            lines.append(f"| {name} | not measured | - |")
            continue
        every = "takeover" in name
        judged = (min(values) if higher else max(values)) if every else statistics.median(values)
        met = judged >= bound if higher else judged <= bound
        verdict = ("yes" if met else "**no**") + (" (worst)" if every else "")
        lines.append(f"| {name} | {fmt_spread(values, '.2f', suffix)} | {verdict} |")
    return "\n".join(lines)


def raw(cells: list[Cell], probes: dict[str, list[float]]) -> str:
    """Every round of every row and every probe sample, as JSON (to re-read or re-plot)."""
    return json.dumps(
        {
            "cells": [
                {
                    "name": c.name,
                    "k": c.k,
                    "processes": c.processes,
                    "unit": c.unit,
                    "failed": c.failed,
                    "rounds": [asdict(r) for r in c.rounds],
                }
                for c in cells
            ],
            "probes": probes,
        },
        indent=1,
    )


def chart(path: Path, cells: list[Cell], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [c for c in cells if c.rounds and not c.failed and c.unit == "ops"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.42 * len(shown) + 1.8), width_ratios=[3, 2])
    ax = axes[0]
    labels = [f"{c.name}  K={c.k} P={c.processes}" for c in shown]
    values = [c.median().runs_per_s for c in shown]
    lows = [min(r.runs_per_s for r in c.rounds) for c in shown]
    highs = [max(r.runs_per_s for r in c.rounds) for c in shown]
    colors = ["tab:blue" if c.name.startswith("outlast") else "tab:gray" for c in shown]
    y = list(range(len(shown)))[::-1]
    err = [
        [v - lo for v, lo in zip(values, lows, strict=True)],
        [hi - v for v, hi in zip(values, highs, strict=True)],
    ]
    ax.barh(y, values, color=colors, xerr=err, capsize=2)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("runs (jobs) per second, median of rounds, min-max bars; log scale")
    ax.set_title("throughput (outlast durable per step; peers in memory except DBOS)", fontsize=9)
    ax = axes[1]
    scaling = {}
    for c in shown:
        if c.k == 5 and c.name in ("outlast", "RQ SimpleWorker"):
            scaling.setdefault(c.name, []).append((c.processes, c.median().ops_per_s))
    for name, points in scaling.items():
        points.sort()
        ax.plot([p for p, _ in points], [v for _, v in points], marker="o", label=name)
    ax.set_xlabel("worker processes")
    ax.set_ylabel("ops/s (K = 5)")
    ax.set_xticks([1, 2, 4])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title("scaling with processes (2 cores)", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
