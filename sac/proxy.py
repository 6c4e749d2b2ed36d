"""``sac proxy serve [--host --port]``: the chaos suite's fault proxy, speaking the Toxiproxy
2.x HTTP API on loopback until interrupted. Exit status: 0 after Ctrl-C, 1 the address cannot
be bound, 2 bad arguments (a non-loopback host included)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(commands: Any) -> None:
    proxy = commands.add_parser("proxy", help="the Toxiproxy-compatible fault proxy")
    sub = proxy.add_subparsers(dest="action", required=True)
    serve = sub.add_parser("serve", help="serve the Toxiproxy HTTP API until interrupted")
    serve.add_argument("--host", default="127.0.0.1", help="loopback address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8474,
                       help="API port (default: 8474; 0: a free one, printed)")
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from sac.chaos.proxy import is_loopback, serve

    if not is_loopback(args.host):
        raise ValueError(f"the fault proxy listens on loopback only, not {args.host!r}")
    def ready(port: int) -> None:
        print(f"fault proxy: Toxiproxy API on http://{args.host}:{port}/", flush=True)

    try:
        serve(host=args.host, port=args.port, ready=ready)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"sac: error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
