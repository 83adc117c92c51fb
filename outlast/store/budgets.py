"""The budgets family stores reservations made before an operation, settled after it."""

from __future__ import annotations

from typing import Any

from outlast.store.base import Family, budget_arrays


class Budgets(Family):
    """``Budgets`` reserves, settles and reads a budget's use."""

    async def reserve(
        self, budget_id: str, run_id: str, op_id: str, amounts: dict[str, float]
    ) -> list[dict[str, Any]]:
        """Reserve all the operation's estimates or none (a name it already holds is kept);
        returns the limits that would be exceeded."""
        names, values = budget_arrays(amounts)
        return await self._write(
            "reserve", budget_id=budget_id, run_id=run_id, op_id=op_id, names=names, amounts=values
        )

    async def settle(
        self, budget_id: str, run_id: str, op_id: str, actual: dict[str, float], expected: bool
    ) -> bool:
        """Replace the operation's reservation by its actual use, once per operation. ``expected``:
        the operation reserved, so nothing is spent unless its reservation is still there to
        settle. Whether the operation's use is settled (now, or by an earlier settle of it: sent
        again after a lost acknowledgement, it says so and spends nothing)."""
        names, values = budget_arrays(actual)
        rows = await self._write(
            "settle",
            budget_id=budget_id,
            run_id=run_id,
            op_id=op_id,
            names=names,
            actual=values,
            expected=expected,
        )
        return bool(rows)

    async def reservations(self, run_id: str, op_id: str) -> dict[str, float]:
        rows = await self._rows("reservations", run_id=run_id, op_id=op_id)
        return {r["name"]: float(r["amount"]) for r in rows}

    async def budget(self, budget_id: str) -> list[dict[str, Any]]:
        return await self._rows("budget", budget_id=budget_id)

    async def budget_standing(self, budget_id: str) -> dict[str, dict[str, float]]:
        """The budget as it stands: limit, spent and reserved for each name."""
        return {
            r["name"]: {
                "limit": float(r["limit_value"]),
                "spent": float(r["spent"]),
                "reserved": float(r["reserved"]),
            }
            for r in await self.budget(budget_id)
        }
