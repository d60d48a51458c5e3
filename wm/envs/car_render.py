"""A fast `state_pixels` renderer for gymnasium CarRacing-v3 (`env.renderer: fast`).

Gymnasium draws every observation on the full 1000×800 window with pygame and then smooth-scales it to 96×96,
which is ≈ 98 % of a step. `FastCarRacing` subclasses gymnasium's `CarRacing` and replaces only that drawing:
physics, track generation, rewards, termination and seeding are gymnasium's own code, untouched.

The scene is drawn straight on a (96·SS)² surface and box-averaged to 96×96, which is what `smoothscale` does to
the window (an area average); SS = 2, and more during the first second, when the camera zooms in from a view of
the whole track and everything is tiny: 8 until the zoom is half done, then 4. The camera is gymnasium's `_render`
composed with the window → state scaling and the vertical flip: a world point p lands, in 96×96 state pixels, at

    x = 48 + 0.096·zoom·r_x,   y = 72 − 0.12·zoom·r_y,   r = R(−hull angle)·(p − hull position),

with `zoom` animated over the first second as gymnasium does (the window's 1000×800 squeezes to 96×96, so the
x and y scales differ). Drawn in gymnasium's order: background field (black beyond it), grass patches, road
tiles and red/white kerbs (their current colours, so visited tiles lose their shading as in gymnasium), the car
(wheels with the grey band of their rotation phase, then the hull; no skid marks, as in `state_pixels`), the
black bottom bar with the speed, ABS, steering and gyro bars, and the score.

The world (field, grass, tiles, kerbs) is drawn in one of two ways. During the zoom, as polygons: vertices are
transformed with NumPy in one go and only polygons that reach the visible frame are drawn. After it, the zoom is
fixed and the world is a texture (`WorldTexture`): drawn once per track, at reset, as palette indices at 4 texels
per world unit over the track's surroundings, and sampled at the supersampled pixels' centres through the camera
(NumPy index gathering in a few whole-array passes, instead of ≈ 25 polygons and their NumPy set-up); a tile
that the car recolours is drawn again in it, and a view beyond the texture falls back to polygons. The car's few
polygons are computed in plain Python.

Two corrections make the small drawing match the big one: pygame's fill rule widens polygons by a pixel
(`_pixels` takes it back, less gymnasium's own widening by a window pixel), and smoothscale's fixed point darkens
flat areas by 2 levels (`SHRINK_LUT`). Measured against gymnasium on seeded trajectories:
`python bench/car_render.py`.
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

from wm.envs.car_polygons import _apply, _field_covers, _inset, _inset_parallelogram, _phase_band, _pixels, _rgb  # noqa: E402

SS = 2  # supersampling after the first second: the scene is drawn at (96·SS)² and box-averaged to 96×96
DENSITY = 4.0  # texels per world unit of the world texture used after the zoom (≈ 1.3 per supersampled pixel across)
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
HULL_POLYS = [[(u * cd.SIZE, v * cd.SIZE) for u, v in p] for p in (cd.HULL_POLY1, cd.HULL_POLY2, cd.HULL_POLY4, cd.HULL_POLY3)]
_HW, _R = cd.WHEEL_W * cd.SIZE, cd.WHEEL_R * cd.SIZE  # a wheel's half width and radius
CAR_REACH = 6.0  # world units: beyond the car's wheels and hull from the hull's centre, with a step's travel to spare
# world units: the texture's margin around the track (the view reaches 48.3 from the hull, and the car leaves the road)
VIEW_REACH = 80.0
CELL = 16.0  # world units: the grid that finds the tiles near the car
FIELD = np.asarray([[(PLAYFIELD, PLAYFIELD), (PLAYFIELD, -PLAYFIELD), (-PLAYFIELD, -PLAYFIELD), (-PLAYFIELD, PLAYFIELD)]])


class FastCarRacing(CarRacing):
    """gymnasium's CarRacing with `state_pixels` drawn at `ss`× the state resolution (see the module docstring).

    Other render modes (`rgb_array`, `human`) fall through to gymnasium's renderer. `density` is the world
    texture's texels per world unit at ss = SS, in proportion to ss otherwise (0: no texture, every frame drawn with
    polygons).
    """

    def __init__(self, *args, ss: int = SS, ss_zoom: int = SS_ZOOM, density: float = DENSITY, **kwargs):
        super().__init__(*args, **kwargs)
        self.ss, self.ss_zoom, self.density = int(ss), int(ss_zoom), float(density)
        self._surfs: dict[int, tuple[pygame.Surface, np.ndarray]] = {}  # supersampled surfaces and their pixels
        self._small_pixels = np.zeros((STATE_H, STATE_W), np.uint32)
        self._small = pygame.image.frombuffer(self._small_pixels, (STATE_W, STATE_H), "RGBX")
        self._polys_of = None  # the road_poly list that the cached vertex array was built from
        self._world: WorldTexture | None = None
        self._hull: dict[tuple[int, float], list] = {}  # the hull's pixels (fixed on screen once the zoom is done)
        self._texts: dict[tuple[int, str], tuple] = {}
        self._font = None

    def _render(self, mode: str):
        if mode != "state_pixels":
            return super()._render(mode)
        if "t" not in self.__dict__:
            return None  # reset() not called yet (as gymnasium)
        assert self.car is not None
        if self._polys_of is not self.road_poly:
            self._new_track()
        else:
            self._sync_colors()
        zoom = 0.1 * SCALE * max(1 - self.t, 0) + ZOOM * SCALE * min(self.t, 1)
        ss = self.ss if self.t >= 1 else self.ss_zoom if zoom < ZOOM * SCALE / 2 else self.ss_zoom // 2
        got = self._surfs.get(ss)
        if got is None:
            pixels = np.zeros((STATE_H * ss, STATE_W * ss), np.uint32)
            got = self._surfs[ss] = (pygame.image.frombuffer(pixels, (STATE_W * ss, STATE_H * ss), "RGBX"), pixels)
        surf, pixels = got
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

        world = self._world if self.t >= 1 and ss == self.ss else None
        if world is None or not world.draw(pixels[: round(BAR_TOP * ss)], cam):
            self._draw_world(surf, ss, cam, ix)
        self._draw_car(surf, ss, ix, zoom)
        self._draw_indicators(surf, ss)
        text, at = self._text(f"{self.reward:04.0f}", ss)
        surf.blit(text, at)
        small = pygame.transform.smoothscale(surf, (STATE_W, STATE_H), self._small)
        frame = np.frombuffer(pygame.image.tobytes(small, "RGB"), np.uint8).reshape(STATE_H, STATE_W, 3)
        return np.maximum(frame, 2) - np.uint8(2)  # SHRINK_LUT, as gymnasium's smoothscale

    # ------------------------------------------------------------------ scene
    def _new_track(self) -> None:
        """Cache the polygons of a new track (reset() built it) and draw its world texture."""
        road = self.road_poly
        self._verts = np.concatenate([GRASS, np.asarray([p for p, _ in road], np.float64).reshape(-1, 4, 2)])
        self._centre = self._verts.mean(1)
        self._radius = np.sqrt(((self._verts - self._centre[:, None]) ** 2).sum(-1).max(1))
        # tiles and kerbs are [p1_l, p1_r, p2_r, p2_l]: edges 0 and 2 are seams with the neighbours, 1 and 3 the sides
        self._edges = np.ones((len(self._verts), 4))
        self._edges[len(GRASS) :, 0::2] = 0
        self._rgb = [_rgb(self.grass_color)] * len(GRASS) + [_rgb(c) for _, c in road]  # each polygon's colour
        self._colors_of = (_rgb(self.bg_color), _rgb(self.grass_color))
        # tile colours are arrays that FrictionDetector recolours in place when a car body touches the tile (kerbs'
        # are tuples): only the tiles within CAR_REACH of the hull are re-read, found through a grid of CELL squares
        ng = len(GRASS)
        cells: dict[tuple[int, int], list[int]] = {}
        for i, (_, color) in enumerate(road):
            if isinstance(color, np.ndarray):
                (cx, cy), r = self._centre[ng + i], self._radius[ng + i] + CAR_REACH
                for gx in range(math.floor((cx - r) / CELL), math.floor((cx + r) / CELL) + 1):
                    for gy in range(math.floor((cy - r) / CELL), math.floor((cy + r) / CELL) + 1):
                        cells.setdefault((gx, gy), []).append(i)
        self._cells = cells
        self._polys_of = road
        self._world = None
        if self.density > 0:
            self._world = WorldTexture(self, self.density * self.ss / SS, self._small)

    def _sync_colors(self) -> None:
        """Re-read the colours of the tiles the car may be touching; redraw the ones that changed in the texture."""
        if self._colors_of != (_rgb(self.bg_color), _rgb(self.grass_color)):
            self._new_track()  # someone recoloured the field: start over
            return
        hx, hy = self.car.hull.position
        near = self._cells.get((math.floor(hx / CELL), math.floor(hy / CELL)))
        if not near:
            return
        ng, road, rgb = len(GRASS), self.road_poly, self._rgb
        changed = []
        for i in near:
            r, g, b = road[i][1].tolist()
            now = (int(r), int(g), int(b))
            if now != rgb[ng + i]:
                rgb[ng + i] = now
                changed.append(ng + i)
        if changed and self._world is not None:
            self._world.redraw(self, changed)

    def _draw_world(self, surf, ss: int, cam, ix: float) -> None:
        """gymnasium's `_render_road` with polygons: background field (black beyond it), grass, road tiles, kerbs."""
        ox, oy, ax, bx, ay, by = cam
        w, h = STATE_W * ss, BAR_TOP * ss  # the bar hides everything below row 84
        bg = self._colors_of[0]
        if _field_covers(cam, w, h):
            surf.fill(bg)
        else:  # zoomed out: black beyond the playfield
            surf.fill((0, 0, 0))
            for _, pts in _pixels(_apply(FIELD, cam), ix):
                gfxdraw.filled_polygon(surf, pts, bg)

        # grass squares, road tiles and kerbs: cull by bounding circles (radius r → r·kx across, r·ky down)
        cx, cy = self._centre[:, 0], self._centre[:, 1]
        X = ox + ax * cx + bx * cy
        Y = oy + ay * cx + by * cy
        rx, ry = self._radius * math.hypot(ax, bx), self._radius * math.hypot(ay, by)
        idx = np.flatnonzero((X + rx >= 0) & (X - rx <= w) & (Y + ry >= 0) & (Y - ry <= h))
        rgb, fill = self._rgb, gfxdraw.filled_polygon
        colors = [rgb[i] for i in idx.tolist()]
        for k, p in _pixels(_apply(self._verts[idx], cam), ix, self._edges[idx]):
            fill(surf, p, colors[k])

    def _draw_car(self, surf, ss: int, ix: float, zoom: float) -> None:
        """gymnasium's `Car.draw` without skid marks: wheels with the grey band of their rotation phase, then the hull."""
        car = self.car
        hull = car.hull
        hx, hy, ha = hull.position[0], hull.position[1], hull.angle
        kx, ky = KX * zoom * ss, KY * zoom * ss
        hc, hs = math.cos(ha), math.sin(ha)
        x0, y0 = ss * STATE_W / 2, ss * STATE_H * 3 / 4
        draw = pygame.draw.polygon
        for wheel in car.wheels:  # in hull coordinates (the camera follows the hull): a few floats, in plain Python
            dx, dy = wheel.position[0] - hx, wheel.position[1] - hy
            rx, ry = hc * dx + hs * dy, -hs * dx + hc * dy  # R(−hull angle)·(wheel − hull)
            c, s = math.cos(wheel.angle - ha), math.sin(wheel.angle - ha)
            m00, m01, m10, m11 = kx * c, -kx * s, -ky * s, -ky * c  # wheel-local (u, v) → (m00·u + m01·v, ...)
            o0, o1 = x0 + kx * rx, y0 - ky * ry
            # the wheel's rectangle and its band are parallelograms on screen: corner, then its two edges
            ex, ey = 2 * _HW * m00, 2 * _HW * m10
            px, py = o0 - _HW * m00 + _R * m01, o1 - _HW * m10 + _R * m11
            pts = _inset_parallelogram(px, py, ex, ey, -2 * _R * m01, -2 * _R * m11, ix)
            if pts is not None:
                draw(surf, cd.WHEEL_COLOR, pts)
            band = _phase_band(wheel.phase)
            if band is not None:
                c1, c2 = band
                px, py = o0 - _HW * m00 + _R * c1 * m01, o1 - _HW * m10 + _R * c1 * m11
                pts = _inset_parallelogram(px, py, ex, ey, _R * (c2 - c1) * m01, _R * (c2 - c1) * m11, ix)
                if pts is not None:
                    draw(surf, cd.WHEEL_WHITE, pts)

        # the hull: fixed on screen for a given zoom
        key = (ss, zoom)
        hull_px = self._hull.get(key)
        if hull_px is None:
            hull_px = [_inset([(x0 + kx * u, y0 - ky * v) for u, v in poly], ix) for poly in HULL_POLYS]
            hull_px = [p for p in hull_px if p is not None]
            if len(self._hull) > 256:
                self._hull.clear()
            self._hull[key] = hull_px
        hull_color = (int(hull.color[0] * 255), int(hull.color[1] * 255), int(hull.color[2] * 255))
        for p in hull_px:
            draw(surf, hull_color, p)

    def _draw_indicators(self, surf, ss: int) -> None:
        """gymnasium's `_render_indicators` (black bar; speed, ABS, steering and gyro bars) on the window, scaled."""
        fx, fy = KX * ss, KY * ss
        W, H = WINDOW_W, WINDOW_H
        s, h = W / 40.0, H / 40.0
        surf.fill((0, 0, 0), (0, round((H - 5 * h) * fy), STATE_W * ss, STATE_H * ss))
        # pygame.draw.polygon fills an axis-aligned integer rectangle's pixels x0..x1 × y0..y1, both ends included:
        # the window rectangles are shrunk like the other polygons (ix) and filled with Surface.fill
        ix = 0.5 - 0.5 * KX * ss

        def rect(x0, x1, y0, y1, color):
            x0, x1 = sorted((x0 * fx, x1 * fx))
            y0, y1 = sorted((y0 * fy, y1 * fy))
            x0, x1 = round(x0 + ix - 0.5), round(x1 - ix - 0.5)
            if x1 >= x0:
                y0, y1 = round(y0 - 0.5), round(y1 - 0.5)
                surf.fill(color, (x0, y0, x1 - x0 + 1, y1 - y0 + 1))

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


class WorldTexture:
    """The static world of one track (background field, grass, road tiles, kerbs in gymnasium's order) drawn once as
    palette indices, `density` texels per world unit, over the track's bounding box grown by VIEW_REACH.

    After the zoom, `draw` fills the supersampled surface by sampling it at the pixels' centres (NumPy index
    gathering through the camera's inverse, then palette → pixel value) instead of drawing the visible polygons.
    The polygons are drawn with `_pixels` as on screen, less the widening by half a window pixel, which is taken
    along the world's x instead of the screen's (≤ 0.03 world units, a twentieth of a state pixel, apart).
    A tile whose colour changes (`redraw`) is drawn again with the polygons after it that overlap it, clipped to it.
    """

    def __init__(self, env: FastCarRacing, density: float, fmt: pygame.Surface):
        self.d = d = density
        road = env._verts[len(GRASS) :].reshape(-1, 2)
        lo, hi = road.min(0) - VIEW_REACH, road.max(0) + VIEW_REACH
        self.x0, self.y0 = float(lo[0]), float(lo[1])
        self.w = 4 * math.ceil((hi[0] - lo[0]) * d / 4)  # rows of whole 32-bit words
        self.h = math.ceil((hi[1] - lo[1]) * d)
        self.index = np.zeros((self.h, self.w), np.uint8)
        self.flat = self.index.reshape(-1)
        self.surf = pygame.image.frombuffer(self.index, (self.w, self.h), "P")
        self.surf.set_palette([(k, 0, 0) for k in range(256)])  # drawing with colour (k, 0, 0) stores k
        self.fmt = fmt
        self.lut = np.zeros(256, np.uint32)  # palette index → pixel value of the supersampled surfaces
        self.colors: dict[tuple[int, int, int], int] = {}
        self.cam = (-d * self.x0, -d * self.y0, d, 0.0, 0.0, d)  # world → texels: u = d·(x − x0), v = d·(y − y0)
        self.ix = 0.5 - 0.5 * d / (ZOOM * SCALE)  # centre-sampled, widened by half a window pixel after the zoom
        self.bufs: dict[tuple[int, int], tuple] = {}
        self.index[:] = self._color((0, 0, 0))
        for _, pts in _pixels(_apply(FIELD, self.cam), self.ix):
            gfxdraw.filled_polygon(self.surf, pts, (self._color(env._colors_of[0]), 0, 0))
        self._draw(env, np.arange(len(env._verts)))

    def _color(self, rgb: tuple[int, int, int]) -> int:
        k = self.colors.get(rgb)
        if k is None:
            k = self.colors[rgb] = len(self.colors)
            if k > 255:
                raise ValueError("more than 256 colours in the CarRacing world")
            self.lut[k] = self.fmt.map_rgb(rgb)
        return k

    def _draw(self, env: FastCarRacing, ids: np.ndarray) -> None:
        rgb, fill, color = env._rgb, gfxdraw.filled_polygon, self._color
        for k, p in _pixels(_apply(env._verts[ids], self.cam), self.ix, env._edges[ids]):
            fill(self.surf, p, (color(rgb[ids[k]]), 0, 0))

    def redraw(self, env: FastCarRacing, changed: list[int]) -> None:
        """Draw the polygons `changed` (indices into env._verts) again in their new colours, each with the later
        polygons that overlap it on top, clipped to its bounding box."""
        centre, radius = env._centre, env._radius
        for g in sorted(changed):
            (cx, cy), r = centre[g], radius[g]
            u0, v0 = math.floor(self.d * (cx - r - self.x0)) - 1, math.floor(self.d * (cy - r - self.y0)) - 1
            size = math.ceil(2 * self.d * r) + 3
            self.surf.set_clip(pygame.Rect(u0, v0, size, size))
            later = np.flatnonzero(np.hypot(*(centre[g + 1 :] - centre[g]).T) <= radius[g + 1 :] + r + 1 / self.d)
            self._draw(env, np.concatenate([[g], g + 1 + later]))
        self.surf.set_clip(None)

    def draw(self, out: np.ndarray, cam) -> bool:
        """Fill `out` (the supersampled surface's rows above the bar, uint32 pixels) through the camera `cam`; False
        (nothing drawn) where the view leaves the texture."""
        rows, cols = out.shape
        ox, oy, ax, bx, ay, by = cam
        d, det = self.d, ax * by - bx * ay
        # surface (X, Y) → world (x, y) = M⁻¹·(X − ox, Y − oy) → texels (u, v), sampled at the pixels' centres
        uX, uY, vX, vY = d * by / det, -d * bx / det, -d * ay / det, d * ax / det
        u0 = d * ((bx * oy - by * ox) / det - self.x0) + 0.5 * (uX + uY)
        v0 = d * ((ay * ox - ax * oy) / det - self.y0) + 0.5 * (vX + vY)
        for i, j in ((0, 0), (0, cols - 1), (rows - 1, 0), (rows - 1, cols - 1)):
            u, v = u0 + uX * j + uY * i, v0 + vX * j + vY * i
            if not (1 <= u <= self.w - 2 and 1 <= v <= self.h - 2):
                return False
        bufs = self.bufs.get((rows, cols))
        if bufs is None:  # preallocated: a fresh array of this size would come from the OS, page by page, each call
            n = np.empty((rows, cols), np.intp)  # take's own index type
            bufs = self.bufs[(rows, cols)] = (np.arange(rows), np.arange(cols), n, n.copy())
        i, j, U, V = bufs
        # texel (⌊u⌋, ⌊v⌋) of each pixel in 16.16 fixed point (integer passes are the cheapest), row-major index
        f = 65536.0
        np.add(np.rint((v0 + vY * i) * f).astype(np.intp)[:, None], np.rint(vX * f * j).astype(np.intp), out=V)
        np.add(np.rint((u0 + uY * i) * f).astype(np.intp)[:, None], np.rint(uX * f * j).astype(np.intp), out=U)
        V >>= 16
        U >>= 16
        V *= self.w
        V += U
        np.copyto(U, self.flat.take(V))  # palette indices, as intp for the next take (indices in range: no clipping)
        self.lut.take(U, out=out, mode="wrap")
        return True
