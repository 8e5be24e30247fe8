"""Ink that is not text and gets no box: rules, barcodes, QR-like codes, logos, stamps, handwriting.

Every function draws into an ink alpha map (h, w) float32 in [0, 1] in place, clipped to the map.
"""

from __future__ import annotations

import cv2
import numpy as np

__all__ = [
    "draw_barcode",
    "draw_handwriting",
    "draw_logo",
    "draw_qr",
    "draw_rule",
    "draw_stamp",
    "stamp_patch",
]


def draw_rule(rng: np.random.Generator, alpha: np.ndarray, y: int, x0: int, x1: int) -> None:
    """A solid, dashed or double-dashed rule at row ``y`` from ``x0`` to ``x1``."""
    kind = int(rng.integers(3))
    if kind == 0:
        alpha[y, x0:x1] = 1.0
        return
    dash, space = int(rng.integers(3, 7)), int(rng.integers(2, 5))
    rows = (y, y + 3) if kind == 2 else (y,)
    for x in range(x0, x1 - dash, dash + space):
        for r in rows:
            alpha[min(r, alpha.shape[0] - 1), x : x + dash] = 1.0


def draw_barcode(rng: np.random.Generator, alpha: np.ndarray, y: int, bar_h: int, x0: int, x1: int) -> None:
    """A centred 1-D barcode ``bar_h`` px tall with its top at ``y``, within ``x0``..``x1``."""
    width = int((x1 - x0) * rng.uniform(0.5, 0.8))
    x = x0 + (x1 - x0 - width) // 2
    end = x + width
    while x < end:
        w = int(rng.integers(1, 4))
        if rng.random() < 0.55:
            alpha[y : y + bar_h, x : min(x + w, end)] = 1.0
        x += w


def draw_qr(rng: np.random.Generator, alpha: np.ndarray, x: int, y: int, size: int) -> None:
    """A QR-like square code (random modules, three finder squares), ``size`` px, top-left at (x, y)."""
    modules = int(rng.integers(21, 34))
    grid = (rng.random((modules, modules)) < 0.5).astype(np.float32)
    for r, c in ((0, 0), (0, modules - 7), (modules - 7, 0)):
        grid[r : r + 7, c : c + 7] = 1.0
        grid[r + 1 : r + 6, c + 1 : c + 6] = 0.0
        grid[r + 2 : r + 5, c + 2 : c + 5] = 1.0
    code = cv2.resize(grid, (size, size), interpolation=cv2.INTER_NEAREST)
    stamp_patch(alpha, code, x, y)


def draw_logo(rng: np.random.Generator, alpha: np.ndarray, cx: int, cy: int, size: int) -> None:
    """A filled emblem (disc, ring, diamond or blob, with a hole), ``size`` px, centred on (cx, cy)."""
    patch = np.zeros((size, size), np.float32)
    r = size // 2
    kind = int(rng.integers(4))
    if kind == 0:
        cv2.circle(patch, (r, r), r - 1, 1.0, -1, cv2.LINE_AA)
    elif kind == 1:
        cv2.circle(patch, (r, r), r - 1, 1.0, max(2, size // 8), cv2.LINE_AA)
    elif kind == 2:
        pts = np.array([[r, 0], [size - 1, r], [r, size - 1], [0, r]], np.int32)
        cv2.fillPoly(patch, [pts], 1.0, cv2.LINE_AA)
    else:
        angles = np.sort(rng.uniform(0, 2 * np.pi, 9))
        radii = r * rng.uniform(0.55, 0.98, 9)
        pts = np.stack([r + radii * np.cos(angles), r + radii * np.sin(angles)], axis=1)
        cv2.fillPoly(patch, [pts.astype(np.int32)], 1.0, cv2.LINE_AA)
    inner = int(r * rng.uniform(0.25, 0.5))
    cv2.circle(patch, (r, r), inner, 0.0, -1, cv2.LINE_AA)
    stamp_patch(alpha, patch, cx - r, cy - r)


def draw_stamp(rng: np.random.Generator, alpha: np.ndarray, cx: int, cy: int, size: int) -> None:
    """A rubber stamp: a double ring or frame with hatched 'lettering' in it, rotated, unevenly inked."""
    patch = np.zeros((size, size), np.float32)
    r, t = size // 2, max(1, size // 40)
    if rng.random() < 0.5:
        cv2.circle(patch, (r, r), r - t - 1, 1.0, t, cv2.LINE_AA)
        cv2.circle(patch, (r, r), int(r * 0.72), 1.0, t, cv2.LINE_AA)
        for angle in np.linspace(0, 2 * np.pi, int(rng.integers(12, 24)), endpoint=False):
            p = r + int(r * 0.86 * np.cos(angle)), r + int(r * 0.86 * np.sin(angle))
            cv2.circle(patch, p, max(1, size // 30), 1.0, -1, cv2.LINE_AA)
    else:
        h = int(size * rng.uniform(0.35, 0.6))
        top = (size - h) // 2
        cv2.rectangle(patch, (t, top), (size - t - 1, top + h), 1.0, t + 1, cv2.LINE_AA)
        for x in range(3 * t + 3, size - 3 * t - 3, max(3, size // 16)):
            y0 = top + h // 4
            cv2.line(patch, (x, y0), (x + int(rng.integers(0, 4)), top + 3 * h // 4), 1.0, t, cv2.LINE_AA)
    rot = cv2.getRotationMatrix2D((r, r), float(rng.uniform(-40, 40)), 1.0)
    turned = cv2.warpAffine(patch, rot, (size, size))
    # uneven inking: a coarse random field stretched over the stamp
    inking = cv2.resize(rng.uniform(0.3, 1.0, (4, 4)).astype(np.float32), (size, size))
    stamp_patch(alpha, turned * inking, cx - r, cy - r)


def draw_handwriting(
    rng: np.random.Generator, alpha: np.ndarray, x: int, y: int, width: int, height: int
) -> None:
    """Pen strokes in a ``width`` x ``height`` box at (x, y): scrawl, circle, tick or signature."""
    t = np.linspace(0, 1, 120)
    kind = int(rng.integers(3))
    if kind == 0:  # cursive-like loops along a baseline
        loops = rng.uniform(3, 9)
        xs = t * width + np.sin(t * loops * 2 * np.pi) * width / (loops * 3)
        ys = height * (0.5 - 0.35 * np.cos(t * loops * 2 * np.pi) * rng.uniform(0.6, 1.0))
    elif kind == 1:  # an ellipse around something, not quite closed
        angle = np.linspace(0, 2 * np.pi * rng.uniform(0.9, 1.1), 120)
        xs = width / 2 * (1 + 0.95 * np.cos(angle))
        ys = height / 2 * (1 + 0.9 * np.sin(angle))
    else:  # tick or a scribbled signature
        knots = rng.uniform(0, 1, (int(rng.integers(3, 7)), 2)) * (width, height)
        seg = np.interp(t * (len(knots) - 1), np.arange(len(knots)), np.arange(len(knots)))
        xs = np.interp(seg, np.arange(len(knots)), knots[:, 0])
        ys = np.interp(seg, np.arange(len(knots)), knots[:, 1])
    pts = np.stack([xs + x, ys + y], axis=1).round().astype(np.int32)
    thickness = max(1, int(round(min(width, height) * rng.uniform(0.03, 0.08))))
    cv2.polylines(alpha, [pts], False, 1.0, thickness, cv2.LINE_AA)


def stamp_patch(alpha: np.ndarray, patch: np.ndarray, x: int, y: int) -> None:
    """Max-composite ``patch`` onto ``alpha`` with its top-left at (x, y), clipped to the map."""
    h, w = alpha.shape
    ph, pw = patch.shape
    ys, xs = slice(max(y, 0), min(y + ph, h)), slice(max(x, 0), min(x + pw, w))
    if ys.start >= ys.stop or xs.start >= xs.stop:
        return
    sub = patch[ys.start - y : ys.stop - y, xs.start - x : xs.stop - x]
    np.maximum(alpha[ys, xs], sub, out=alpha[ys, xs])
