"""``python -m holdfast.upstream``: the same as ``holdfast upstream``."""

from __future__ import annotations

import argparse
import sys

from holdfast.upstream.cli import COMMAND, add_arguments, run

__all__: list[str] = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m holdfast.upstream", description=COMMAND[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
