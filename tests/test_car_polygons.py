"""The fast CarRacing renderer's polygon geometry (wm/envs/car_polygons.py), written out for speed, against the
straightforward loops it replaced: the same floating-point operations, so the same pixels, on polygons of every
kind (convex either way round, junk, repeated and collinear vertices, rounding ties, slivers, far away)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wm.envs import car_polygons as cp

pytestmark = pytest.mark.env  # gymnasium's Box2D CarRacing module


def _reference_pixels(p, ix, edges=None):
    """`_pixels` as first written: normals with their signs, every branch computed and selected."""
    n_v = p.shape[1]
    nxt, prv = np.r_[1:n_v, 0], np.r_[n_v - 1, 0 : n_v - 1]
    x, y = p[..., 0], p[..., 1]
    xn, yn = x[:, nxt], y[:, nxt]
    ex, ey = xn - x, yn - y
    area = (x * yn - xn * y).sum(1)
    sgn = np.where(area > 0, -1.0, 1.0)[:, None]
    nx, ny = sgn * ey, -sgn * ex
    d = ix * np.abs(ey) if edges is None else ix * np.abs(ey) * edges
    nx0, ny0, d0 = nx[:, prv], ny[:, prv], d[:, prv]
    det = nx0 * ny - ny0 * nx
    ok = np.abs(det) > 1e-9 * (ex * ex + ey * ey) + 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(ok, 1.0 / det, 0.0)
        n2 = np.maximum(nx * nx + ny * ny, 1e-12)
        dx = np.where(ok, (d0 * ny - d * ny0) * inv, d * nx / n2)
        dy = np.where(ok, (nx0 * d - nx * d0) * inv, d * ny / n2)
    qx = x + dx.clip(-2 * ix, 2 * ix)
    qy = y + dy.clip(-2 * ix, 2 * ix)
    keep = np.flatnonzero(area * (qx * qy[:, nxt] - qx[:, nxt] * qy).sum(1) > 0)
    pts = np.rint(np.stack([qx[keep], qy[keep]], -1) - 0.5).clip(-30000, 30000).astype(np.int32).tolist()
    return list(zip(keep.tolist(), pts, strict=True))


def _reference_inset(poly, ix):
    n = len(poly)
    area, edges = 0.0, []
    for k in range(n):
        (x, y), (xn, yn) = poly[k], poly[(k + 1) % n]
        area += x * yn - xn * y
        edges.append((xn - x, yn - y))
    if area == 0:
        return None
    sgn, lim, out = (-1.0 if area > 0 else 1.0), 2 * ix, []
    for k in range(n):
        (ex0, ey0), (ex, ey) = edges[k - 1], edges[k]
        nx0, ny0, d0 = sgn * ey0, -sgn * ex0, ix * abs(ey0)
        nx, ny, d = sgn * ey, -sgn * ex, ix * abs(ey)
        det = nx0 * ny - ny0 * nx
        if abs(det) > 1e-9 * (ex * ex + ey * ey) + 1e-12:
            dx, dy = (d0 * ny - d * ny0) / det, (nx0 * d - nx * d0) / det
        else:
            n2 = max(nx * nx + ny * ny, 1e-12)
            dx, dy = d * nx / n2, d * ny / n2
        out.append((poly[k][0] + min(max(dx, -lim), lim), poly[k][1] + min(max(dy, -lim), lim)))
    if area * sum(out[k][0] * out[(k + 1) % n][1] - out[(k + 1) % n][0] * out[k][1] for k in range(n)) <= 0:
        return None
    return [(min(max(round(x - 0.5), -30000), 30000), min(max(round(y - 0.5), -30000), 30000)) for x, y in out]


def _reference_parallelogram(px, py, ax, ay, bx, by, ix):
    c = ax * by - ay * bx
    if c == 0:
        return None
    fa, fb = ix * abs(ay) / abs(c), ix * abs(by) / abs(c)
    dax, day, dbx, dby, lim = fa * bx, fa * by, -fb * ax, -fb * ay, 2 * ix
    q = []
    for x, y, sa, sb in (
        (px, py, 1, -1),
        (px + ax, py + ay, 1, 1),
        (px + ax + bx, py + ay + by, -1, 1),
        (px + bx, py + by, -1, -1),
    ):
        q.append((x + min(max(sa * dax + sb * dbx, -lim), lim), y + min(max(sa * day + sb * dby, -lim), lim)))
    if c * sum(q[k][0] * q[k - 3][1] - q[k - 3][0] * q[k][1] for k in range(4)) <= 0:
        return None
    return [(min(max(round(x - 0.5), -30000), 30000), min(max(round(y - 0.5), -30000), 30000)) for x, y in q]


IXS = [0.5 - 0.5 * 0.096 * ss for ss in (2, 4, 8)] + [0.5, 0.0]


def _polygon_sets(rng, n):
    """Convex polygons of 4 and 8 vertices either way round, junk, repeated and collinear vertices, half-integer
    vertices (rounding ties), slivers, far-away ones (the ±30000 clamp)."""
    for trial in range(n):
        nv, count, kind = int(rng.choice([4, 8])), int(rng.integers(1, 40)), trial % 6
        if kind == 0:
            ang = np.sort(rng.uniform(0, 2 * np.pi, (count, nv)), 1) * rng.choice([1, -1], (count, 1))
            p = np.stack([np.cos(ang), np.sin(ang)], -1) * rng.uniform(0.1, 300, (count, 1, 2)) + rng.uniform(
                -500, 1000, (count, 1, 2)
            )
        elif kind == 1:
            p = rng.normal(0, 100, (count, nv, 2))
        elif kind == 2:
            p = rng.normal(0, 100, (count, nv, 2))
            p[:, 1] = p[:, 0]
            p[::2, 2] = 2 * p[::2, 1] - p[::2, 0]
        elif kind == 3:
            p = rng.integers(-400, 800, (count, nv, 2)) + 0.5
        elif kind == 4:
            p = rng.uniform(0, 700, (count, 1, 2)) + rng.normal(0, 1, (count, nv, 2)) * [[50, 1e-3]]
        else:
            p = rng.normal(0, 1, (count, nv, 2)) * 100 + rng.choice([-1, 1], (count, 1, 2)) * 40000
        yield p, float(rng.choice(IXS)), (None if trial % 2 else rng.integers(0, 2, (count, nv)).astype(float))


def test_pixels_is_the_plain_computation():
    with np.errstate(all="ignore"):
        for p, ix, edges in _polygon_sets(np.random.default_rng(0), 600):
            assert cp._pixels(p, ix, edges) == _reference_pixels(p, ix, edges)


def test_inset_and_parallelogram_are_the_plain_loops():
    rng = np.random.default_rng(1)
    for p, ix, _ in _polygon_sets(rng, 600):
        for poly in p[:3]:
            poly = [tuple(v) for v in poly.tolist()]
            assert cp._inset(poly, ix) == _reference_inset(poly, ix)
    for trial in range(20000):
        a = (rng.normal(size=6) * [1.0, 10.0, 100.0, 1e5][trial % 4]).tolist()
        if trial % 7 == 0:
            a[2 + trial % 4] = 0.0
        if trial % 5 == 0:
            a = [round(v) + 0.5 for v in a]
        ix = IXS[trial % 3]
        assert cp._inset_parallelogram(*a, ix) == _reference_parallelogram(*a, ix)
    # a wheel turning: the shapes the renderer draws
    for ang in np.linspace(0, 2 * math.pi, 200):
        c, s = math.cos(ang), math.sin(ang)
        args = (95.3 + 7 * c, 140.1 - 5 * s, 0.8 * c, -0.8 * s, 2.1 * s, 2.6 * c)
        assert cp._inset_parallelogram(*args, IXS[0]) == _reference_parallelogram(*args, IXS[0])
