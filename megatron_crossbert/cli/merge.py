"""``crossbert-merge``: many Megatron ``.bin/.idx`` prefixes into one, or into a blend file.

Megatron-LM's ``tools/merge_datasets.py`` command line works unchanged: ``--input DIR --output-prefix
PREFIX`` merges every ``.bin/.idx`` pair in DIR in sorted name order (the order sharded preprocessing names
its tasks in, so the result is byte-identical to one crossbert-preprocess run over the same files). Unlike
it, the folder is checked first (one line naming the file, never a merge of fewer documents): a run of
crossbert-preprocess-datatrove must be complete (every task's report; the missing tasks are named), a half
pair (.bin without .idx), a gap in the task numbering or a pair no task wrote is refused, and so is a
truncated pair, or a token dtype, vocabulary or tokenizer record that differs from the first prefix's;
temporaries of unfinished tasks are never read. --output-prefix must lie outside the folder (a later merge
of it would read the output as one more shard). ``--blend-file NAME.blend.json`` writes, instead of (or
besides) the merge, a file that ``--data-path`` accepts: training on it equals training on the merge, with
no copy of the data. Outputs appear atomically; existing ones need --force (moved aside).
"""

from __future__ import annotations

import argparse
import logging
import sys

from megatron_crossbert.cli import DefaultsHelpFormatter
from megatron_crossbert.cli.errors import add_debug_flag, cli_main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crossbert-merge", description=__doc__, formatter_class=DefaultsHelpFormatter)
    p.add_argument("--input", required=True,
                   help="directory holding the .bin/.idx pairs to merge (taken in sorted name order)")
    p.add_argument("--output-prefix", default=None, help="path of the merged .bin/.idx without the suffix")
    p.add_argument("--blend-file", default=None,
                   help="write NAME.blend.json listing the pairs with their token counts (a --data-path that "
                        "reads them as their merge)")
    p.add_argument("--json-key", default=None,
                   help="merge only this key's task outputs (<rank>_<key>_document), for folders written with "
                        "several --json-keys")
    p.add_argument("--force", action="store_true", help="move existing outputs aside instead of refusing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--multimodal", action="store_true", help=argparse.SUPPRESS)
    add_debug_flag(p)
    return p


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.multimodal:
        raise ValueError("--multimodal: multimodal indexed datasets are not supported; CrossBERT data is text only")
    if not args.output_prefix and not args.blend_file:
        raise ValueError("--output-prefix: give it, --blend-file, or both")
    from megatron_crossbert.progress import progress_bar

    from megatron_crossbert.data.datatrove.shards import checked_prefixes
    from megatron_crossbert.data.indexed.blend_file import write_blend_file
    from megatron_crossbert.data.indexed.merge import check_output_prefix, merge_shards, read_shards

    prefixes = checked_prefixes(args.input, args.json_key)
    shard_set = read_shards(prefixes)
    if args.output_prefix:  # before the blend file is written: both outputs or neither
        check_output_prefix(shard_set, args.output_prefix)
    if args.blend_file:
        payload = write_blend_file(shard_set, args.blend_file, force=args.force)
        print(f"blend file: {args.blend_file} ({len(prefixes)} prefixes, {payload['documents']} documents, "
              f"{payload['tokens']} tokens)")
    if args.output_prefix:
        with progress_bar(total=len(prefixes), unit=" prefixes", disable=args.no_progress) as bar:
            summary = merge_shards(shard_set, args.output_prefix, force=args.force, progress=lambda _: bar.update())
        print(f"merged {summary['prefixes']} prefixes into {args.output_prefix}.bin/.idx: {summary['documents']} "
              f"documents, {summary['tokens']} tokens ({summary['dtype']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
