"""`hybrid-vla`: one sub-command family per area, each module registering its own sub-commands:
engine (verify, info, run, export), bench (bench, memory), profile (profile, --roofline), plan (plan), graph (graph, demo, schema), launch_file (launch), bags (record, replay, seat-report,
make-sample-drive), learn (train), convert (convert). Heavy imports (torch, rclpy) happen inside the commands, after the stop handler is in
place, so a Ctrl-C at any moment ends the program cleanly."""

from __future__ import annotations

import argparse
import sys

from .. import stop


def build_parser() -> argparse.ArgumentParser:
    from . import bags, bench, convert, engine, graph, launch_file, learn, plan, profile
    parser = argparse.ArgumentParser(prog="hybrid-vla", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for area in (engine, bench, profile, plan, graph, launch_file, bags, learn, convert):
        area.register(sub)
    return parser


def main(argv=None) -> int:
    stop.install()  # first: a signal from here on is a stop request, never a KeyboardInterrupt mid-start-up
    args = build_parser().parse_args(argv)
    from ..errors import HybridVLAError
    from .common import refuse_unserved
    try:
        refuse_unserved(args)   # a model this command does not serve: one line, with what serves it
        code = args.func(args)
    except stop.StopRequested:
        code = 0
    except HybridVLAError as exc:
        print(f"hybrid-vla {args.command}: error: {exc}", file=sys.stderr)
        code = 2
    finally:
        stop.ignore_further()
    if stop.requested():
        print(f"hybrid-vla {args.command}: stopped ({stop.reason()})", file=sys.stderr)
    return code
