"""The polygon geometry of the fast CarRacing renderer (`wm.envs.car_render`): the camera applied to world
vertices, gymnasium's wheel band, whether the playfield covers the frame, and pygame's fill rule corrected on the
small surface (`_pixels`: polygons inset by the window's widening, so the box-averaged frame matches the window's
smoothscale). Pure functions of NumPy arrays and floats, with no pygame surface."""

from __future__ import annotations

import math

import numpy as np
from gymnasium.envs.box2d.car_racing import PLAYFIELD


def _rgb(color) -> tuple[int, int, int]:
    return int(color[0]), int(color[1]), int(color[2])


def _apply(polys: np.ndarray, cam) -> np.ndarray:
    ox, oy, ax, bx, ay, by = cam
    x, y = polys[..., 0], polys[..., 1]
    return np.stack([ox + ax * x + bx * y, oy + ay * x + by * y], -1)


def _phase_band(phase: float) -> tuple[float, float] | None:
    """The grey band gymnasium draws on a wheel for its rotation phase: its ends (c1, c2) along the wheel, in units
    of the wheel's radius (from −1 to 1), or None."""
    s1, s2 = math.sin(phase), math.sin(phase + 1.2)
    if s1 > 0 and s2 > 0:
        return None
    c1, c2 = math.cos(phase), math.cos(phase + 1.2)
    if s1 > 0:
        c1 = float((c1 > 0) - (c1 < 0))  # np.sign, without NumPy's per-call cost
    if s2 > 0:
        c2 = float((c2 > 0) - (c2 < 0))
    return c1, c2


def _field_covers(cam, w: float, h: float) -> bool:
    """Whether the PLAYFIELD square covers the surface rectangle [0, w] × [0, h] (its corners mapped back to the world)."""
    ox, oy, ax, bx, ay, by = cam
    det = ax * by - bx * ay
    for X, Y in ((0.0, 0.0), (w, 0.0), (w, h), (0.0, h)):
        u, v = X - ox, Y - oy
        if abs((by * u - bx * v) / det) > PLAYFIELD or abs((ax * v - ay * u) / det) > PLAYFIELD:
            return False
    return True


_NEXT = {n: np.r_[1:n, 0] for n in (4, 8)}  # vertex k → k + 1 (polygons here have 4 or 8 vertices)
_PREV = {n: np.r_[n - 1, 0 : n - 1] for n in (4, 8)}


def _pixels(p: np.ndarray, ix: float, edges: np.ndarray | None = None) -> list[tuple[int, list]]:
    """Convex polygons (N, V, 2) in surface coordinates → [(n, integer vertices)] for pygame's polygon fills.

    pygame fills a pixel when its integer corner point lies in the polygon with integer vertices, both ends
    included, so every scanline comes out one pixel too wide on average. Moving each edge inward by ix·|n_x| (n its
    unit normal: the Minkowski difference with the segment [−ix, ix] × {0}) shortens every scanline by 2·ix; ix = 1/2
    makes it a centre-sampled fill, and a little less keeps gymnasium's own widening by one window pixel. `edges`
    (N, V) of 0/1 says which edges move (edge k runs from vertex k to k+1): seams between road tiles stay put, or
    the background would show through the gap. Polygons that this turns inside out are dropped.
    """
    n_v = p.shape[1]
    nxt, prv = _NEXT[n_v], _PREV[n_v]
    x, y = p[..., 0], p[..., 1]
    xn, yn = x[:, nxt], y[:, nxt]
    ex, ey = xn - x, yn - y
    area = (x * yn - xn * y).sum(1)
    sgn = np.where(area > 0, -1.0, 1.0)[:, None]
    nx, ny = sgn * ey, -sgn * ex  # inward normal of edge k, |n| = the edge's length
    d = ix * np.abs(ey) if edges is None else ix * np.abs(ey) * edges  # edge k moves to n·δ = d (= ix·|n_x|·|n|)
    nx0, ny0, d0 = nx[:, prv], ny[:, prv], d[:, prv]  # vertex k is on edges k−1 and k
    det = nx0 * ny - ny0 * nx
    ok = np.abs(det) > 1e-9 * (ex * ex + ey * ey) + 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(ok, 1.0 / det, 0.0)
        n2 = np.maximum(nx * nx + ny * ny, 1e-12)
        dx = np.where(ok, (d0 * ny - d * ny0) * inv, d * nx / n2)
        dy = np.where(ok, (nx0 * d - nx * d0) * inv, d * ny / n2)
    lim = 2 * ix  # a sharp vertex would shoot far along its bisector
    qx = x + dx.clip(-lim, lim)
    qy = y + dy.clip(-lim, lim)
    area2 = (qx * qy[:, nxt] - qx[:, nxt] * qy).sum(1)
    keep = np.flatnonzero(area * area2 > 0)
    q = np.stack([qx[keep], qy[keep]], -1)
    pts = np.rint(q - 0.5).clip(-30000, 30000).astype(np.int32).tolist()
    return list(zip(keep.tolist(), pts, strict=True))


def _inset(poly: list[tuple[float, float]], ix: float) -> list[tuple[int, int]] | None:
    """`_pixels` for one small convex polygon with every edge moving, in plain Python (the car's few quads a frame:
    cheaper than NumPy's per-call overhead); None where the polygon turns inside out or has no area."""
    n = len(poly)
    area = 0.0
    edges = []
    for k in range(n):
        x, y = poly[k]
        xn, yn = poly[(k + 1) % n]
        area += x * yn - xn * y
        edges.append((xn - x, yn - y))
    if area == 0:
        return None
    sgn = -1.0 if area > 0 else 1.0
    lim = 2 * ix
    out = []
    for k in range(n):
        ex0, ey0 = edges[k - 1]
        ex, ey = edges[k]
        nx0, ny0, d0 = sgn * ey0, -sgn * ex0, ix * abs(ey0)
        nx, ny, d = sgn * ey, -sgn * ex, ix * abs(ey)
        det = nx0 * ny - ny0 * nx
        if abs(det) > 1e-9 * (ex * ex + ey * ey) + 1e-12:
            dx, dy = (d0 * ny - d * ny0) / det, (nx0 * d - nx * d0) / det
        else:
            n2 = max(nx * nx + ny * ny, 1e-12)
            dx, dy = d * nx / n2, d * ny / n2
        x, y = poly[k]
        out.append((x + min(max(dx, -lim), lim), y + min(max(dy, -lim), lim)))
    area2 = sum(out[k][0] * out[(k + 1) % n][1] - out[(k + 1) % n][0] * out[k][1] for k in range(n))
    if area * area2 <= 0:
        return None
    return [(min(max(round(x - 0.5), -30000), 30000), min(max(round(y - 0.5), -30000), 30000)) for x, y in out]


def _inset_parallelogram(px: float, py: float, ax: float, ay: float, bx: float, by: float, ix: float) -> list | None:
    """`_inset` for the parallelogram p, p + a, p + a + b, p + b: the inset moves its corners by ±δa ± δb, δa along b
    (the edges along a moving in by ix·|a_y|/|a × b| of b) and δb along a; None where it turns inside out."""
    c = ax * by - ay * bx
    if c == 0:
        return None
    ac = abs(c)
    fa, fb = ix * abs(ay) / ac, ix * abs(by) / ac
    dax, day, dbx, dby = fa * bx, fa * by, -fb * ax, -fb * ay
    lim = 2 * ix
    q = []
    corners = ((px, py, 1, -1), (px + ax, py + ay, 1, 1), (px + ax + bx, py + ay + by, -1, 1), (px + bx, py + by, -1, -1))
    for x, y, sa, sb in corners:
        q.append((x + min(max(sa * dax + sb * dbx, -lim), lim), y + min(max(sa * day + sb * dby, -lim), lim)))
    area2 = sum(q[k][0] * q[k - 3][1] - q[k - 3][0] * q[k][1] for k in range(4))
    if c * area2 <= 0:
        return None
    return [(min(max(round(x - 0.5), -30000), 30000), min(max(round(y - 0.5), -30000), 30000)) for x, y in q]
