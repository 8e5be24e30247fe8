"""Receipt content, fonts and layout for the synthetic generator: text lines -> word ink on the paper.

Every whitespace-separated token is rendered on its own, so its ink box is known exactly and the gaps
between neighbouring words (>= 0.6 x text height across, >= 0.5 x text height between lines) are set
by the layout rather than by a font's spacing. That keeps shrunk DB regions of neighbours apart.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import itertools
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFont

from ocr.data.synthetic.content import Line, receipt_lines
from ocr.data.synthetic.marks import draw_barcode, draw_rule, stamp_patch

__all__ = [
    "FONT_PACKAGE",
    "Font",
    "PaperWord",
    "available_fonts",
    "font_package_version",
    "layout_receipt",
    "merge_groups",
    "span",
]

_HERSHEY = {
    "hershey_simplex": cv2.FONT_HERSHEY_SIMPLEX,
    "hershey_duplex": cv2.FONT_HERSHEY_DUPLEX,
    "hershey_complex": cv2.FONT_HERSHEY_COMPLEX,
    "hershey_triplex": cv2.FONT_HERSHEY_TRIPLEX,
    "hershey_plain": cv2.FONT_HERSHEY_PLAIN,
}
# Fonts come from a pinned package (pyproject.toml), never from the machine, so a seed gives the same
# images everywhere. matplotlib ships DejaVu (Latin, Greek, Cyrillic), STIX and Computer Modern faces.
FONT_PACKAGE = "matplotlib"
_FONT_FOLDER = ("mpl-data", "fonts", "ttf")
# file -> whether it covers Greek and Cyrillic; the first four are the basic style's faces
_TTF_FILES = {
    "DejaVuSansMono.ttf": True,
    "DejaVuSansMono-Bold.ttf": True,
    "DejaVuSans.ttf": True,
    "cmtt10.ttf": False,
    "DejaVuSans-Bold.ttf": True,
    "DejaVuSansMono-Oblique.ttf": True,
    "DejaVuSerif.ttf": True,
    "DejaVuSerif-Bold.ttf": True,
    "STIXGeneral.ttf": True,
    "STIXGeneralBol.ttf": True,
    "cmb10.ttf": False,
}
_BASIC_TTF = 4
_REFERENCE = "Hgjy(|$"  # tallest ascender and deepest descender of the generator's character set
_INK_THRESHOLD = 64  # alpha (0-255) counted as ink for the word box; fainter anti-aliasing is not


@dataclass(frozen=True)
class Font:
    """A font the generator can draw with: an OpenCV Hershey face or a packaged TrueType file. ``wide`` marks
    faces that also cover Greek and Cyrillic."""

    name: str
    hershey: int | None = None
    path: str | None = None
    wide: bool = False


@dataclass(frozen=True)
class PaperWord:
    """One annotated word in paper px: ``points`` (4, 2) float32 clockwise from the top-left."""

    points: npt.NDArray[np.float32]
    text: str
    ignore: bool
    group: int = 0  # the words of one group make one box at line granularity


@dataclass(frozen=True)
class Ink:
    alpha: npt.NDArray[np.float32]  # (h, w) in [0, 1]
    top: int  # patch row 0 relative to the baseline (negative: above it)
    box: tuple[int, int, int, int]  # ink x0, y0, x1, y1 (exclusive) inside the patch


InkWord = tuple[str, Ink, bool]  # text, ink, ignore


@dataclass
class PageStyle:
    font: Font
    header_font: Font
    body_h: float
    gap_x: float  # horizontal gap between words, in body heights
    gap_y: float  # vertical gap between lines, in body heights
    words: list[PaperWord] = field(default_factory=list)
    groups: int = 0  # groups placed so far (one per ``place_words`` call)

    def font_for(self, size: float) -> Font:
        """The header face for text larger than 1.15 body heights, else the body face."""
        return self.header_font if size > 1.15 else self.font


def available_fonts() -> tuple[Font, ...]:
    """Hershey faces, then the packaged TrueType faces, in a fixed order (never the machine's fonts)."""
    return tuple(Font(name, hershey=face) for name, face in _HERSHEY.items()) + _ttf_fonts()


def font_package_version() -> str:
    """Version of the installed font package (the generated pixels depend on it)."""
    return importlib.metadata.version(FONT_PACKAGE)


@functools.cache
def _ttf_fonts() -> tuple[Font, ...]:
    # find_spec locates the package without importing it (importing matplotlib is slow)
    spec = importlib.util.find_spec(FONT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(f"font package {FONT_PACKAGE!r} is not installed; run `uv sync`")
    folder = Path(locations[0]).joinpath(*_FONT_FOLDER)
    missing = [name for name in _TTF_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder}: expected the {FONT_PACKAGE} font files {missing}, not found")
    return tuple(Font(name, path=str(folder / name), wide=wide) for name, wide in _TTF_FILES.items())


@functools.cache
def _hershey_cap(face: int, thickness: int) -> float:
    img = np.zeros((120, 120), np.uint8)
    cv2.putText(img, "H", (10, 100), face, 2.0, 255, thickness, cv2.LINE_AA)
    rows = np.flatnonzero((img >= _INK_THRESHOLD).any(axis=1))
    return (rows[-1] - rows[0] + 1) / 2.0


@functools.cache
def _pil_font(path: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size)


def _render_hershey(text: str, face: int, height: float, bold: bool) -> tuple[np.ndarray, int]:
    thickness = 2 if bold and height >= 11 else 1
    scale = height / _hershey_cap(face, thickness)
    (w, h), base = cv2.getTextSize(text, face, scale, thickness)
    pad = thickness + 2
    img = np.zeros((h + base + 2 * pad, w + 2 * pad), np.uint8)
    cv2.putText(img, text, (pad, pad + h), face, scale, 255, thickness, cv2.LINE_AA)
    return img, pad + h


def _render_ttf(text: str, path: str, height: float) -> tuple[np.ndarray, int]:
    cap = -_pil_font(path, 100).getbbox("H", anchor="ls")[1] / 100.0
    font = _pil_font(path, max(4, round(height / cap)))
    x0, y0, x1, y1 = (int(v) for v in font.getbbox(text, anchor="ls"))  # ints for TrueType fonts
    pad = 2
    img = Image.new("L", (x1 - min(x0, 0) + 2 * pad, y1 - y0 + 2 * pad), 0)
    ImageDraw.Draw(img).text((pad - min(x0, 0), pad - y0), text, fill=255, font=font, anchor="ls")
    return np.asarray(img), pad - y0


@functools.lru_cache(maxsize=4096)
def render_ink(text: str, font: Font, height: float, bold: bool, squeeze: float = 1.0) -> Ink | None:
    """Ink of ``text`` with cap height ``height`` px, its width scaled by ``squeeze`` (condensed < 1)."""
    if font.hershey is not None:
        img, baseline = _render_hershey(text, font.hershey, height, bold)
    else:
        img, baseline = _render_ttf(text, str(font.path), height)
    if squeeze != 1.0:
        img = cv2.resize(
            img, (max(1, round(img.shape[1] * squeeze)), img.shape[0]), interpolation=cv2.INTER_AREA
        )
    strong = img >= _INK_THRESHOLD
    rows, cols = np.flatnonzero(strong.any(axis=1)), np.flatnonzero(strong.any(axis=0))
    if len(rows) == 0:
        return None
    alpha = img.astype(np.float32) / 255.0
    alpha.flags.writeable = False  # cached and shared between words
    return Ink(alpha, -baseline, (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1))


def font_extent(font: Font, height: float, bold: bool) -> tuple[int, int]:
    """Rows above and below the baseline that any word of this font and size may ink."""
    ink = render_ink(_REFERENCE, font, height, bold)
    assert ink is not None
    return -(ink.top + ink.box[1]), ink.top + ink.box[3]


def layout_receipt(
    rng: np.random.Generator, width: int, height: int, body_h: float
) -> tuple[npt.NDArray[np.float32], list[PaperWord]]:
    """Lay out and rasterise one receipt on ``height`` x ``width`` px paper (body cap height ``body_h``): the
    (height, width) float32 ink alpha in [0, 1] and the words in paper px."""
    fonts = available_fonts()[: len(_HERSHEY) + _BASIC_TTF]
    main = fonts[int(rng.integers(len(fonts)))]
    header = main if rng.random() < 0.5 else fonts[int(rng.integers(len(fonts)))]
    style = PageStyle(main, header, body_h, float(rng.uniform(0.7, 1.1)), float(rng.uniform(0.55, 0.9)))
    alpha = np.zeros((height, width), np.float32)
    margin_x = int(width * rng.uniform(0.05, 0.1))
    y = float(height * rng.uniform(0.03, 0.06))
    bottom = height - height * rng.uniform(0.02, 0.05)
    lines = _fit_lines(rng, style, bottom - y, width - 2 * margin_x)
    for line in lines:
        y = _draw_line(rng, alpha, line, style, y, margin_x, width - margin_x)
    return alpha, style.words


def _pitch(line: Line, style: PageStyle) -> float:
    if line.align in ("rule", "barcode"):
        return style.body_h * (1.0 if line.align == "rule" else 3.0) + style.gap_y * style.body_h
    above, below = font_extent(style.font_for(line.size), style.body_h * line.size, line.bold)
    return above + below + style.gap_y * style.body_h * line.size


def _fit_lines(rng: np.random.Generator, style: PageStyle, space: float, text_w: float) -> list[Line]:
    """Receipt lines whose pitches fit ``space``: optional lines make room for a few items, items fill it."""
    head, item_fn, tail = receipt_lines(rng, max(8, int(text_w / (0.75 * style.body_h))))
    min_items = int(rng.integers(3, 9))
    while True:
        fixed = [*head, *tail]
        item_pitch = _pitch(Line(["X"]), style)
        while sum(_pitch(ln, style) for ln in fixed) + min_items * item_pitch > space:
            optional = [i for i, ln in enumerate(fixed) if ln.optional]
            if not optional:
                break
            fixed.pop(optional[int(rng.integers(len(optional)))])
        room = space - sum(_pitch(ln, style) for ln in fixed)
        if room >= min(min_items, 3) * item_pitch or style.body_h < 6:
            break
        style.body_h *= 0.92
    items, amounts = item_fn(max(1, int(room // item_pitch * rng.uniform(0.85, 1.0))))
    return [
        *(ln for ln in fixed if ln in head),
        *items,
        *(ln.with_amounts(amounts) for ln in fixed if ln in tail),
    ]


def _draw_line(
    rng: np.random.Generator, alpha: np.ndarray, line: Line, style: PageStyle, y: float, x0: int, x1: int
) -> float:
    """Draw one line with its top at ``y``; returns the top of the next line."""
    pitch = _pitch(line, style)
    if y + pitch > alpha.shape[0]:
        return y + pitch
    if line.align == "rule":
        draw_rule(rng, alpha, int(y + style.body_h * 0.5), x0, x1)
        return y + pitch
    if line.align == "barcode":
        draw_barcode(rng, alpha, int(y), int(style.body_h * 2.5), x0, x1)
        return y + pitch
    font, h = style.font_for(line.size), style.body_h * line.size
    baseline = int(round(y + font_extent(font, h, line.bold)[0]))
    gap = style.gap_x * h
    left = [w for w in (_word(rng, t, font, h, line) for t in line.left) if w is not None]
    right = [w for w in (_word(rng, t, font, h, line) for t in line.right) if w is not None]
    if right:
        right = _fit(right, x1 - x0, gap, keep_end=True)
        start = x1 - span(right, gap)
        place_words(alpha, right, start, baseline, gap, style)
        left = _fit(left, start - gap - x0, gap, line.keep_end)
        place_words(alpha, left, x0, baseline, gap, style)
        return y + pitch
    left = _fit(left, x1 - x0, gap, line.keep_end)
    slack = x1 - x0 - span(left, gap)
    start = x0 + (slack / 2 if line.align == "center" else float(rng.uniform(0, min(slack, h))))
    place_words(alpha, left, start, baseline, gap, style)
    return y + pitch


def _word(rng: np.random.Generator, text: str, font: Font, h: float, line: Line) -> InkWord | None:
    if line.ignore:
        ink = render_ink(text, font, max(3.0, h), False)
        return None if ink is None else (text, ink, True)
    ink = render_ink(text, font, h, line.bold)
    if ink is None:
        return None
    if rng.random() < 0.02:  # smudged: still ink on paper, but illegible, so a don't-care region
        sigma = max(1.0, h / 4)
        smeared = cv2.GaussianBlur(ink.alpha, (0, 0), sigma) * float(rng.uniform(0.4, 0.7))
        return text, Ink(smeared, ink.top, ink.box), True
    return text, ink, False


def span(words: list[InkWord], gap: float) -> float:
    return sum(ink.box[2] - ink.box[0] for _, ink, _ in words) + gap * max(0, len(words) - 1)


def _fit(words: list[InkWord], room: float, gap: float, keep_end: bool) -> list[InkWord]:
    while words and span(words, gap) > room:
        words = words[1:] if keep_end else words[:-1]
    return words


def place_words(
    alpha: np.ndarray, words: list[InkWord], x: float, baseline: int, gap: float, style: PageStyle
) -> None:
    height, width = alpha.shape
    for text, ink, ignore in words:
        bx0, by0, bx1, by1 = ink.box
        ox, oy = int(round(x)) - bx0, baseline + ink.top
        x += bx1 - bx0 + gap
        if ox + bx0 < 0 or oy + by0 < 0 or ox + bx1 > width or oy + by1 > height:
            continue  # a word must lie wholly on the paper to be annotated
        stamp_patch(alpha, ink.alpha, ox, oy)
        pts = np.array([[bx0, by0], [bx1, by0], [bx1, by1], [bx0, by1]], np.float32) + (ox, oy)
        style.words.append(PaperWord(pts, "###" if ignore else text, ignore, style.groups))
    style.groups += 1


def merge_groups(words: list[PaperWord]) -> list[PaperWord]:
    """Line granularity: each group of consecutive words becomes one exact box around them (axis-aligned
    words), a don't-care region when any of its words is illegible."""
    merged: list[PaperWord] = []
    for group, members in itertools.groupby(words, key=lambda w: w.group):
        parts = list(members)
        pts = np.concatenate([w.points for w in parts])
        (x0, y0), (x1, y1) = pts.min(axis=0), pts.max(axis=0)
        box = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)
        ignore = any(w.ignore for w in parts)
        text = "###" if ignore else " ".join(w.text for w in parts)
        merged.append(PaperWord(box, text, ignore, group))
    return merged
