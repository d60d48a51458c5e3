"""`wm tui [RUN_DIR]` (or `python -m tui` in a checkout): the terminal UI over a run directory or a folder of runs."""

from __future__ import annotations

import argparse


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default="runs", help="a run directory, or a directory of runs (default: runs)")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between reads of the run directory")


def main(args: argparse.Namespace | list[str] | None = None) -> int:
    """Run the app until the user quits: `args` parsed by `wm tui`, or a command line (`python -m tui`)."""
    if not isinstance(args, argparse.Namespace):
        p = argparse.ArgumentParser(
            prog="python -m tui", description="Terminal UI for World Models runs: stages, launch, logs, metrics."
        )
        add_args(p)
        args = p.parse_args(args)
    from wm.tui.app import WMApp

    WMApp(args.path, poll_interval=args.poll).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
