"""The ``receipt`` style: dense receipts laid out on paper, with marks that get no box.

Text rows hold cells anchored at fractions of the text width (so item tables have columns), one group
(one line box) each; mark rows hold rules, barcodes, QR-like codes and logos; stamps and pen strokes go
over the finished page in a second ink.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ocr.data.synthetic.content import pick
from ocr.data.synthetic.layout import (
    Font,
    InkWord,
    PageStyle,
    PaperWord,
    available_fonts,
    font_extent,
    place_words,
    render_ink,
    span,
)
from ocr.data.synthetic.marks import draw_barcode, draw_handwriting, draw_logo, draw_qr, draw_rule, draw_stamp

__all__ = ["DensePage", "Row", "layout_dense", "receipt_rows"]

_CELL_GAP = 1.5  # min gap between cells of a row, in body heights: line boxes stay apart
_SHOP = (
    "MR D.I.Y.", "99 SPEEDMART", "AEON", "Popular Book Co.", "KEDAI RUNCIT", "Restoran Nasi Kandar",
    "GARDENIA", "Sunway Pharmacy", "7-Eleven", "UNIHAKKA", "Happy Mart", "ONE ONE THREE", "TSH BAKERY",
    "Kopitiam 88",
)  # fmt: skip
_SUFFIX = ("SDN BHD", "SDN. BHD.", "ENTERPRISE", "TRADING", "(M) SDN BHD", "Restaurant", "& Co.")
_STREET = ("JALAN", "Jln.", "LORONG", "No.", "Lot", "PT", "Taman", "Persiaran")
_PLACE = (
    "Bukit Bintang", "PETALING JAYA", "Shah Alam", "JOHOR BAHRU", "Seri Kembangan", "Kajang", "CHERAS",
    "Puchong", "KLANG", "Selangor", "Kuala Lumpur", "Setia Alam", "Ampang", "Subang Jaya",
)  # fmt: skip
_ITEM = tuple(
    "Milk Bread Eggs Coffee Tea Rice Sugar Butter Apple Banana Chicken Soap Water Juice Noodles Cheese Pen "
    "Battery Tissue Yogurt Latte Cake Oil Salt Flour Tomato Onion Shampoo Cereal Cookies Nasi Lemak Teh "
    "Tarik Roti Canai Mee Goreng Kopi-O Ayam Sayur Ikan Plate Towel Scissors Glue Tape Bulb Hanger "
    "Basket".split()
)
_ITEM_EXTRA = (
    "1L", "500g", "1KG", "PACK", "(L)", "(M)", "x12", "10PCS", "Low-Fat", "35.5x25.5CM", "120ML", "#3",
)  # fmt: skip
_LABEL = ("Invoice No", "Bill No", "Receipt #", "Doc No", "Trans", "Order No", "Inv#", "CS No")
_PERSON = ("Cashier", "Operator", "Server", "Staff", "Counter", "Salesperson")
_NAMES = ("ANNA", "John", "SITI", "Mei Ling", "RAJ", "Lee", "TOM", "amy", "ALI", "Kim 02", "NURUL", "CN")
_PAY = ("CASH", "VISA", "MASTER", "Debit Card", "E-WALLET", "Boost", "TNG eWallet", "CREDIT")
_FOOTER = (
    "Thank You! Please Come Again", "GOODS SOLD ARE NOT RETURNABLE", "Have a nice day :)",
    "Exchange within 7 days with receipt.", "STRICTLY NO CASH REFUND", "Thank you & see you again!",
    "Please keep this receipt for warranty", "*** CUSTOMER COPY ***", "Powered by iPOS www.ipos.my",
)  # fmt: skip
_WIDE = (
    "СПАСИБО ЗА ПОКУПКУ", "Итого к оплате", "Ευχαριστούμε πολύ", "ΣΥΝΟΛΟ ΠΟΣΟΥ", "Кассир: Иванова",
    "Πληρωμή με κάρτα", "Добро пожаловать!", "ΑΠΟΔΕΙΞΗ ΛΙΑΝΙΚΗΣ",
)  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """Tokens placed at ``anchor`` (fraction of the text width): ``align`` ``l``, ``r`` or ``c``."""

    tokens: tuple[str, ...]
    anchor: float
    align: str


@dataclass(frozen=True)
class Row:
    """A text row (``cells``) or a mark row (``mark``: ``rule``, ``barcode``, ``qr`` or ``logo``)."""

    cells: tuple[Cell, ...] = ()
    mark: str = ""
    size: float = 1.0
    bold: bool = False
    wide: bool = False  # Greek or Cyrillic text: drawn with a face that covers it


@dataclass
class DensePage:
    """One laid-out receipt: ink (thermal print), pen (stamps, strokes) as (h, w) float32 in [0, 1]."""

    ink: npt.NDArray[np.float32]
    pen: npt.NDArray[np.float32]
    words: list[PaperWord] = field(default_factory=list)


def _money(rng: np.random.Generator, low: float, high: float) -> str:
    value = float(rng.uniform(low, high))
    return f"{value:,.2f}" if value >= 1000 and rng.random() < 0.5 else f"{value:.2f}"


def _text(*tokens: str) -> tuple[str, ...]:
    return tuple(t for token in tokens for t in token.split())


def _left(text: str) -> Cell:
    return Cell(_text(text), 0.0, "l")


def _right(text: str) -> Cell:
    return Cell(_text(text), 1.0, "r")


def _centre(text: str) -> Cell:
    return Cell(_text(text), 0.5, "c")


def _header(rng: np.random.Generator, centred: bool) -> list[Row]:
    place = _centre if centred else _left
    rows = [Row(mark="logo")] if rng.random() < 0.3 else []
    rows.append(Row((place(pick(rng, _SHOP)),), size=float(rng.uniform(1.2, 2.0)), bold=rng.random() < 0.7))
    if rng.random() < 0.7:
        rows.append(Row((place(f"{pick(rng, _SHOP).upper()} {pick(rng, _SUFFIX)}"),)))
    if rng.random() < 0.6:
        rows.append(Row((place(f"(CO.REG : {rng.integers(10**5, 10**7)}-{pick(rng, 'XVKPW')})"),)))
    for _ in range(int(rng.integers(1, 5))):
        street = (
            f"{rng.integers(1, 300)}{pick(rng, ('', '-A', ',', '-1-2'))} {pick(rng, _STREET)} "
            f"{pick(rng, _PLACE)} {rng.integers(1, 30)}{pick(rng, (',', '', '.', '/5'))}"
        )
        rows.append(Row((place(street),)))
    if rng.random() < 0.8:
        town = f"{rng.integers(40000, 81999)} {pick(rng, _PLACE)}, {pick(rng, _PLACE)}."
        rows.append(Row((place(town),)))
    phone = f"TEL:0{rng.integers(3, 9)}-{rng.integers(1000, 9999)} {rng.integers(1000, 9999)}"
    if rng.random() < 0.5:
        rows.append(Row((place(phone),)))
        rows.append(Row((place(f"Fax: 0{rng.integers(3, 9)}-{rng.integers(10**6, 10**7)}"),)))
    else:
        rows.append(Row((_left(phone), _right(f"FAX:{rng.integers(10**6, 10**7)}"))))
    if rng.random() < 0.6:
        rows.append(Row((place(f"GST ID No : {rng.integers(10**11, 10**12):012d}"),)))
    if rng.random() < 0.4:
        title = pick(rng, ("TAX INVOICE", "Cash Sales", "RECEIPT", "Official Receipt"))
        rows.append(Row((place(title),), bold=True))
    return rows


def _meta(rng: np.random.Generator) -> list[Row]:
    date = f"{rng.integers(1, 29):02d}{pick(rng, '/-.')}{rng.integers(1, 13):02d}"
    date += f"{date[2]}{rng.integers(2015, 2027)}"
    time = f"{rng.integers(0, 24):02d}:{rng.integers(0, 60):02d}:{rng.integers(0, 60):02d}"
    number = f"{pick(rng, ('CS', 'INV', 'T', ''))}{rng.integers(10**4, 10**9)}"
    rows = [
        Row((_left(f"{pick(rng, _LABEL)}: {number}"), _right(f"Date: {date}"))),
        Row((_left(f"{pick(rng, _PERSON)}: {pick(rng, _NAMES)}"), _right(f"{time}"))),
    ]
    if rng.random() < 0.4:
        rows.append(Row((_left(f"Table: {rng.integers(1, 40)}"), _right(f"Pax: {rng.integers(1, 9)}"))))
    if rng.random() < 0.3:
        rows.append(Row((_left(f"Member #{rng.integers(10**9, 10**10)}"),)))
    return rows


def _items(rng: np.random.Generator, count: int, layout: int) -> list[Row]:
    rows: list[Row] = []
    code_suffix = rng.random() < 0.4
    for _ in range(count):
        name = f"{pick(rng, _ITEM)}"
        if rng.random() < 0.6:
            name += f" {pick(rng, _ITEM_EXTRA)}"
        if rng.random() < 0.4:
            name = name.upper()
        qty = int(rng.integers(1, 6)) if rng.random() < 0.5 else 1
        unit = float(rng.uniform(0.5, 90.0))
        amount = f"{qty * unit:.2f}" + (f" {pick(rng, ('SR', 'ZR', 'T', 'S'))}" if code_suffix else "")
        if layout == 0:  # name, qty, price and amount on one row
            price = Cell((f"{unit:.2f}",), 0.78, "r")
            rows.append(Row((_left(name), Cell((str(qty),), 0.58, "r"), price, _right(amount))))
        elif layout == 1:  # name row, then code, qty x price and amount
            rows.append(Row((_left(name),)))
            code = Cell((f"{rng.integers(10**7, 10**13)}",), 0.0, "l")
            rows.append(Row((code, Cell(_text(f"{qty} X {unit:.2f}"), 0.62, "r"), _right(amount))))
        else:  # qty first, name, amount
            rows.append(Row((Cell((str(qty),), 0.0, "l"), Cell(_text(name), 0.08, "l"), _right(amount))))
    return rows


def _totals(rng: np.random.Generator, currency: str) -> list[Row]:
    def money_row(label: str, low: float, high: float, bold: bool = False) -> Row:
        return Row((_left(label), _right(f"{currency}{_money(rng, low, high)}".strip())), bold=bold)

    rows = [money_row(pick(rng, ("Sub Total", "SUBTOTAL", "Total Excl. GST", "Sub-Total")), 5, 900)]
    if rng.random() < 0.6:
        rows.append(money_row(pick(rng, ("GST 6%", "SST @ 6%", "Service Tax 10%", "Tax")), 0.1, 60))
    if rng.random() < 0.5:
        rows.append(money_row(pick(rng, ("Rounding Adj", "ROUNDING ADJUSTMENT", "Discount")), -0.04, 0.04))
    label = _left(pick(rng, ("TOTAL", "Total Amount", "TOTAL INCL. GST", "NETT TOTAL")))
    total = (label, _right(_money(rng, 5, 950)))
    rows.append(Row(total, size=float(rng.uniform(1.0, 1.5)), bold=rng.random() < 0.6))
    rows.append(money_row(pick(rng, _PAY), 5, 1000))
    if rng.random() < 0.7:
        rows.append(money_row(pick(rng, ("Change", "CHANGE DUE", "Balance")), 0, 50))
    if rng.random() < 0.4:
        rows += [
            Row((_left("GST Summary"), Cell(("Amount(RM)",), 0.72, "r"), _right("Tax(RM)"))),
            Row((_left("SR @ 6%"), Cell((_money(rng, 5, 900),), 0.72, "r"), _right(_money(rng, 0.3, 54)))),
            Row((_left("ZR @ 0%"), Cell((_money(rng, 0, 90),), 0.72, "r"), _right("0.00"))),
        ]
    if rng.random() < 0.5:
        rows.append(Row((_left(f"Item(s): {rng.integers(1, 30)}"), _right(f"Qty(s): {rng.integers(1, 40)}"))))
    return rows


def _footer(rng: np.random.Generator, wide: bool) -> list[Row]:
    rows = [Row((_centre(pick(rng, _FOOTER)),)) for _ in range(int(rng.integers(1, 4)))]
    if wide:
        rows.insert(int(rng.integers(len(rows) + 1)), Row((_centre(pick(rng, _WIDE)),), wide=True))
    if rng.random() < 0.5:
        stamp = f"{rng.integers(10**5, 10**6)} {rng.integers(0, 24):02d}:{rng.integers(0, 60):02d}"
        rows.append(Row((_left(stamp), _right(f"T{rng.integers(1, 9)} R{rng.integers(10**8, 10**9)}"))))
    code = pick(rng, ("barcode", "qr", "")) if rng.random() < 0.6 else ""
    return [*rows, Row(mark=code)] if code else rows


def receipt_rows(rng: np.random.Generator, count: int) -> list[Row]:
    """About ``count`` rows of one receipt: header, meta, item table, totals, footer (items fill the rest)."""
    centred = rng.random() < 0.8
    currency = pick(rng, ("RM", "RM ", "$", "")) if rng.random() < 0.5 else ""
    rule = Row(mark="rule")
    head = [*_header(rng, centred), rule, *_meta(rng), rule]
    table_head: list[Row] = []
    layout = int(rng.integers(3))
    if rng.random() < 0.6:
        labels = ("Qty", "Price", "Amount") if rng.random() < 0.5 else ("QTY", "U.P", "Total (RM)")
        name = _left(pick(rng, ("Description", "ITEM", "Desc/Item", "Product")))
        columns = (Cell((labels[0],), 0.58, "r"), Cell(_text(labels[1]), 0.78, "r"), _right(labels[2]))
        table_head = [Row((name, *columns)), rule]
    tail = [rule, *_totals(rng, currency), rule, *_footer(rng, rng.random() < 0.35)]
    room = count - len(head) - len(table_head) - len(tail)
    per_item = 2 if layout == 1 else 1
    items = _items(rng, max(3, room // per_item), layout)
    return [*head, *table_head, *items, *tail]


def layout_dense(
    rng: np.random.Generator, rows: list[Row], body_h: float, chars: int, squeeze: float
) -> DensePage:
    """Lay out ``rows`` on a paper sized to fit them (``chars`` per body line, glyphs scaled by ``squeeze``):
    ink and pen maps of the paper's size and the words in paper px grouped by cell."""
    fonts = available_fonts()
    main = fonts[int(rng.integers(len(fonts)))]
    header = main if rng.random() < 0.6 else fonts[int(rng.integers(len(fonts)))]
    wide = [f for f in fonts if f.wide]
    style = PageStyle(main, header, body_h, float(rng.uniform(0.6, 1.0)), float(rng.uniform(0.35, 0.9)))
    digit = render_ink("0000000000", main, body_h, False, squeeze)
    assert digit is not None
    text_w = int(chars * (digit.box[2] - digit.box[0]) / 10 * 1.15)
    margin_x = int(body_h * rng.uniform(0.8, 3.0))
    pitches = [_pitch(row, style, wide[0]) for row in rows]
    margin_top, margin_bottom = body_h * rng.uniform(0.8, 4.0), body_h * rng.uniform(1.0, 6.0)
    height = int(margin_top + sum(pitches) + margin_bottom)
    width = text_w + 2 * margin_x
    page = DensePage(np.zeros((height, width), np.float32), np.zeros((height, width), np.float32))
    y = margin_top
    for row, pitch in zip(rows, pitches, strict=True):
        font = pick(rng, wide) if row.wide and not style.font.wide else style.font_for(row.size)
        _draw_row(rng, page.ink, row, style, font, y, margin_x, width - margin_x, squeeze)
        y += pitch
    _draw_pen(rng, page.pen, body_h)
    page.words = style.words
    return page


def _pitch(row: Row, style: PageStyle, wide: Font) -> float:
    h = style.body_h
    mark = {"rule": 1.0, "barcode": 4.0, "qr": 7.0, "logo": 5.0}
    if row.mark:
        return h * (mark[row.mark] + style.gap_y)
    font = wide if row.wide and not style.font.wide else style.font_for(row.size)
    above, below = font_extent(font, h * row.size, row.bold)
    return above + below + style.gap_y * h * row.size


def _draw_row(
    rng: np.random.Generator,
    ink: np.ndarray,
    row: Row,
    style: PageStyle,
    font: Font,
    y: float,
    x0: int,
    x1: int,
    squeeze: float,
) -> None:
    h = style.body_h
    if row.mark == "rule":
        draw_rule(rng, ink, int(y + h * 0.5), x0, x1)
    elif row.mark == "barcode":
        draw_barcode(rng, ink, int(y), int(h * 3.2), x0, x1)
    elif row.mark == "qr":
        side = int(h * 6.5)
        draw_qr(rng, ink, int(x0 + (x1 - x0 - side) * pick(rng, (0.0, 0.5, 1.0))), int(y), side)
    elif row.mark == "logo":
        draw_logo(rng, ink, (x0 + x1) // 2, int(y + h * 2.3), int(h * 4.5))
    else:
        size = h * row.size
        baseline = int(round(y + font_extent(font, size, row.bold)[0]))
        gap = style.gap_x * size
        limit = float(x1)
        for cell in sorted(row.cells, key=lambda c: -c.anchor):
            words = [
                (t, i, False) for t in cell.tokens if (i := render_ink(t, font, size, row.bold, squeeze))
            ]
            start, words = _fit_cell(words, cell, x0, x1, limit, gap)
            if words:
                place_words(ink, words, start, baseline, gap, style)
                limit = start - _CELL_GAP * h


def _fit_cell(
    words: list[InkWord], cell: Cell, x0: int, x1: int, limit: float, gap: float
) -> tuple[float, list[InkWord]]:
    """Start x and the words of ``cell`` that fit between ``x0`` and ``limit`` (trailing words dropped)."""
    anchor = x0 + cell.anchor * (x1 - x0)
    while words:
        extent = span(words, gap)
        start = {"l": anchor, "r": anchor - extent, "c": anchor - extent / 2}[cell.align]
        start = min(start, limit - extent) if cell.align != "l" else start
        if start >= x0 and start + extent <= limit:
            return start, words
        words = words[:-1]
    return 0.0, words


def _draw_pen(rng: np.random.Generator, pen: np.ndarray, body_h: float) -> None:
    """Stamps and handwriting over the page, in the pen layer (no boxes)."""
    height, width = pen.shape
    if rng.random() < 0.3:
        size = int(min(width * rng.uniform(0.3, 0.6), height * 0.3))
        draw_stamp(rng, pen, int(rng.uniform(0.2, 0.8) * width), int(rng.uniform(0.15, 0.9) * height), size)
    for _ in range(int(rng.integers(0, 3)) if rng.random() < 0.4 else 0):
        w, h = int(body_h * rng.uniform(3, 14)), int(body_h * rng.uniform(1.2, 4))
        draw_handwriting(rng, pen, int(rng.uniform(0, 0.8) * width), int(rng.uniform(0, 0.95) * height), w, h)
