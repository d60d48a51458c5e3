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
transformed with NumPy in one go and only polygons that reach the visible frame (above the bar) are drawn. After it,
the zoom is fixed and the world is a texture (`WorldTexture`, wm/envs/car_texture.py): drawn once per track, at
reset, as palette indices at 4 texels per world unit over the track's surroundings, and sampled at the supersampled
pixels' centres through the camera (NumPy index gathering in a few whole-array passes, instead of ≈ 25 polygons and
their NumPy set-up). The car and the bar are drawn on those indices too (an 8-bit surface in palette colours; the
hull, fixed on screen, as its cached pixels), and the frame is their 2×2 box average taken on the indices: one table
lookup a block gives what smoothscale and the shrink give, bit for bit, with no 32-bit pixels; the score (antialiased,
not palette colours) is pasted as its cached blocks. Where that cannot be (more than 16 colours, a bar across the
score, SS ≠ 2) the indices go through 32-bit pixels and smoothscale, as the zoom's polygons do. A tile that the car
recolours is drawn again in the texture (the tile colours are made rows of one array, so a step's check is one
comparison), and a view beyond the texture falls back to polygons. The car's few polygons are computed in plain
Python. Every NumPy or pygame call counts: stepped beside another env (gymnasium's, in the benchmark; other envs and
the models, in training) the caches are cold and each costs a few microseconds.

Two corrections make the small drawing match the big one: pygame's fill rule widens polygons by a pixel
(`_pixels` takes it back, less gymnasium's own widening by a window pixel), and smoothscale's fixed point darkens
flat areas by 2 levels (`SHRINK_LUT`). Measured against gymnasium on seeded trajectories:
`python bench/car_render.py` (3 seeds × 300 steps, the cores shared with a training run: 8.7–9.4× gymnasium's
steps a CPU second, 11.1× over 1000-step episodes; the first second's zoom is a third of the time). Stepped beside
gymnasium's env, a step after the zoom takes ≈ 0.6 ms: physics ≈ 0.2, sampling the texture ≈ 0.18, the car ≈ 0.1,
the frame from the indices ≈ 0.08, the bar ≈ 0.06 (stepped alone, ≈ 0.29 ms in all).
"""

from __future__ import annotations

import functools
import gc
import math
import os

import numpy as np

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import pygame  # noqa: E402
from gymnasium.envs.box2d import car_dynamics as cd  # noqa: E402
from gymnasium.envs.box2d.car_racing import (  # noqa: E402
    SCALE,
    STATE_H,
    STATE_W,
    WINDOW_H,
    WINDOW_W,
    ZOOM,
    CarRacing,
)
from pygame import gfxdraw  # noqa: E402

from wm.envs.car_polygons import (  # noqa: E402
    FIELD,
    GRASS,
    _apply,
    _field_covers,
    _inset,
    _inset_parallelogram,
    _phase_band,
    _pixels,
    _rgb,
)
from wm.envs.car_texture import WorldTexture  # noqa: E402

SS = 2  # supersampling after the first second: the scene is drawn at (96·SS)² and box-averaged to 96×96
DENSITY = 4.0  # texels per world unit of the world texture used after the zoom (≈ 1.3 per supersampled pixel across)
SS_ZOOM = 8  # during the first second's zoom the scene is tiny (the whole track in view): sample it finer
KX = STATE_W / WINDOW_W  # window → state pixels, x (0.096)
KY = STATE_H / WINDOW_H  # window → state pixels, y (0.12)
BAR_TOP = STATE_H - STATE_H * 5 / 40  # the indicator bar covers rows 84..96 (window rows 700..800)
BAR_ROWS = round(BAR_TOP)  # the frame's rows above the bar
WHEEL_COLOR, WHEEL_WHITE = _rgb(cd.WHEEL_COLOR), _rgb(cd.WHEEL_WHITE)
# the indicator bar's: speed, ABS of the front and of the rear wheels, steering, gyro; the bar's black
BAR_COLORS = ((255, 255, 255), (0, 0, 255), (51, 0, 255), (0, 255, 0), (255, 0, 0), (0, 0, 0))

HULL_POLYS = [[(u * cd.SIZE, v * cd.SIZE) for u, v in p] for p in (cd.HULL_POLY1, cd.HULL_POLY2, cd.HULL_POLY4, cd.HULL_POLY3)]
_HW, _R = cd.WHEEL_W * cd.SIZE, cd.WHEEL_R * cd.SIZE  # a wheel's half width and radius


@functools.cache
def _bar_geometry(ss: int) -> tuple:
    """The fixed sides of gymnasium's indicator rectangles on a surface of ss × the state: (the bar's top row,
    {place: (x0, x1) of a vertical bar or None}, the vertical bars' base, (y0, y1) of the horizontal bars, fx, fy, ix).

    gymnasium draws each as a polygon on the window (x at place·s, in units of s = W/40, y in units of h = H/40);
    pygame.draw.polygon fills an axis-aligned integer rectangle's pixels x0..x1 × y0..y1, both ends included: the
    window rectangles are scaled, shrunk like the other polygons (ix) and filled with Surface.fill. The values are
    the same floating-point expressions as for the varying sides, in the same order, so the same pixels."""
    fx, fy = KX * ss, KY * ss
    s, h = WINDOW_W / 40.0, WINDOW_H / 40.0
    ix = 0.5 - 0.5 * KX * ss
    columns = {}
    for place in (5, 7, 8, 9, 10):
        x0, x1 = sorted((place * s * fx, (place + 1) * s * fx))
        x0, x1 = round(x0 + ix - 0.5), round(x1 - ix - 0.5)
        columns[place] = (x0, x1) if x1 >= x0 else None
    y0, y1 = sorted(((WINDOW_H - 4 * h) * fy, (WINDOW_H - 2 * h) * fy))
    rows = (round(y0 - 0.5), round(y1 - 0.5))
    return round((WINDOW_H - 5 * h) * fy), columns, (WINDOW_H - h) * fy, rows, fx, fy, ix


def _hull_rgb(color) -> tuple[int, int, int]:
    return int(color[0] * 255), int(color[1] * 255), int(color[2] * 255)


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
        self._hull_at: dict[tuple, np.ndarray] = {}  # ... as flat indices into palette indices of a shape
        self._palette: tuple = (None, None, None)  # (world texture, hull colour, the drawing colours as its indices)
        self._texts: dict[tuple[int, str], tuple] = {}
        self._patches: dict[tuple[int, str], tuple] = {}  # the score's blocks of a frame drawn from palette indices
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

        score = f"{self.reward:04.0f}"
        world = self._world if self.t >= 1 and ss == self.ss else None
        got = None if world is None else world.sample(cam, pixels.shape, BAR_ROWS * ss)
        if got is not None:  # the world's palette indices: the car and the bar drawn on them in palette colours
            pal, pal_surf = got
            hull = _hull_rgb(self.car.hull.color)
            if self._palette[:2] != (world, hull):
                drawn = (WHEEL_COLOR, WHEEL_WHITE, hull, *BAR_COLORS)
                self._palette = (world, hull, [(world.color(rgb), 0, 0) for rgb in drawn])
            colors = self._palette[2]
            self._draw_car(pal_surf, ss, ix, zoom, colors[:3], pal)
            rects = self._draw_indicators(pal_surf, ss, colors[3:])
            if ss == 2:
                frame = self._palette_frame(world, pal, score, rects)
                if frame is not None:
                    return frame
            world.lut.take(pal, out=pixels, mode="wrap")  # the 32-bit path: the palette's pixel values
        else:
            self._draw_world(surf, ss, cam, ix)
            self._draw_car(surf, ss, ix, zoom, (WHEEL_COLOR, WHEEL_WHITE, _hull_rgb(self.car.hull.color)))
            self._draw_indicators(surf, ss, BAR_COLORS)
        text, at = self._text(score, ss)
        surf.blit(text, at)
        small = pygame.transform.smoothscale(surf, (STATE_W, STATE_H), self._small)
        frame = np.frombuffer(pygame.image.tobytes(small, "RGB"), np.uint8).reshape(STATE_H, STATE_W, 3)
        return np.maximum(frame, 2) - np.uint8(2)  # SHRINK_LUT, as gymnasium's smoothscale

    def _palette_frame(self, world: WorldTexture, pal: np.ndarray, score: str, rects: list) -> np.ndarray | None:
        """The frame from palette indices at ss = 2 (`WorldTexture.average`) with the score's blocks pasted on: what
        smoothscale gives for it on the black bar, where no indicator bar reaches them; None where that cannot be."""
        patch, (r0, c0), (x0, y0, x1, y1) = self._text_patch(score)
        for rx0, ry0, rx1, ry1 in rects:
            if rx0 <= x1 and x0 <= rx1 and ry0 <= y1 and y0 <= ry1:
                return None
        frame = np.empty((STATE_H, STATE_W, 3), np.uint8)
        if not world.average(pal, frame):
            return None
        frame[r0 : r0 + patch.shape[0], c0 : c0 + patch.shape[1]] = patch
        return frame

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
        self._field_of = self.bg_color.tobytes() + self.grass_color.tobytes()  # a cheaper check each step
        # tile colours are arrays that FrictionDetector recolours in place when a car body touches the tile (kerbs'
        # are tuples). Each becomes a row of one array, as the tile's attribute and in road_poly, still written in
        # place: a step's check is then one comparison with the colours last drawn (the values are the same, and only
        # drawing reads them). Should a tile's array not be its body's, they are re-read each step instead.
        tiles = [i for i, (_, color) in enumerate(road) if isinstance(color, np.ndarray)]
        colors = np.array([road[i][1] for i in tiles], np.float64).reshape(-1, 3)
        bodies = {id(t.color): t for t in self.road}
        self._tile_ids = tiles
        self._tile_colors = None
        if all(id(road[i][1]) in bodies for i in tiles):
            for row, i in enumerate(tiles):
                bodies[id(road[i][1])].color = colors[row]
                road[i] = (road[i][0], colors[row])
            self._tile_colors = colors
        self._tile_drawn = colors.copy()
        self._tile_bytes = colors.tobytes()  # one call and a memcmp a step while nothing changes
        self._polys_of = road
        self._world = None
        if self.density > 0:
            drawn = (WHEEL_COLOR, WHEEL_WHITE, _hull_rgb(self.car.hull.color), *BAR_COLORS)  # on the world's indices
            self._world = WorldTexture(self, self.density * self.ss / SS, self._small, drawn)

    def _sync_colors(self) -> None:
        """Redraw in the texture the tiles whose colours changed since they were drawn."""
        if self._field_of != self.bg_color.tobytes() + self.grass_color.tobytes():
            if self._colors_of != (_rgb(self.bg_color), _rgb(self.grass_color)):
                self._new_track()  # someone recoloured the field: start over
                return
            self._field_of = self.bg_color.tobytes() + self.grass_color.tobytes()
        road, ids = self.road_poly, self._tile_ids
        now = self._tile_colors if self._tile_colors is not None else np.array([road[i][1] for i in ids], np.float64)
        if now.tobytes() == self._tile_bytes:
            return
        self._tile_bytes = now.tobytes()
        rows = np.flatnonzero((now != self._tile_drawn).any(1))
        self._tile_drawn[rows] = now[rows]
        ng, rgb = len(GRASS), self._rgb
        changed = []
        for row in rows.tolist():
            i = ng + ids[row]
            if _rgb(now[row]) != rgb[i]:
                rgb[i] = _rgb(now[row])
                changed.append(i)
        if changed and self._world is not None:
            self._world.redraw(self, changed)

    def _draw_world(self, surf, ss: int, cam, ix: float) -> None:
        """gymnasium's `_render_road` with polygons: background field (black beyond it), grass, road tiles, kerbs."""
        ox, oy, ax, bx, ay, by = cam
        w, h = STATE_W * ss, BAR_TOP * ss  # the bar hides everything below row 84
        bg = self._colors_of[0]
        surf.set_clip((0, 0, w, round(h)))  # the bar, drawn later, covers the rows below: none of them filled twice
        if _field_covers(cam, w, h):
            surf.fill(bg)
        else:  # zoomed out: black beyond the playfield
            surf.fill((0, 0, 0))
            for _, pts in _pixels(_apply(FIELD, cam), ix):
                gfxdraw.filled_polygon(surf, pts, bg)

        # grass squares, road tiles and kerbs: cull by bounding circles (radius r → r·kx across, r·ky down), a pixel to
        # spare (a polygon drawn that misses the frame changes nothing): |centre − frame centre| − reach ≤ half frame
        xy = np.array([(ax, bx), (ay, by)]) @ self._centre.T
        xy -= np.array([(w / 2 - ox,), (h / 2 - oy,)])
        np.abs(xy, out=xy)
        xy -= np.array([(math.hypot(ax, bx),), (math.hypot(ay, by),)]) * self._radius
        idx = np.flatnonzero((xy <= np.array([(w / 2 + 1,), (h / 2 + 1,)])).all(0))
        rgb, fill = self._rgb, gfxdraw.filled_polygon
        colors = [rgb[i] for i in idx.tolist()]
        # pygame takes each polygon as a list of [x, y] lists: up to thousands of them a frame while zoomed out, all
        # freed by reference counting, but while they live the cyclic GC runs again and again over them (a factor of
        # 2 to 3 on this loop at 700 polygons): paused here
        paused = gc.isenabled()
        gc.disable()
        try:
            for k, p in _pixels(_apply(self._verts[idx], cam), ix, self._edges[idx]):
                fill(surf, p, colors[k])
        finally:
            if paused:
                gc.enable()
        surf.set_clip(None)

    def _draw_car(self, surf, ss: int, ix: float, zoom: float, colors: tuple, pal: np.ndarray | None = None) -> None:
        """gymnasium's `Car.draw` without skid marks: wheels with the grey band of their rotation phase, then the hull;
        `colors` are those of the wheels, their bands and the hull as `surf` takes them; `pal`: surf's palette
        indices, where the hull's pixels are set directly."""
        car = self.car
        wheel_color, band_color, hull_color = colors
        hull = car.hull
        (hx, hy), ha = hull.position, hull.angle
        kx, ky = KX * zoom * ss, KY * zoom * ss
        hc, hs = math.cos(ha), math.sin(ha)
        x0, y0 = ss * STATE_W / 2, ss * STATE_H * 3 / 4
        draw = pygame.draw.polygon
        for wheel in car.wheels:  # in hull coordinates (the camera follows the hull): a few floats, in plain Python
            wx, wy = wheel.position
            dx, dy = wx - hx, wy - hy
            rx, ry = hc * dx + hs * dy, -hs * dx + hc * dy  # R(−hull angle)·(wheel − hull)
            c, s = math.cos(wheel.angle - ha), math.sin(wheel.angle - ha)
            m00, m01, m10, m11 = kx * c, -kx * s, -ky * s, -ky * c  # wheel-local (u, v) → (m00·u + m01·v, ...)
            o0, o1 = x0 + kx * rx, y0 - ky * ry
            # the wheel's rectangle and its band are parallelograms on screen: corner, then its two edges
            ex, ey = 2 * _HW * m00, 2 * _HW * m10
            px, py = o0 - _HW * m00 + _R * m01, o1 - _HW * m10 + _R * m11
            pts = _inset_parallelogram(px, py, ex, ey, -2 * _R * m01, -2 * _R * m11, ix)
            if pts is not None:
                draw(surf, wheel_color, pts)
            band = _phase_band(wheel.phase)
            if band is not None:
                c1, c2 = band
                px, py = o0 - _HW * m00 + _R * c1 * m01, o1 - _HW * m10 + _R * c1 * m11
                pts = _inset_parallelogram(px, py, ex, ey, _R * (c2 - c1) * m01, _R * (c2 - c1) * m11, ix)
                if pts is not None:
                    draw(surf, band_color, pts)

        # the hull: fixed on screen for a given zoom
        key = (ss, zoom)
        hull_px = self._hull.get(key)
        if hull_px is None:
            hull_px = [_inset([(x0 + kx * u, y0 - ky * v) for u, v in poly], ix) for poly in HULL_POLYS]
            hull_px = [p for p in hull_px if p is not None]
            if len(self._hull) > 256:
                self._hull.clear()
            self._hull[key] = hull_px
        if pal is None:
            for p in hull_px:
                draw(surf, hull_color, p)
            return
        at = self._hull_at.get((key, pal.shape))  # palette indices: the hull's pixels, found by drawing it once
        if at is None:
            scratch = np.zeros(pal.shape, np.uint8)
            scratch_surf = pygame.image.frombuffer(scratch, pal.shape[::-1], "P")
            scratch_surf.set_palette([(k, 0, 0) for k in range(256)])
            for p in hull_px:
                draw(scratch_surf, (1, 0, 0), p)
            if len(self._hull_at) > 16:
                self._hull_at.clear()
            at = self._hull_at[(key, pal.shape)] = np.flatnonzero(scratch)
        pal.reshape(-1)[at] = hull_color[0]

    def _draw_indicators(self, surf, ss: int, colors) -> list[tuple[int, int, int, int]]:
        """gymnasium's `_render_indicators` (black bar; speed, ABS, steering and gyro bars) on the window, scaled;
        `colors` are BAR_COLORS as `surf` takes them. Returns the bars' pixel rectangles (x0, y0, x1, y1), inclusive."""
        white, blue, purple, green, red, black = colors
        top, columns, y_base, rows, fx, fy, ix = _bar_geometry(ss)
        fill = surf.fill
        fill(black, (0, top, STATE_W * ss, STATE_H * ss))
        car = self.car
        wheels = car.wheels
        vx, vy = car.hull.linearVelocity
        speed = math.sqrt(vx * vx + vy * vy)
        vertical = [(5, 0.02 * speed, white)] if abs(speed) > 1e-4 else []
        for k, color in ((0, blue), (1, blue), (2, purple), (3, purple)):
            if abs(wheels[k].omega) > 1e-4:
                vertical.append((7 + k, 0.01 * wheels[k].omega, color))
        horizontal = []
        if abs(wheels[0].joint.angle) > 1e-4:
            horizontal.append((20, -10.0 * wheels[0].joint.angle, green))
        if abs(car.hull.angularVelocity) > 1e-4:
            horizontal.append((30, -0.8 * car.hull.angularVelocity, red))
        # the window's rectangles in gymnasium's arithmetic (see _bar_geometry), the fixed sides precomputed
        rects = []
        for place, val, color in vertical:
            if abs(val) > 1e-4 and columns[place] is not None:
                y = (WINDOW_H - (WINDOW_H / 40.0 + WINDOW_H / 40.0 * val)) * fy
                lo, hi = (y, y_base) if y <= y_base else (y_base, y)
                (x0, x1), y0, y1 = columns[place], round(lo - 0.5), round(hi - 0.5)
                fill(color, (x0, y0, x1 - x0 + 1, y1 - y0 + 1))
                rects.append((x0, y0, x1, y1))
        y0, y1 = rows
        for place, val, color in horizontal:
            if abs(val) > 1e-4:
                xa, xb = place * (WINDOW_W / 40.0) * fx, (place + val) * (WINDOW_W / 40.0) * fx
                lo, hi = (xa, xb) if xa <= xb else (xb, xa)
                x0, x1 = round(lo + ix - 0.5), round(hi - ix - 0.5)
                if x1 >= x0:
                    fill(color, (x0, y0, x1 - x0 + 1, y1 - y0 + 1))
                    rects.append((x0, y0, x1, y1))
        return rects

    def _text_patch(self, s: str, ss: int = 2) -> tuple:
        """The score's blocks of the frame at `ss`: the smoothscaled, shrunk text on black, its (row, column) and the
        supersampled pixels (x0, y0, x1, y1, inclusive) that those blocks average; cached."""
        got = self._patches.get((ss, s))
        if got is None:
            if len(self._patches) > 4096:
                self._patches.clear()
            text, (x, y) = self._text(s, ss)
            w, h = text.get_size()
            c0, r0, c1, r1 = x // ss, y // ss, -(-(x + w) // ss), -(-(y + h) // ss)
            assert r0 >= BAR_ROWS, "the score reaches above the indicator bar"
            black = pygame.Surface(((c1 - c0) * ss, (r1 - r0) * ss))  # 32-bit, as smoothscale needs
            black.blit(text, (x - c0 * ss, y - r0 * ss))
            small = pygame.transform.smoothscale(black, (c1 - c0, r1 - r0))
            patch = np.frombuffer(pygame.image.tobytes(small, "RGB"), np.uint8).reshape(r1 - r0, c1 - c0, 3)
            box = (c0 * ss, r0 * ss, c1 * ss - 1, r1 * ss - 1)
            got = self._patches[(ss, s)] = (np.maximum(patch, 2) - np.uint8(2), (r0, c0), box)
        return got

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
