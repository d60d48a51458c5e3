"""What the TUI's pilot tests share (tests/test_tui*.py)."""

from __future__ import annotations


async def wait_until(pilot, cond, timeout: float = 15.0) -> None:
    """Pause the app until `cond()` holds (polling; no wall-clock assertion, just a generous cap)."""
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")
