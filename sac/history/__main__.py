"""``python -m sac.history --schema`` prints the JSON Schema of a history line (the content of
``docs/history.schema.json``); ``--table`` the table of kinds of ``docs/history.md``."""

from __future__ import annotations

import argparse
import sys

from .schema import markdown_table, schema_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sac.history", description=__doc__)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--schema", action="store_true", help="the JSON Schema of a line")
    what.add_argument("--table", action="store_true", help="the Markdown table of the kinds")
    args = parser.parse_args(argv)
    sys.stdout.write(schema_text() if args.schema else markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
