"""``python -m gameday.node.faultfs --backing DIR --mountpoint DIR --control SOCK [--seed N]``

Mounts the fault filesystem (foreground, multi-threaded, ``allow_other``) and serves
its control socket until unmounted or sent SIGTERM/SIGINT; every hung operation is
released on the way out.
"""

import argparse
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import mfusepy

from gameday.node.faultfs.control import ControlServer
from gameday.node.faultfs.fs import FaultFilesystem
from gameday.node.faultfs.mount import FSNAME
from gameday.node.faultfs.rules import RuleSet


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gameday.node.faultfs")
    parser.add_argument("--backing", type=Path, required=True)
    parser.add_argument("--mountpoint", type=Path, required=True)
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    rules = RuleSet(rng=random.Random(args.seed))
    backing, mountpoint = args.backing.resolve(), args.mountpoint.absolute()
    server = ControlServer(rules, args.control, info={
        "mountpoint": str(mountpoint), "backing": str(backing)})
    server.start()
    try:
        mfusepy.FUSE(FaultFilesystem(backing, rules), str(mountpoint), foreground=True,
                     allow_other=True, default_permissions=True, fsname=FSNAME,
                     subtype="faultfs")
    except RuntimeError as exc:  # libfuse's non-zero return after a signal ended the loop
        print(f"fault filesystem on {mountpoint} stopped: libfuse returned {exc}",
              file=sys.stderr)
    finally:
        rules.close()
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
