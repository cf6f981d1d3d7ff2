"""``kvscope models [QUERY]``: list and search the bundled model configs.

Each row: the Hugging Face id, the family (config ``model_type``), the parameter count (kvscope's
own count from the config, so estimated), the checkpoint's quantization, the attention kind (MHA,
GQA, MQA, MLA, with sliding-window / linear / state-space layers named) and whether the bundled copy
is verbatim or trimmed. QUERY matches any of these words, case-insensitively (all words must match).
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("models", help="list and search the bundled model configs",
                       description="List the bundled model ids with family, parameters, quantization and "
                                   "attention kind. QUERY words filter (all must match, case-insensitive).")
    p.add_argument("query", nargs="*", help="words to match, e.g. 'qwen3 fp8' or 'mla'")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--all", action="store_true",
                   help="also list entries without a usable bundled config (metadata only / incomplete copy)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..catalog.listing import catalog_rows
    from ..report.models_text import render_models

    rows, total = catalog_rows(" ".join(args.query), include_unusable=args.all)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_models(rows, total))
    return 0
