"""Per-box quantities of competition-mode CLEval, as the receipt competition's scorer computes them.

That scorer (docs/metrics.md) reads every box as a polygon of float32 coordinates:
- its aspect ratio is length_orthogonal / length_parallel of a minimum-area rectangle found by trying each
  convex-hull edge in the order scipy's qhull lists the hull; ties go to the first edge, so an axis-aligned
  rectangle is read along whichever of its sides qhull lists first. That order is reproduced here from
  qhull's initial triangle: the listing starts at its first edge that stays on the hull, in the direction
  the triangle's orientation gives (checked against scipy in tests/metrics/cleval/test_competition.py);
- a box that is flat after rounding to integers, or whose hull qhull rejects, gets aspect ratio 0;
- the float32 arithmetic is kept, so values on a rounding boundary fall the same way;
- pseudo-character centres interpolate the first half of the points (top edge) and the second half
  reversed (bottom edge), truncating the interpolated points to integers.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = [
    "COMPETITION_MAX_CHARS",
    "COMPETITION_MIN_POINTS",
    "min_area_aspect_ratios",
    "pseudo_char_counts",
    "fp_char_counts",
    "pseudo_char_centres",
]

COMPETITION_MAX_CHARS = 100
COMPETITION_MIN_POINTS = 4  # the scorer skips polygons with fewer points
_EPS32 = np.finfo(np.float32).eps
_RATIO_MAXSIMPLEX = 1e-3  # qhull's qh_RATIOmaxsimplex: a narrower initial triangle makes it search all points

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
IntArr = npt.NDArray[np.intp]

# Start vertex of the hull listing: [head facet][flipped] -> simplex slot (0 minx, 1 maxx, 2 third), for the
# facets (maxx, minx), (third, minx), (third, maxx) in qhull's facet-list order.
_START_SLOT = np.array([[1, 0], [0, 2], [2, 1]])


def _cross(o: F64, a: F64, b: F64) -> F64:
    return (a[..., 0] - o[..., 0]) * (b[..., 1] - o[..., 1]) - (a[..., 1] - o[..., 1]) * (
        b[..., 0] - o[..., 0]
    )


def _qhull_det(p_min: F64, p_max: F64, p: F64) -> F64:
    """|det| qhull ranks candidate third vertices by (its qh_detsimplex operand order)."""
    a, b = p_min - p, p_max - p
    return np.abs(a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0])


def _initial_simplex(pts: F64) -> tuple[IntArr, IntArr, IntArr]:
    """(n,) indices of qhull's initial triangle (min x, max x, third) for (n, K, 2) points.

    Ties go to the first point; the third is the larger-|det| of the min-y and max-y points (min-y on a
    tie) unless both are taken or the triangle is too narrow, then the first point in input order whose
    |det| beats the best so far and exceeds 1 % of x-extent x widest extent, else the largest.
    """
    n, k = pts.shape[:2]
    rows = np.arange(n)
    minx, maxx = pts[..., 0].argmin(axis=1), pts[..., 0].argmax(axis=1)
    p_min, p_max = pts[rows, minx], pts[rows, maxx]
    target = (p_max[:, 0] - p_min[:, 0]) * np.ptp(pts, axis=1).max(axis=1)
    third = np.full(n, -1)
    best = np.full(n, -1.0)
    for cand in (pts[..., 1].argmin(axis=1), pts[..., 1].argmax(axis=1)):
        det = np.where((cand != minx) & (cand != maxx), _qhull_det(p_min, p_max, pts[rows, cand]), -1.0)
        better = det > best
        third, best = np.where(better, cand, third), np.where(better, det, best)
    searching = (third < 0) | (best < _RATIO_MAXSIMPLEX * target)
    if not searching.any():
        return minx, maxx, third
    # qhull scans the points in order and stops at the first beating the best so far by more than
    # mindet; the best so far is below mindet here, so that is the first point above mindet.
    mindet = 10 * _RATIO_MAXSIMPLEX * target
    dets = _qhull_det(p_min[:, None], p_max[:, None], pts)  # (n, K)
    cols = np.arange(k)[None, :]
    eligible = searching[:, None] & (cols != minx[:, None]) & (cols != maxx[:, None])
    big = eligible & (dets > mindet[:, None])
    scores = np.where(eligible, dets, -np.inf)
    top = scores.argmax(axis=1)
    pick = np.where(scores[rows, top] > best, top, third)
    return minx, maxx, np.where(big.any(axis=1), big.argmax(axis=1), pick)


def _hull_ccw(points: F64) -> F64:
    """Convex hull vertices counter-clockwise (positive shoelace area), collinear points left out."""
    pts = np.unique(points, axis=0)  # sorted by x, then y
    if len(pts) < 3:
        return pts
    chain: list[F64] = []
    for seq in (pts, pts[::-1]):  # lower hull, then upper hull
        part: list[F64] = []
        for p in seq:
            while len(part) >= 2 and _cross(part[-2], part[-1], p) <= 0:
                part.pop()
            part.append(p)
        chain.extend(part[:-1])
    return np.array(chain)


def _polygon_cycle(points: F64) -> F64 | None:
    """Hull of one polygon as qhull lists it, or None where qhull fails (flat point set). The listing starts
    where qhull's first facet starts when one of its initial edges survives on the hull (always for 4 points);
    otherwise qhull's later facet order decides and the hull is started at its left-most vertex: then an exact
    tie between hull edges may be read differently from the scorer."""
    hull = _hull_ccw(points)
    if len(hull) < 3:
        return None
    minx, maxx, third = (int(i[0]) for i in _initial_simplex(points[None]))
    simplex = points[[minx, maxx, third]]
    flipped = _cross(simplex[1], simplex[0], simplex[2]) < 0
    nxt = np.roll(hull, -1, axis=0)
    for facet, (a, b) in enumerate(((1, 0), (2, 0), (2, 1))):
        ends = simplex[[a, b]]
        for u, v in (ends, ends[::-1]):
            if (np.all(hull == u, axis=1) & np.all(nxt == v, axis=1)).any():
                first = simplex[_START_SLOT[facet, int(flipped)]]
                return np.roll(hull, -int(np.flatnonzero(np.all(hull == first, axis=1))[0]), axis=0)
    return hull


def _edge_sides(cycle: F64, count: IntArr) -> tuple[F32, F32, F32]:
    """(n, M) float32 length along each edge, length across it and their product (inf on padding edges) of
    the bounding rectangle of each (n, M, 2) hull along each of its ``count`` edges, as the scorer computes
    it (an edge's direction does not matter: reversing it negates every projection exactly)."""
    pts = cycle.astype(np.float32)
    m = cycle.shape[1]
    if (count == m).all():
        nxt = np.roll(pts, -1, axis=1)
    else:
        nxt = np.take_along_axis(pts, ((np.arange(m)[None, :] + 1) % count[:, None])[..., None], axis=1)
    step = nxt - pts  # (n, M, 2) edge vectors
    # math.sqrt of the float32 sum of squares, then float32 division, as in the scorer
    length = np.sqrt((step[..., 0] * step[..., 0] + step[..., 1] * step[..., 1]).astype(np.float64))
    length = np.where(length > 0, length, 1).astype(np.float32)  # zero only on padding edges
    ux, uy = step[..., 0] / length, step[..., 1] / length  # (n, M)
    x, y = pts[:, None, :, 0], pts[:, None, :, 1]  # (n, 1, M)
    along = ux[..., None] * x + uy[..., None] * y  # (n, M edges, M points)
    across = (-uy)[..., None] * x + ux[..., None] * y
    len_p = along.max(axis=2) - along.min(axis=2)
    len_o = across.max(axis=2) - across.min(axis=2)
    area = len_p * len_o
    if not (count == m).all():
        area = np.where(np.arange(m)[None, :] < count[:, None], area, np.float32(np.inf))
    return len_p, len_o, area


def _ratio(len_p: F32, len_o: F32, best: IntArr) -> F32:
    """(n,) across / (along + eps) of edge ``best`` of each row, capped at 100."""
    best = best[:, None]
    len_p, len_o = np.take_along_axis(len_p, best, 1)[:, 0], np.take_along_axis(len_o, best, 1)[:, 0]
    return np.minimum(len_o / (len_p + _EPS32), np.float32(COMPETITION_MAX_CHARS))


def _convex_quad_ratios(quads: F64, ccw: npt.NDArray[np.bool_]) -> F32:
    """Aspect ratios of strictly convex (n, 4, 2) quads, listed counter-clockwise when ``ccw``. The hull is
    the quad itself; where the smallest rectangle is tied between edges (a rectangle: read along its width or
    its height), the first in qhull's listing wins."""
    len_p, len_o, area = _edge_sides(quads, np.full(len(quads), 4))
    tied = area == area.min(axis=1, keepdims=True)
    best = tied.argmax(axis=1)
    amb = np.flatnonzero(tied.sum(axis=1) > 1)
    if amb.size:
        sub = quads[amb]
        rows = np.arange(amb.size)
        minx, maxx, third = _initial_simplex(sub)
        flipped = _cross(sub[rows, maxx], sub[rows, minx], sub[rows, third]) < 0
        # qhull's first facet is the first initial edge that stays on the hull: a side of the quad.
        head = np.where((maxx - minx) % 2 == 1, 0, np.where((third - minx) % 2 == 1, 1, 2))
        start = np.choose(_START_SLOT[head, flipped.astype(int)], (minx, maxx, third))[:, None]
        edge = np.arange(4)[None, :]
        rank = np.where(ccw[amb, None], (edge - start) % 4, (start - 1 - edge) % 4)
        best[amb] = np.where(tied[amb], rank, 4).argmin(axis=1)
    return _ratio(len_p, len_o, best)


def min_area_aspect_ratios(verts: F64, counts: IntArr) -> F32:
    """(N,) float32 aspect ratios, across / along of each (Kmax, 2) padded polygon's minimum-area rectangle
    (at most 100; ``counts`` >= 4 points), 0 where it is flat after rounding to integers or collinear."""
    n = len(counts)
    ar = np.zeros(n, dtype=np.float32)
    if n == 0:
        return ar
    span = np.ptp(np.rint(verts), axis=1)  # padding repeats a vertex: spans unchanged
    flat = (span == 0).any(axis=1)
    quads = verts[:, :4]
    turns = _cross(quads, np.roll(quads, -1, axis=1), np.roll(quads, -2, axis=1))  # (N, 4)
    is_quad = (counts == 4) & ~flat
    convex = is_quad & ((turns > 0).all(axis=1) | (turns < 0).all(axis=1))
    if convex.all():
        return _convex_quad_ratios(quads, turns[:, 0] > 0)
    idx = np.flatnonzero(convex)
    if idx.size:
        ar[idx] = _convex_quad_ratios(quads[idx], turns[idx, 0] > 0)
    # Everything else (concave or crossed quads, more points, collinear or repeated points) one polygon
    # at a time: rare.
    rest, cycles = [], []
    for i in np.flatnonzero(~convex & ~flat):
        cycle = _polygon_cycle(verts[i, : counts[i]])
        if cycle is not None:
            rest.append(i)
            cycles.append(cycle)
    if rest:
        hull_count = np.array([len(c) for c in cycles])
        padded = np.stack(
            [np.concatenate([c, np.repeat(c[:1], hull_count.max() - len(c), 0)]) for c in cycles]
        )
        ar[rest] = _hull_ratios(padded, hull_count)
    return ar


def _hull_ratios(cycle: F64, count: IntArr) -> F32:
    """Aspect ratios of hulls in qhull's listing order (see :func:`_edge_sides`)."""
    len_p, len_o, area = _edge_sides(cycle, count)
    return _ratio(len_p, len_o, area.argmin(axis=1))


def pseudo_char_counts(ar: F32) -> npt.NDArray[np.int64]:
    """Characters of every GT box: min(round(0.5 + max(ar, 1 / (ar + eps))), 100) in float32, half to even."""
    value = np.float32(0.5) + np.maximum(ar, np.float32(1) / (ar + _EPS32))
    return np.minimum(np.rint(value), COMPETITION_MAX_CHARS).astype(np.int64)


def fp_char_counts(ar: F32) -> npt.NDArray[np.int64]:
    """Characters an unmatched detection costs: min(round(0.5 + 1 / (eps + ar)), 100) in float32."""
    value = np.float32(0.5) + np.float32(1) / (_EPS32 + ar)
    return np.minimum(np.rint(value), COMPETITION_MAX_CHARS).astype(np.int64)


def _chain_points(verts: F64, owner: IntArr, j: IntArr, counts: IntArr, n: IntArr, top: bool) -> F64:
    """Point ``j`` of each centre's top (or bottom) chain in the scorer's interpolation. The chain is the
    first half of the points (top) or the second half reversed (bottom); each of its ``half - 1`` sections is
    cut into ``n`` steps, the inner cut points truncated to integers, and the chain's last point closes it."""
    half = counts // 2
    sections = half - 1
    sec, step = np.divmod(j, n)
    last = j == sections * n
    kmax = verts.shape[1]
    if top:
        base, nxt, end = sec, sec + 1, half - 1
    else:
        base, nxt, end = counts - 1 - sec, counts - 2 - sec, half
    start = verts[owner, np.clip(base, 0, kmax - 1)]
    stop = verts[owner, np.clip(nxt, 0, kmax - 1)]
    inner = np.trunc(start + ((stop - start) / n[:, None]) * step[:, None])
    point = np.where((step == 0)[:, None], start, inner)
    return np.where(last[:, None], verts[owner, end], point)


def _quad_knots(verts: F64, a: int, b: int, knots: IntArr, n: IntArr, step: IntArr) -> F64:
    """:func:`_chain_points` of quads' chain from corner ``a`` to corner ``b`` at every knot."""
    start, stop = np.repeat(verts[:, a], knots, axis=0), np.repeat(verts[:, b], knots, axis=0)
    inner = np.trunc(start + ((stop - start) / n) * step)
    return np.where(step == 0, start, np.where(step == n, stop, inner))


def pseudo_char_centres(verts: F64, counts: IntArr, num_chars: npt.NDArray[np.int64]) -> tuple[F64, IntArr]:
    """(P, 2) pseudo-character centres of (G, Kmax, 2) padded GT polygons with ``num_chars`` characters each,
    grouped by GT, and (P,) the GT of each, as the scorer places them: centre ``c`` averages chain points
    ``c * s`` and ``(c + 1) * s`` of the top and bottom chains (``s`` sections per chain; for a quad, the
    corners of the c-th of ``n`` equal slices, inner corners truncated to integers)."""
    gts = np.arange(len(num_chars))
    knots = num_chars + 1  # chain points 0, s, 2s, ..., n * s of each GT
    knot_owner = np.repeat(gts, knots)
    knot = np.arange(knot_owner.size) - np.repeat(np.cumsum(knots) - knots, knots)
    if (counts == 4).all():  # the common case, in fewer operations: one section per chain
        n, step = np.repeat(num_chars, knots)[:, None], knot[:, None]
        top = _quad_knots(verts, 0, 1, knots, n, step)
        bottom = _quad_knots(verts, 3, 2, knots, n, step)
    else:
        k, n = counts[knot_owner], num_chars[knot_owner]
        j = knot * (k // 2 - 1)
        top = _chain_points(verts, knot_owner, j, k, n, top=True)
        bottom = _chain_points(verts, knot_owner, j, k, n, top=False)
    owner = np.repeat(gts, num_chars)
    first = np.arange(owner.size) + owner  # centre c of GT g sits between knots c and c + 1
    # Summed left to right, as the scorer does, so a centre on a box edge falls the same way.
    return (((top[first] + top[first + 1]) + bottom[first]) + bottom[first + 1]) / 4, owner
