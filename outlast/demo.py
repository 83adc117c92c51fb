"""``outlast demo`` (placeholder until the payments story lands)."""

from __future__ import annotations

from outlast.settings import Settings


def main(settings: Settings) -> None:
    raise NotImplementedError
