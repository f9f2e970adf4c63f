"""``crossbert-results``: build the results page from the JSON its tools wrote, or check that it still is that.

    crossbert-results render            # docs/results/*.json + docs/results/_page.json -> docs/results.md
    crossbert-results --check           # exit 1 naming the first section where the page differs from a render

Tools publish their sections through ``megatron_crossbert.results_page.publish`` (JSON first, then their own
section of the page); this command rewrites the whole page from the JSON, so a page edited by hand, or by an
older tool that wrote markdown only, is put back in step with what its JSON holds.
"""

from __future__ import annotations

import argparse
import sys

from megatron_crossbert.cli import DefaultsHelpFormatter
from megatron_crossbert.cli.errors import add_debug_flag, cli_main

DEFAULT_PAGE = "docs/results.md"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crossbert-results", description=__doc__.split("\n\n")[0],
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("command", nargs="?", choices=["render"],
                        help="render: rewrite the page from its section JSON")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming the first section where the page differs from a render")
    parser.add_argument("--page", default=DEFAULT_PAGE,
                        help="the page; its sections are the JSON files in the folder of the same name")
    add_debug_flag(parser)
    return parser


@cli_main
def main(argv: list[str] | None = None) -> int:
    from megatron_crossbert.results_page.store import first_difference, write_page

    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.check and args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.check:
        differs = first_difference(args.page)
        if differs:
            print(f"{args.page}: {differs} differs from a render; run crossbert-results render", file=sys.stderr)
            return 1
        print(f"{args.page}: in step with its JSON")
        return 0
    print(f"wrote {write_page(args.page)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
