"""Receipt text of the ``basic`` style: header, item lines with prices, totals and footer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

__all__ = ["Line", "pick", "receipt_lines"]

_SHOP_A = ("FRESH", "GOLDEN", "SUNNY", "CITY", "GREEN", "ROYAL", "HAPPY", "LUCKY", "MEGA", "STAR", "MAPLE")
_SHOP_B = ("MART", "CAFE", "BAKERY", "STORE", "MARKET", "KITCHEN", "PHARMACY", "GROCER", "DELI", "BOOKS")
_COMPANY = ("SDN BHD", "LTD", "& CO", "INC", "TRADING CO")
_STREET = ("MAIN", "JALAN", "KING", "HIGH", "PARK", "RIVER", "STATION", "OAK", "CHURCH", "MERDEKA")
_STREET_TYPE = ("ST", "RD", "AVE", "BLVD", "LANE", "JLN")
_CITY = ("KUALA LUMPUR", "SPRINGFIELD", "RIVERSIDE", "PETALING JAYA", "LONDON", "AUSTIN", "OSAKA", "IPOH")
_ITEM = tuple(
    "MILK BREAD EGGS COFFEE TEA RICE SUGAR BUTTER APPLE BANANA CHICKEN SOAP WATER JUICE NOODLES CHEESE PEN "
    "BATTERY TISSUE YOGURT LATTE CAKE OIL SALT FLOUR TOMATO ONION SHAMPOO CEREAL COOKIES".split()
)
_ITEM_EXTRA = ("1L", "2L", "500G", "1KG", "PACK", "MINI", "LARGE", "ORGANIC", "EXTRA", "10PCS", "LOW-FAT")
_NAMES = ("ANNA", "JOHN", "SITI", "MEI", "RAJ", "LEE", "TOM", "AMY", "ALI", "KIM")
_FOOTER = (
    "THANK YOU", "THANK YOU!", "PLEASE COME AGAIN", "HAVE A NICE DAY", "GOODS SOLD ARE NOT RETURNABLE",
    "KEEP THIS RECEIPT",
)  # fmt: skip


@dataclass(eq=False)
class Line:
    """One receipt line: ``left`` tokens (centred or flush left) and ``right`` tokens (flush right). ``align``
    is ``left``, ``center``, ``lr``, ``rule`` or ``barcode``; ``ignore`` marks fine print whose words are
    don't-care regions; ``optional`` lines are dropped first when the paper is too short. Lines compare by
    identity so equal-looking lines stay distinct."""

    left: list[str]
    right: list[str] = field(default_factory=list)
    align: str = "left"
    size: float = 1.0
    bold: bool = False
    ignore: bool = False
    optional: bool = False
    keep_end: bool = False  # when too long, drop leading tokens (labels) instead of trailing ones

    def with_amounts(self, amounts: Mapping[str, str]) -> Line:
        """Fill ``{name}`` placeholders in the tokens from ``amounts``."""
        left, right = ([t.format_map(amounts) for t in tokens] for tokens in (self.left, self.right))
        return replace(self, left=left, right=right)


T = TypeVar("T")
ItemFn = Callable[[int], tuple[list[Line], dict[str, str]]]


def pick(rng: np.random.Generator, options: Sequence[T]) -> T:
    """One of ``options``, uniformly."""
    return options[int(rng.integers(len(options)))]


def _money(value: float) -> str:
    return f"{value:.2f}"


def receipt_lines(rng: np.random.Generator, chars: int) -> tuple[list[Line], ItemFn, list[Line]]:
    """``(header, items, tail)`` lines for a paper of about ``chars`` characters per line: ``items(n)`` makes
    ``n`` item lines and their amounts, which fill ``tail``'s ``{subtotal}``-style placeholders
    (:meth:`Line.with_amounts`)."""
    case = str.title if rng.random() < 0.25 else str.upper
    currency = [str(pick(rng, ("RM", "$", "EUR")))] if rng.random() < 0.5 else []
    head = _header(rng)
    tail = _tail(rng, currency)

    def items(n_lines: int) -> tuple[list[Line], dict[str, str]]:
        lines, subtotal, count = _items(rng, n_lines, chars)
        amounts = _amounts(rng, subtotal, count)
        return [_cased(ln, case) for ln in lines], amounts

    return [_cased(ln, case) for ln in head], items, [_cased(ln, case) for ln in tail]


def _cased(line: Line, case: Callable[[str], str]) -> Line:
    def fix(tokens: list[str]) -> list[str]:
        return [t if t.startswith("{") else case(t) for t in tokens]

    return replace(line, left=fix(line.left), right=fix(line.right))


def _header(rng: np.random.Generator) -> list[Line]:
    size = float(rng.uniform(1.2, 1.45))
    date = f"{rng.integers(1, 29):02d}{pick(rng, ('/', '-', '.'))}{rng.integers(1, 13):02d}"
    date += f"{date[2]}{rng.integers(2015, 2027)}"
    time = f"{rng.integers(0, 24):02d}:{rng.integers(0, 60):02d}"
    return [
        Line([pick(rng, _SHOP_A), pick(rng, _SHOP_B)], align="center", size=size, bold=True),
        Line(pick(rng, _COMPANY).split(), align="center", optional=True),
        Line([str(rng.integers(1, 999)), pick(rng, _STREET), pick(rng, _STREET_TYPE)], align="center"),
        Line([f"{rng.integers(10000, 99999)}", *pick(rng, _CITY).split()], align="center", optional=True),
        Line(
            ["TEL:", f"0{rng.integers(1, 9)}-{rng.integers(1000, 9999)}", f"{rng.integers(1000, 9999)}"],
            align="center",
            optional=True,
        ),
        Line(
            ["TAX", "INVOICE"] if rng.random() < 0.5 else ["RECEIPT"],
            align="center",
            bold=True,
            optional=True,
        ),
        Line([], align="rule"),
        Line(["DATE:", date], [time], align="lr", keep_end=True),
        Line(["CASHIER:", pick(rng, _NAMES)], ["NO:", f"{rng.integers(1, 99999):06d}"], "lr", optional=True),
        Line([], align="rule", optional=True),
    ]


def _items(rng: np.random.Generator, n_lines: int, chars: int) -> tuple[list[Line], float, int]:
    lines: list[Line] = []
    subtotal, count = 0.0, 0
    two_line = rng.random() < 0.35
    while len(lines) < n_lines:
        qty = int(rng.integers(1, 6)) if rng.random() < 0.6 else 1
        unit = round(float(rng.uniform(0.5, 40.0)), 1 if rng.random() < 0.5 else 2)
        name = [pick(rng, _ITEM)]
        if chars >= 16 and rng.random() < 0.5:
            name.append(pick(rng, _ITEM_EXTRA))
        total = qty * unit
        subtotal += total
        count += 1
        if two_line and len(lines) + 2 <= n_lines:
            lines.append(Line(name, align="left"))
            lines.append(Line([str(qty), "x", _money(unit)], [_money(total)], align="lr"))
        else:
            lead = [str(qty)] if qty > 1 or rng.random() < 0.3 else []
            lines.append(Line([*lead, *name], [_money(total)], align="lr"))
    return lines, subtotal, count


def _amounts(rng: np.random.Generator, subtotal: float, count: int) -> dict[str, str]:
    rate = int(pick(rng, (5, 6, 8, 10)))
    tax = subtotal * rate / 100
    total = subtotal + tax
    cash = float(np.ceil(total / 10.0) * 10.0 + (10.0 if rng.random() < 0.3 else 0.0))
    return {
        "subtotal": _money(subtotal),
        "rate": f"{rate}%",
        "tax": _money(tax),
        "total": _money(total),
        "cash": _money(cash),
        "change": _money(cash - total),
        "count": str(count),
    }


def _tail(rng: np.random.Generator, currency: list[str]) -> list[Line]:
    footer = [
        Line(pick(rng, _FOOTER).split(), align="center", optional=i > 0)
        for i in range(1 + int(rng.integers(3)))
    ]
    lines = [
        Line([], align="rule"),
        Line(["SUBTOTAL"], ["{subtotal}"], align="lr"),
        Line([str(pick(rng, ("GST", "SST", "TAX", "VAT"))), "{rate}"], ["{tax}"], align="lr", optional=True),
        Line(["TOTAL"], [*currency, "{total}"], align="lr", size=float(rng.uniform(1.1, 1.3)), bold=True),
        Line(["CASH"], ["{cash}"], align="lr", optional=True),
        Line(["CHANGE"], ["{change}"], align="lr", optional=True),
        Line(["ITEMS:", "{count}"], align="left", optional=True),
        Line([], align="rule", optional=True),
        *footer,
    ]
    if rng.random() < 0.3:
        lines.append(Line([], align="barcode", optional=True))
    if rng.random() < 0.3:
        fine = ["REG", f"{rng.integers(10**6, 10**7)}", "VAT", "INCL", "REF", f"{rng.integers(100, 999)}"]
        fine = fine[: int(rng.integers(3, len(fine) + 1))]
        lines.append(Line(fine, align="center", size=0.45, ignore=True, optional=True))
    return lines
