"""A Log pane that follows a growing text file (a stage's console output or its logs/<stage>.log)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

from textual import work
from textual.widgets import Log
from wm.tui.process import follow

TAIL_BYTES = 64_000  # how much of an existing file is shown when following starts


def _size(path: Path) -> int | None:
    """The size of `path`, or None if it does not exist."""
    try:
        return path.stat().st_size
    except OSError:  # missing (or unreadable: shown as missing, as Path.exists would)
        return None


class FollowLog(Log):
    """Shows the end of a file and then every line appended to it; memory is bounded by `max_lines`.

    `follow(path)` replaces whatever was followed before (one exclusive worker per widget), so switching
    stages never leaves a stale reader behind; the worker dies with the widget. The reads themselves run in a
    thread (`process.follow`), one at a time.
    """

    def __init__(self, max_lines: int = 2000, poll: float = 0.1, *, id: str | None = None):
        super().__init__(max_lines=max_lines, id=id)
        self.poll = poll
        self.path: Path | None = None

    def write_line(self, line: str, scroll_end: bool | None = None) -> FollowLog:
        """A line longer than the pane is wide is wrapped onto the next rows (indented by two), not cut at the edge:
        a stage's error line names the file and the fix at its end. The width is the pane's when the line arrives."""
        width = self.scrollable_content_region.width - 1
        if width < 20 or len(line) <= width:
            return super().write_line(line, scroll_end)
        for i, part in enumerate(textwrap.wrap(line, width, subsequent_indent="  ", drop_whitespace=False) or [line]):
            super().write_line(part if i == 0 else part.rstrip(), scroll_end)
        return self

    @work(exclusive=True, group="follow", exit_on_error=False)
    async def follow(self, path: Path, empty: str = "", note: str = "") -> None:
        """Clear the pane, show `note` (if any) and the last TAIL_BYTES of `path` (or `empty` if it does not exist),
        then follow it."""
        self.path = Path(path)
        self.clear()
        if note:
            self.write_line(note)
        size = await asyncio.to_thread(_size, self.path)  # file system calls run in a thread, never on the UI loop
        offset = 0
        if size is not None:
            offset = max(0, size - TAIL_BYTES)
            if offset:
                self.write_line(f"… (showing the end of {self.path})")
        elif empty:
            self.write_line(empty)
        skip = offset > 0  # the first line after a mid-file seek is partial
        async for line in follow(self.path, offset, interval=self.poll):
            if skip:
                skip = False
                continue
            self.write_line(line)
