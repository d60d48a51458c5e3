"""`python -m tui [RUN_DIR]`: the terminal UI over a run directory (or a directory of runs, default runs/)."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the app until the user quits."""
    p = argparse.ArgumentParser(
        prog="python -m tui", description="Terminal UI for World Models runs: stages, launch, logs, metrics."
    )
    p.add_argument("path", nargs="?", default="runs", help="a run directory, or a directory of runs (default: runs)")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between reads of the run directory")
    args = p.parse_args(argv)
    from tui.app import WMApp

    WMApp(args.path, poll_interval=args.poll).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
