"""`wm tui [RUN_DIR]` (or `python -m tui` in a checkout): the terminal UI over a run directory or a folder of runs."""

from __future__ import annotations

import argparse
import sys

from wm.core.errors import WMError
from wm.core.launcher import add_launcher_args, from_args


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default="runs", help="a run directory, or a directory of runs (default: runs)")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between reads of the run directory")
    add_launcher_args(p)


def main(args: argparse.Namespace | list[str] | None = None) -> int:
    """Run the app until the user quits: `args` parsed by `wm tui`, or a command line (`python -m tui`)."""
    if not isinstance(args, argparse.Namespace):
        p = argparse.ArgumentParser(
            prog="python -m tui", description="Terminal UI for World Models runs: stages, launch, logs, metrics."
        )
        add_args(p)
        args = p.parse_args(args)
    try:
        launcher = from_args(args)  # a bad --launcher or WM_LAUNCHER: one line before the UI starts
    except WMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from wm.tui.app import WMApp

    WMApp(args.path, poll_interval=args.poll, launcher=launcher).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
