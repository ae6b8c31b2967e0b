"""Totals the code adds up (`[answer] tally`): a question asking for a total or a count across the history ("the
total cost of the car cover and the detailing spray", "how many fish in total") is answered from a list the model
fills (prompts.tally_schema: each part once, with the amount it adds), summed here.

Why: the 1.5B answering model finds the parts but adds them up wrong. On LongMemEval's dev slice its multi-session
questions (counting and summing across sessions) were judged right 20.8% of the time with box-hits, most with all
their evidence in the context ("$120" for $120 + $20). Which questions: prompts.asks_for_total, a wording rule
written on that slice (it picks 11 of its 98 questions, all multi-session, and none of LoCoMo's 1,157 dev questions:
`python benchmarks/grounding_check.py`).
"""
from __future__ import annotations

from typing import Any

_MONEY = frozenset(("$", "dollar", "dollars", "usd", "us dollars"))


def _number(x: float) -> str:
    """12 -> "12", 0.75 -> "0.75", 2500 -> "2,500"."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}".rstrip("0").rstrip(".")


def _amount(x: float, money: bool, unit: str) -> str:
    return f"${_number(x)}" if money else f"{_number(x)} {unit}".rstrip()


def parts(data: dict[str, Any]) -> list[tuple[str, float]]:
    """The listed parts as (what, amount), each named once (the first listing of a name counts; names compared
    case-blind): a part that two excerpts mention is one part."""
    seen: set[str] = set()
    out: list[tuple[str, float]] = []
    for item in data.get("items", ()):
        name = " ".join(str(item["what"]).split())
        if name.lower() in seen:
            continue
        seen.add(name.lower())
        out.append((name, float(item["amount"])))
    return out


def total_reply(data: dict[str, Any], question: str = "") -> str:
    """The reply to a total question from the model's list (prompts.tally_schema): the sum with its unit, then the
    parts it adds ("$140 (car cover: $100; detailing spray: $40)"); "not mentioned" when nothing was listed."""
    found = parts(data)
    if not found:
        return "not mentioned"
    unit = " ".join(str(data.get("unit", "")).split())
    money = unit.lower() in _MONEY or "$" in question
    shown = "; ".join(f"{what}: {_amount(amount, money, unit)}" for what, amount in found)
    return f"{_amount(sum(a for _, a in found), money, unit)} ({shown})"
