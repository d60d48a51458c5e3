"""The world texture of the fast CarRacing renderer (`wm.envs.car_render`), used after the camera's zoom.

The static world of a track (background field, grass, road tiles, kerbs) is drawn once as palette indices and
sampled at the supersampled pixels' centres through the camera. At SS = 2 the 2×2 box average that follows is
taken on the palette indices themselves: a block's four indices (when the palette has at most 16 colours, 4 bits
each) form a 16-bit key into a table of the averaged, `SHRINK_LUT`-mapped colours, so the frame comes out of one
gather, with no 32-bit pixels and no smoothscale. The table holds exactly what smoothscale's
fixed point gives for a factor of 2 (each axis ⌊(a + b)/2⌋, across first, then down: checked against pygame).
"""

from __future__ import annotations

import math

import numpy as np
import pygame
from gymnasium.envs.box2d.car_racing import SCALE, ZOOM
from pygame import gfxdraw

from wm.envs.car_polygons import FIELD, GRASS, _apply, _pixels

VIEW_REACH = 80.0  # world units: the texture's margin around the track (the view reaches 48.3 from the hull)
TABLE_COLORS = 16  # the palette box average's indices are 4 bits (a 2×2 block: a 16-bit key)
_KEY = np.dtype("<u2")  # two neighbouring uint8 indices read as one little-endian uint16: left | right << 8

# gymnasium's smoothscale of the window to 96×96 truncates twice in fixed point: a flat area of value v comes out
# as max(v − 2, 0) (measured for every v; 255 → 253). Our box average by an integer factor is exact, so the
# same map is applied to it.
SHRINK_LUT = np.maximum(np.arange(256) - 2, 0).astype(np.uint8)


def block_table(rgb: np.ndarray) -> np.ndarray:
    """(65536, 3) uint8: for the key a | c << 4 | b << 8 | d << 12 of a 2×2 block (a b / c d, palette indices of
    `rgb` (16, 3)), smoothscale's average ⌊(⌊(a + b)/2⌋ + ⌊(c + d)/2⌋)/2⌋ of their colours, through SHRINK_LUT."""
    c = rgb.astype(np.int16)
    pair = (c[:, None] + c[None, :]) >> 1  # symmetric: pair[a, b] = pair[b, a]
    block = (pair[None, :, None] + pair[:, None, :, None]) >> 1  # [d, b, c, a]: (pair[b, a] + pair[d, c]) >> 1
    np.subtract(block, 2, out=block)  # SHRINK_LUT
    np.maximum(block, 0, out=block)
    return block.astype(np.uint8).reshape(65536, 3)


def block_average(pal: np.ndarray, table: np.ndarray, out: np.ndarray, key: np.ndarray) -> None:
    """out (rows/2, cols/2, 3) ← table[key of each 2×2 block of pal] (rows × cols uint8 indices < 16, C-contiguous);
    key is (rows/2, cols/2) uint16 scratch."""
    pairs = pal.view(_KEY)  # a pixel and its right neighbour: left | right << 8, both < 16
    # the top pair plus the bottom pair shifted by a nibble: a | c << 4 | b << 8 | d << 12, no carries (all < 16)
    np.left_shift(pairs[1::2], 4, out=key)
    np.add(key, pairs[0::2], out=key)
    table.take(key, axis=0, out=out, mode="clip")


class WorldTexture:
    """The static world of one track (background field, grass, road tiles, kerbs in gymnasium's order) drawn once as
    palette indices, `density` texels per world unit, over the track's bounding box grown by VIEW_REACH.

    After the zoom, `sample` gives the palette indices of the supersampled pixels at their centres (NumPy index
    gathering through the camera's inverse) instead of drawing the visible polygons; the car is drawn on them (an
    8-bit surface), and `average` turns them into the frame. The polygons are drawn with `_pixels` as on screen,
    less the widening by half a window pixel, which is taken along the world's x instead of the screen's (≤ 0.03
    world units, a twentieth of a state pixel, apart). A tile whose colour changes (`redraw`) is drawn again with
    the polygons after it that overlap it, clipped to it.
    """

    def __init__(self, env, density: float, fmt: pygame.Surface, extra: tuple = ()):
        self.d = d = density
        road = env._verts[len(GRASS) :].reshape(-1, 2)
        lo, hi = road.min(0) - VIEW_REACH, road.max(0) + VIEW_REACH
        self.x0, self.y0 = float(lo[0]), float(lo[1])
        self.w = 4 * math.ceil((hi[0] - lo[0]) * d / 4)  # rows of whole 32-bit words
        self.h = math.ceil((hi[1] - lo[1]) * d)
        # sample coordinates in 16.16 fixed point: int32 holds them (half the bytes of NumPy's intp) up to 32767 texels
        self.itype = np.int32 if max(self.w, self.h) < 32000 and self.w * self.h < 2**31 else np.intp
        self.index = np.zeros((self.h, self.w), np.uint8)
        self.flat = self.index.reshape(-1)
        self.surf = pygame.image.frombuffer(self.index, (self.w, self.h), "P")
        self.surf.set_palette([(k, 0, 0) for k in range(256)])  # drawing with colour (k, 0, 0) stores k
        self.fmt = fmt
        self.lut = np.zeros(256, np.uint32)  # palette index → pixel value of the supersampled surfaces
        self.rgb = np.zeros((TABLE_COLORS, 3), np.uint8)  # the first palette colours, for the block table
        self.colors: dict[tuple[int, int, int], int] = {}
        self.table: np.ndarray | None = None  # block_table of the palette, built when first needed after a change
        self.cam = (-d * self.x0, -d * self.y0, d, 0.0, 0.0, d)  # world → texels: u = d·(x − x0), v = d·(y − y0)
        self.ix = 0.5 - 0.5 * d / (ZOOM * SCALE)  # centre-sampled, widened by half a window pixel after the zoom
        self.bufs: dict[tuple, tuple] = {}
        self.keys: dict[tuple[int, int], np.ndarray] = {}  # block_average's scratch
        self.index[:] = self.color((0, 0, 0))
        for rgb in extra:  # the car's colours, in the palette from the start (one table build per track)
            self.color(rgb)
        for _, pts in _pixels(_apply(FIELD, self.cam), self.ix):
            gfxdraw.filled_polygon(self.surf, pts, (self.color(env._colors_of[0]), 0, 0))
        self._draw(env, np.arange(len(env._verts)))
        if len(self.colors) <= TABLE_COLORS:
            self.table = block_table(self.rgb)  # here, at reset, rather than in the first step after the zoom

    def color(self, rgb: tuple[int, int, int]) -> int:
        """The palette index of a colour, added where new."""
        k = self.colors.get(rgb)
        if k is None:
            k = self.colors[rgb] = len(self.colors)
            if k > 255:
                raise ValueError("more than 256 colours in the CarRacing world")
            self.lut[k] = self.fmt.map_rgb(rgb)
            if k < TABLE_COLORS:
                self.rgb[k] = rgb
                self.table = None
        return k

    def _draw(self, env, ids: np.ndarray) -> None:
        rgb, fill, color = env._rgb, gfxdraw.filled_polygon, self.color
        for k, p in _pixels(_apply(env._verts[ids], self.cam), self.ix, env._edges[ids]):
            fill(self.surf, p, (color(rgb[ids[k]]), 0, 0))

    def redraw(self, env, changed: list[int]) -> None:
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

    def sample(self, cam, shape: tuple[int, int], rows: int) -> tuple[np.ndarray, pygame.Surface] | None:
        """The palette indices of a surface of `shape` (height, width) through the camera `cam`, its first `rows` rows
        sampled (the rest is left as it was: the indicator bar's), as an array and the 8-bit surface on it (both
        reused between calls); None where the view leaves the texture."""
        cols = shape[1]
        ox, oy, ax, bx, ay, by = cam
        d, det = self.d, ax * by - bx * ay
        # surface (X, Y) → world (x, y) = M⁻¹·(X − ox, Y − oy) → texels (u, v), sampled at the pixels' centres
        uX, uY, vX, vY = d * by / det, -d * bx / det, -d * ay / det, d * ax / det
        u0 = d * ((bx * oy - by * ox) / det - self.x0) + 0.5 * (uX + uY)
        v0 = d * ((ay * ox - ax * oy) / det - self.y0) + 0.5 * (vX + vY)
        for i, j in ((0, 0), (0, cols - 1), (rows - 1, 0), (rows - 1, cols - 1)):
            u, v = u0 + uX * j + uY * i, v0 + vX * j + vY * i
            if not (1 <= u <= self.w - 2 and 1 <= v <= self.h - 2):
                return None
        bufs = self.bufs.get((shape, rows))
        if bufs is None:  # preallocated: a fresh array of this size would come from the OS, page by page, each call
            pal = np.zeros(shape, np.uint8)
            surf = pygame.image.frombuffer(pal, shape[::-1], "P")
            surf.set_palette([(k, 0, 0) for k in range(256)])
            t = self.itype
            arrays = (np.empty((3, 2, 1)), np.empty((2, rows), t), np.empty((2, cols), t), np.empty((2, rows, cols), t))
            bufs = self.bufs[(shape, rows)] = (np.arange(rows), np.arange(cols), *arrays, pal, surf)
        i, j, coef, lead, across, vu, pal, surf = bufs
        # texel (⌊v⌋, ⌊u⌋) of each pixel in 16.16 fixed point (integer passes are the cheapest), row-major index; v and
        # u side by side (each NumPy call costs microseconds, the more so when another env has had the caches)
        f = 65536.0
        coef[:, :, 0] = (v0, u0), (vY, uY), (vX * f, uX * f)
        np.rint((coef[0] + coef[1] * i) * f, out=lead, casting="unsafe")  # (v0 + vY·i)·f, (u0 + uY·i)·f: integers
        np.rint(coef[2] * j, out=across, casting="unsafe")  # (vX·f)·j, (uX·f)·j
        np.add(lead[:, :, None], across[:, None, :], out=vu)
        np.right_shift(vu, 16, out=vu)
        v, u = vu
        np.multiply(v, self.w, out=v)
        np.add(v, u, out=v)
        self.flat.take(v, out=pal[:rows], mode="wrap")  # indices in range (the corners are): nothing wraps
        return pal, surf

    def average(self, pal: np.ndarray, out: np.ndarray) -> bool:
        """The 2×2 box average of the palette indices `pal` (height × width, from `sample`, even sizes) as RGB through
        SHRINK_LUT into `out` (height/2, width/2, 3) uint8, as smoothscale by 2 and the shrink give; False (nothing
        written) where the palette has more than TABLE_COLORS colours."""
        if len(self.colors) > TABLE_COLORS:
            return False
        if self.table is None:
            self.table = block_table(self.rgb)
        key = self.keys.get(pal.shape)
        if key is None:
            key = self.keys[pal.shape] = np.empty(out.shape[:2], _KEY)
        block_average(pal, self.table, out, key)
        return True
