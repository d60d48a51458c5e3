"""How numbers and durations are written for people (status, report, pipeline, logs, the TUI): one home."""

from __future__ import annotations

import math
from typing import Any


def number(v: Any) -> str:
    """A value as a short readable string: ints (and integral floats) without a dot, other floats to 4 significant
    digits, anything else (bools, strings, inf, nan) as `str`."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e9:
        return str(int(v))
    return f"{v:.4g}"


def figures(figs: dict[str, Any], sep: str = "  ") -> str:
    """Namespaced key figures without their namespace: `{"vae/loss": 41.2}` → `loss 41.2`; a name already shown keeps
    its namespace (`{"es/generation": 60, "pick/generation": 50}` → `generation 60  pick generation 50`)."""
    seen: set[str] = set()
    parts = []
    for k, v in figs.items():
        short = k.split("/", 1)[-1]
        parts.append(f"{short if short not in seen else k.replace('/', ' ')} {number(v)}")
        seen.add(short)
    return sep.join(parts)


def duration(s: float | None) -> str:
    """`1h05m` from an hour on, else `3m07s`; `—` for None."""
    if s is None:
        return "—"
    s = int(round(max(0.0, s)))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def count(n: Any, word: str) -> str:
    """`1 episode`, `100 episodes`: a count with its noun (an `s` added unless the count is 1)."""
    return f"{n} {word}" if str(n) == "1" else f"{n} {word}s"
