"""The polygon geometry of the fast CarRacing renderer (`wm.envs.car_render`): the playfield and grass polygons, the
camera applied to world vertices, gymnasium's wheel band, whether the playfield covers the frame, and pygame's fill
rule corrected on the small surface (`_pixels`: polygons inset by the window's widening, so the box-averaged frame
matches the window's smoothscale). Pure functions of NumPy arrays and floats, with no pygame surface."""

from __future__ import annotations

import math

import numpy as np
from gymnasium.envs.box2d.car_racing import GRASS_DIM, PLAYFIELD


def _grass_patches() -> np.ndarray:
    """gymnasium's grass squares, (400, 4, 2) world coordinates, in its drawing order."""
    polys = []
    for x in range(-20, 20, 2):
        for y in range(-20, 20, 2):
            x0, y0 = GRASS_DIM * x, GRASS_DIM * y
            polys.append([(x0 + GRASS_DIM, y0), (x0, y0), (x0, y0 + GRASS_DIM), (x0 + GRASS_DIM, y0 + GRASS_DIM)])
    return np.asarray(polys, np.float64)


GRASS = _grass_patches()
FIELD = np.asarray([[(PLAYFIELD, PLAYFIELD), (PLAYFIELD, -PLAYFIELD), (-PLAYFIELD, -PLAYFIELD), (-PLAYFIELD, PLAYFIELD)]])


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
    neg = area > 0
    # With sgn = −1 where area > 0 (else 1), edge k's inward normal is n = (sgn·ey, −sgn·ex) and moves to n·δ = d.
    # The sign flips are exact, so the sums and products below are those of n's, written without it (fewer passes).
    d = ix * np.abs(ey) if edges is None else ix * np.abs(ey) * edges  # edge k moves to n·δ = d (= ix·|n_x|·|n|)
    ex0, ey0, d0 = ex[:, prv], ey[:, prv], d[:, prv]  # vertex k is on edges k−1 and k
    det = ex0 * ey - ey0 * ex  # n₀ × n
    ok = np.abs(det) > 1e-9 * (ex * ex + ey * ey) + 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / det
        np.negative(inv, out=inv, where=neg[:, None])  # sgn / det
        dx = (d * ex0 - d0 * ex) * inv  # (d₀·n_y − d·n₀_y) / det
        dy = (ey0 * d - ey * d0) * inv  # (n₀_x·d − n_x·d₀) / det
        if not ok.all():  # parallel neighbours: move along the edge's own normal
            sgn = np.where(neg, -1.0, 1.0)[:, None]
            nx, ny = sgn * ey, -sgn * ex
            n2 = np.maximum(nx * nx + ny * ny, 1e-12)
            dx = np.where(ok, dx, d * nx / n2)
            dy = np.where(ok, dy, d * ny / n2)
    lim = 2 * ix  # a sharp vertex would shoot far along its bisector
    qx = x + dx.clip(-lim, lim)
    qy = y + dy.clip(-lim, lim)
    area2 = (qx * qy[:, nxt] - qx[:, nxt] * qy).sum(1)
    keep = np.flatnonzero(area * area2 > 0)
    if len(keep) < len(p):
        qx, qy = qx[keep], qy[keep]
    q = np.stack([qx, qy], -1)
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
    lim, nlim = 2 * ix, -2 * ix
    out = []
    ex0, ey0 = edges[-1]
    nx0, ny0, d0 = sgn * ey0, -sgn * ex0, ix * abs(ey0)
    for k in range(n):  # clips written as comparisons: min/max calls cost more than the rest of a vertex
        ex, ey = edges[k]
        nx, ny, d = sgn * ey, -sgn * ex, ix * abs(ey)
        det = nx0 * ny - ny0 * nx
        if abs(det) > 1e-9 * (ex * ex + ey * ey) + 1e-12:
            dx, dy = (d0 * ny - d * ny0) / det, (nx0 * d - nx * d0) / det
        else:
            n2 = max(nx * nx + ny * ny, 1e-12)
            dx, dy = d * nx / n2, d * ny / n2
        x, y = poly[k]
        dx = nlim if dx < nlim else lim if dx > lim else dx
        dy = nlim if dy < nlim else lim if dy > lim else dy
        out.append((x + dx, y + dy))
        nx0, ny0, d0 = nx, ny, d
    area2 = sum([out[k][0] * out[(k + 1) % n][1] - out[(k + 1) % n][0] * out[k][1] for k in range(n)])
    if area * area2 <= 0:
        return None
    pts = [(round(x - 0.5), round(y - 0.5)) for x, y in out]
    if all(-30000 <= x <= 30000 and -30000 <= y <= 30000 for x, y in pts):
        return pts
    return [(min(max(x, -30000), 30000), min(max(y, -30000), 30000)) for x, y in pts]


def _inset_parallelogram(px: float, py: float, ax: float, ay: float, bx: float, by: float, ix: float) -> list | None:
    """`_inset` for the parallelogram p, p + a, p + a + b, p + b: the inset moves its corners by ±δa ± δb, δa along b
    (the edges along a moving in by ix·|a_y|/|a × b| of b) and δb along a; None where it turns inside out.

    Written out (a few wheels a frame, each call's microseconds count): the same floating-point operations as
    `_inset`'s corner moves, so the same pixels."""
    c = ax * by - ay * bx
    if c == 0:
        return None
    ac = abs(c)
    fa, fb = ix * abs(ay) / ac, ix * abs(by) / ac
    dax, day, dbx, dby = fa * bx, fa * by, -fb * ax, -fb * ay
    lim, nlim = 2 * ix, -2 * ix
    # corner moves δa − δb and δa + δb (the other two corners move by their negatives), each clipped to ±lim
    mx, my, nx, ny = dax - dbx, day - dby, dax + dbx, day + dby
    mx = nlim if mx < nlim else lim if mx > lim else mx
    my = nlim if my < nlim else lim if my > lim else my
    nx = nlim if nx < nlim else lim if nx > lim else nx
    ny = nlim if ny < nlim else lim if ny > lim else ny
    x0, y0 = px + mx, py + my
    x1, y1 = px + ax + nx, py + ay + ny
    x2, y2 = px + ax + bx - mx, py + ay + by - my
    x3, y3 = px + bx - nx, py + by - ny
    area2 = sum([x0 * y1 - x1 * y0, x1 * y2 - x2 * y1, x2 * y3 - x3 * y2, x3 * y0 - x0 * y3])  # sum(): as _inset
    if c * area2 <= 0:
        return None
    pts = [(round(x0 - 0.5), round(y0 - 0.5)), (round(x1 - 0.5), round(y1 - 0.5))]
    pts += [(round(x2 - 0.5), round(y2 - 0.5)), (round(x3 - 0.5), round(y3 - 0.5))]
    if -30000 < min(x0, x1, x2, x3, y0, y1, y2, y3) and max(x0, x1, x2, x3, y0, y1, y2, y3) < 30000:
        return pts
    return [(min(max(x, -30000), 30000), min(max(y, -30000), 30000)) for x, y in pts]
