"""A fast `state_pixels` renderer for gymnasium CarRacing-v3 (`env.renderer: fast`).

Gymnasium draws every observation on the full 1000×800 window with pygame and then smooth-scales it to 96×96,
which is ≈ 98 % of a step. `FastCarRacing` subclasses gymnasium's `CarRacing` and replaces only that drawing:
physics, track generation, rewards, termination and seeding are gymnasium's own code, untouched.

The scene is drawn straight on a (96·SS)² surface and box-averaged to 96×96, which is what `smoothscale` does to
the window (an area average); SS = 2, and 8 during the first second, when the camera zooms in from a view of the
whole track and everything is tiny. The camera is gymnasium's `_render` composed with the window → state scaling
and the vertical flip: a world point p lands, in 96×96 state pixels, at

    x = 48 + 0.096·zoom·r_x,   y = 72 − 0.12·zoom·r_y,   r = R(−hull angle)·(p − hull position),

with `zoom` animated over the first second as gymnasium does (the window's 1000×800 squeezes to 96×96, so the
x and y scales differ). Drawn in gymnasium's order: background field (black beyond it), grass patches, road
tiles and red/white kerbs (their current colours, so visited tiles lose their shading as in gymnasium), the car
(wheels with the grey band of their rotation phase, then the hull; no skid marks, as in `state_pixels`), the
black bottom bar with the speed, ABS, steering and gyro bars, and the score. Vertices are transformed with NumPy
in one go and only polygons that reach the visible frame are drawn. Two corrections make the small drawing match
the big one: pygame's fill rule widens polygons by a pixel (`_pixels` takes it back, less gymnasium's own widening
by a window pixel), and smoothscale's fixed point darkens flat areas by 2 levels (`SHRINK_LUT`). Measured against
gymnasium on seeded trajectories: `python bench/car_render.py`.
"""

from __future__ import annotations

import math
import os

import numpy as np

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import pygame  # noqa: E402
from gymnasium.envs.box2d import car_dynamics as cd  # noqa: E402
from gymnasium.envs.box2d.car_racing import (  # noqa: E402
    GRASS_DIM,
    PLAYFIELD,
    SCALE,
    STATE_H,
    STATE_W,
    WINDOW_H,
    WINDOW_W,
    ZOOM,
    CarRacing,
)
from pygame import gfxdraw  # noqa: E402

SS = 2  # supersampling after the first second: the scene is drawn at (96·SS)² and box-averaged to 96×96
SS_ZOOM = 8  # during the first second's zoom the scene is tiny (the whole track in view): sample it finer
KX = STATE_W / WINDOW_W  # window → state pixels, x (0.096)
KY = STATE_H / WINDOW_H  # window → state pixels, y (0.12)
BAR_TOP = STATE_H - STATE_H * 5 / 40  # the indicator bar covers rows 84..96 (window rows 700..800)

# gymnasium's smoothscale of the window to 96×96 truncates twice in fixed point: a flat area of value v comes out
# as max(v − 2, 0) (measured for every v; 255 → 253). Our box average by an integer factor is exact, so the
# same map is applied to it.
SHRINK_LUT = np.maximum(np.arange(256) - 2, 0).astype(np.uint8)


def _grass_patches() -> np.ndarray:
    """gymnasium's grass squares, (400, 4, 2) world coordinates, in its drawing order."""
    polys = []
    for x in range(-20, 20, 2):
        for y in range(-20, 20, 2):
            x0, y0 = GRASS_DIM * x, GRASS_DIM * y
            polys.append([(x0 + GRASS_DIM, y0), (x0, y0), (x0, y0 + GRASS_DIM), (x0 + GRASS_DIM, y0 + GRASS_DIM)])
    return np.asarray(polys, np.float64)


GRASS = _grass_patches()
HULL_QUADS = np.asarray([cd.HULL_POLY1, cd.HULL_POLY2, cd.HULL_POLY4], np.float64) * cd.SIZE
HULL_OCT = np.asarray([cd.HULL_POLY3], np.float64) * cd.SIZE
WHEEL_QUAD = np.asarray([(-1, 1), (1, 1), (1, -1), (-1, -1)], np.float64) * (cd.WHEEL_W * cd.SIZE, cd.WHEEL_R * cd.SIZE)
FIELD = np.asarray([[(PLAYFIELD, PLAYFIELD), (PLAYFIELD, -PLAYFIELD), (-PLAYFIELD, -PLAYFIELD), (-PLAYFIELD, PLAYFIELD)]])


class FastCarRacing(CarRacing):
    """gymnasium's CarRacing with `state_pixels` drawn at `ss`× the state resolution (see the module docstring).

    Other render modes (`rgb_array`, `human`) fall through to gymnasium's renderer.
    """

    def __init__(self, *args, ss: int = SS, ss_zoom: int = SS_ZOOM, **kwargs):
        super().__init__(*args, **kwargs)
        self.ss, self.ss_zoom = int(ss), int(ss_zoom)
        self._surfs: dict[int, pygame.Surface] = {}  # one supersampled surface per factor, made at the first draw
        self._polys_of = None  # the road_poly list that the cached vertex array was built from
        self._hull: dict[tuple[int, float], list] = {}  # the hull's pixels (fixed on screen once the zoom is done)
        self._texts: dict[tuple[int, str], tuple] = {}
        self._font = None

    def _render(self, mode: str):
        if mode != "state_pixels":
            return super()._render(mode)
        if "t" not in self.__dict__:
            return None  # reset() not called yet (as gymnasium)
        if self._polys_of is not self.road_poly:
            self._cache_polys()
        assert self.car is not None
        ss = self.ss if self.t >= 1 else self.ss_zoom
        surf = self._surfs.get(ss)
        if surf is None:
            surf = self._surfs[ss] = pygame.Surface((STATE_W * ss, STATE_H * ss))
        zoom = 0.1 * SCALE * max(1 - self.t, 0) + ZOOM * SCALE * min(self.t, 1)
        # gymnasium fills polygons on the window, whose pixels are KX·ss × KY·ss of ours: grow by that much.
        ix = 0.5 - 0.5 * KX * ss

        # camera: world (x, y) → surface (ox + ax·x + bx·y, oy + ay·x + by·y)
        ang = -self.car.hull.angle
        c, s = math.cos(ang), math.sin(ang)
        kx, ky = KX * zoom * ss, KY * zoom * ss
        ax, bx, ay, by = kx * c, -kx * s, -ky * s, -ky * c
        px, py = self.car.hull.position
        ox = ss * STATE_W / 2 - (ax * px + bx * py)
        oy = ss * STATE_H * 3 / 4 - (ay * px + by * py)
        cam = (ox, oy, ax, bx, ay, by)

        self._draw_scene(surf, ss, cam, ix, zoom)
        self._draw_indicators(surf, ss, ix)
        text, at = self._text(f"{self.reward:04.0f}", ss)
        surf.blit(text, at)
        small = pygame.transform.smoothscale(surf, (STATE_W, STATE_H)) if ss > 1 else surf
        frame = np.frombuffer(pygame.image.tobytes(small, "RGB"), np.uint8).reshape(STATE_H, STATE_W, 3)
        return np.maximum(frame, 2) - np.uint8(2)  # SHRINK_LUT, as gymnasium's smoothscale

    # ------------------------------------------------------------------ scene
    def _cache_polys(self) -> None:
        """Stack grass + road + kerb vertices into one (P, 4, 2) array; kept until reset() builds a new track."""
        road = self.road_poly
        self._verts = np.concatenate([GRASS, np.asarray([p for p, _ in road], np.float64).reshape(-1, 4, 2)])
        self._centre = self._verts.mean(1)
        self._radius = np.sqrt(((self._verts - self._centre[:, None]) ** 2).sum(-1).max(1))
        self._colors = [c for _, c in road]  # tile colours are arrays that FrictionDetector recolours in place
        # tiles and kerbs are [p1_l, p1_r, p2_r, p2_l]: edges 0 and 2 are seams with the neighbours, 1 and 3 the sides
        self._edges = np.ones((len(self._verts), 4))
        self._edges[len(GRASS) :, 0::2] = 0
        self._polys_of = road

    def _draw_scene(self, surf, ss: int, cam, ix: float, zoom: float) -> None:
        """gymnasium's `_render_road` (background field, grass, road tiles, kerbs), then `Car.draw`."""
        ox, oy, ax, bx, ay, by = cam
        w, h = STATE_W * ss, BAR_TOP * ss  # the bar hides everything below row 84
        bg = [int(v) for v in self.bg_color]
        if _field_covers(cam, w, h):
            surf.fill(bg)
        else:  # zoomed out: black beyond the playfield
            surf.fill((0, 0, 0))
            for _, pts in _pixels(_apply(FIELD, cam), ix):
                gfxdraw.filled_polygon(surf, pts, bg)

        # grass and road polygons: cull by bounding circles (radius r → r·kx across, r·ky down)
        cx, cy = self._centre[:, 0], self._centre[:, 1]
        X = ox + ax * cx + bx * cy
        Y = oy + ay * cx + by * cy
        rx, ry = self._radius * math.hypot(ax, bx), self._radius * math.hypot(ay, by)
        idx = np.flatnonzero((X + rx >= 0) & (X - rx <= w) & (Y + ry >= 0) & (Y - ry <= h)).tolist()
        # the car's wheels and their grey phase bands, in hull coordinates (the camera follows the hull)
        car = self.car
        hull = car.hull
        hx, hy, ha = hull.position[0], hull.position[1], hull.angle
        kx, ky = KX * zoom * ss, KY * zoom * ss
        hc, hs = math.cos(ha), math.sin(ha)
        quads, colors = [], []
        for wheel in car.wheels:
            dx, dy = wheel.position[0] - hx, wheel.position[1] - hy
            rx_, ry_ = hc * dx + hs * dy, -hs * dx + hc * dy  # R(−hull angle)·(wheel − hull)
            c, s = math.cos(wheel.angle - ha), math.sin(wheel.angle - ha)
            m = np.array([[kx * c, -kx * s], [-ky * s, -ky * c]])
            o = np.array([ss * STATE_W / 2 + kx * rx_, ss * STATE_H * 3 / 4 - ky * ry_])
            quads.append(WHEEL_QUAD @ m.T + o)
            colors.append(cd.WHEEL_COLOR)
            band = _phase_band(wheel.phase)
            if band is not None:
                quads.append(band @ m.T + o)
                colors.append(cd.WHEEL_WHITE)
        n_road = len(idx)
        pts = np.concatenate([_apply(self._verts[idx], cam), np.asarray(quads)])
        edges = np.concatenate([self._edges[idx], np.ones((len(quads), 4))])
        grass = [int(c) for c in self.grass_color]
        ng, road_colors = len(GRASS), self._colors
        for k, p in _pixels(pts, ix, edges):
            if k < n_road:
                i = idx[k]
                gfxdraw.filled_polygon(surf, p, grass if i < ng else [int(c) for c in road_colors[i - ng]])
            else:
                pygame.draw.polygon(surf, colors[k - n_road], p)

        # the hull: fixed on screen for a given zoom
        key = (ss, zoom)
        hull_px = self._hull.get(key)
        if hull_px is None:
            m = np.array([[kx, 0.0], [0.0, -ky]])
            o = np.array([ss * STATE_W / 2, ss * STATE_H * 3 / 4])
            hull_px = [p for polys in (HULL_QUADS, HULL_OCT) for _, p in _pixels(polys @ m.T + o, ix)]
            if len(self._hull) > 256:
                self._hull.clear()
            self._hull[key] = hull_px
        hull_color = [int(v * 255) for v in hull.color]
        for p in hull_px:
            pygame.draw.polygon(surf, hull_color, p)

    def _draw_indicators(self, surf, ss: int, ix: float) -> None:
        """gymnasium's `_render_indicators` (black bar; speed, ABS, steering and gyro bars) on the window, scaled."""
        fx, fy = KX * ss, KY * ss
        W, H = WINDOW_W, WINDOW_H
        s, h = W / 40.0, H / 40.0
        surf.fill((0, 0, 0), pygame.Rect(0, round((H - 5 * h) * fy), STATE_W * ss, STATE_H * ss))

        def rect(x0, x1, y0, y1, color):  # an axis-aligned window rectangle, filled like the other polygons
            x0, x1 = sorted((x0 * fx, x1 * fx))
            y0, y1 = sorted((y0 * fy, y1 * fy))
            x0, x1 = round(x0 + ix - 0.5), round(x1 - ix - 0.5)
            if x1 >= x0:
                y0, y1 = round(y0 - 0.5), round(y1 - 0.5)
                pygame.draw.polygon(surf, color, [(x0, y0), (x1, y0), (x1, y1), (x0, y1)])

        def vertical(place, val, color):
            if abs(val) > 1e-4:
                rect(place * s, (place + 1) * s, H - (h + h * val), H - h, color)

        def horiz(place, val, color):
            if abs(val) > 1e-4:
                rect(place * s, (place + val) * s, H - 4 * h, H - 2 * h, color)

        car = self.car
        vx, vy = car.hull.linearVelocity
        speed = math.sqrt(vx * vx + vy * vy)
        if abs(speed) > 1e-4:
            vertical(5, 0.02 * speed, (255, 255, 255))
        for k, color in ((0, (0, 0, 255)), (1, (0, 0, 255)), (2, (51, 0, 255)), (3, (51, 0, 255))):
            if abs(car.wheels[k].omega) > 1e-4:
                vertical(7 + k, 0.01 * car.wheels[k].omega, color)
        if abs(car.wheels[0].joint.angle) > 1e-4:
            horiz(20, -10.0 * car.wheels[0].joint.angle, (0, 255, 0))
        if abs(car.hull.angularVelocity) > 1e-4:
            horiz(30, -0.8 * car.hull.angularVelocity, (255, 0, 0))

    def _text(self, s: str, ss: int):
        """The score text as gymnasium renders it (font 42, white on black) at its window place, scaled; cached."""
        got = self._texts.get((ss, s))
        if got is None:
            if len(self._texts) > 4096:
                self._texts.clear()
            if self._font is None:
                pygame.font.init()
                self._font = pygame.font.Font(pygame.font.get_default_font(), 42)
            text = self._font.render(s, True, (255, 255, 255), (0, 0, 0))
            big = pygame.Surface(text.get_size())  # 32-bit, as smoothscale needs
            big.blit(text, (0, 0))
            rect = big.get_rect()
            rect.center = (60, int(WINDOW_H - WINDOW_H * 2.5 / 40.0))
            size = (max(1, round(rect.width * KX * ss)), max(1, round(rect.height * KY * ss)))
            at = (round(rect.left * KX * ss), round(rect.top * KY * ss))
            got = self._texts[(ss, s)] = (pygame.transform.smoothscale(big, size), at)
        return got


def _apply(polys: np.ndarray, cam) -> np.ndarray:
    ox, oy, ax, bx, ay, by = cam
    x, y = polys[..., 0], polys[..., 1]
    return np.stack([ox + ax * x + bx * y, oy + ay * x + by * y], -1)


def _phase_band(phase: float) -> np.ndarray | None:
    """The grey band gymnasium draws on a wheel for its rotation phase (wheel-local vertices), or None."""
    s1, s2 = math.sin(phase), math.sin(phase + 1.2)
    if s1 > 0 and s2 > 0:
        return None
    c1, c2 = math.cos(phase), math.cos(phase + 1.2)
    if s1 > 0:
        c1 = float(np.sign(c1))
    if s2 > 0:
        c2 = float(np.sign(c2))
    hw, r = cd.WHEEL_W * cd.SIZE, cd.WHEEL_R * cd.SIZE
    return np.array([(-hw, r * c1), (hw, r * c1), (hw, r * c2), (-hw, r * c2)])


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
