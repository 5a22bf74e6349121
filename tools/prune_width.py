#!/usr/bin/env python
"""Width-prune a checkpoint's HetDPTViT with Torch-Pruning's isomorphic
pruning (HetDPT+ from a merged HetDPT checkpoint; the width-only baseline
from dense weights).

    python tools/prune_width.py IN OUT (--target-macs 2.4G | --ratio R)
        [--macs-convention with-attention-products|without-attention-products]
        [--importance taylor --calib-dir DIR | --importance magnitude]
        [--calib-batches N] [--calib-batch-size B] [--max-ratio R]
        [--search-steps N] [--prefix PREFIX] [--arch NAME|JSON] [--report JSON]
        [--plot PNG] [--force]

The embedding width, the attention heads and head dimensions and the FFN
hidden widths are pruned globally (Isomorphic Pruning's DeiT recipe), the
classifier heads' inputs with them; the per-block widths go into the
checkpoint's HetDPT record, so ``HetDPTViT`` (and the classification, DETR
and UperNet configs) rebuild the network from OUT alone.  A MACs target is
met by the smallest one-shot channel ratio (up to ``--max-ratio``, found by
bisection in ``--search-steps`` trials) whose MACs are at or below it, counted
with the two token x token products of every attention (the default) or
without them (``--macs-convention without-attention-products``, the paper's
HetDPT+ targets; docs/user_guides/reproduce.md).  Taylor
importance needs calibration images (an ImageFolder); magnitude none.

It prints the MACs and parameters per stage (the dense network of the
checkpoint's arch, the depth-pruned input unless dense, the width-pruned
result), the search trials, the chosen ratio and the per-block widths;
``--report`` writes them as JSON, ``--plot`` draws the widths.

OUT is ``{'state_dict': ..., 'meta': {..., 'hetdpt': record,
'hetdpt_width': report}}``; everything is validated before anything is
written, OUT is written atomically, never over IN, and an existing OUT is
kept unless ``--force``.  Errors print ``error: <message>`` and exit with
status 2.  The work is :func:`hetdpt_mm.apis.prune_width.run_prune_width`.
"""

import sys
from pathlib import Path
from typing import Optional, Sequence

from hetdpt_mm.analysis import MACS_CONVENTIONS
from hetdpt_mm.apis.prune_width import (
    PruneWidthOptions,
    parse_macs,
    run_prune_width,
)
from hetdpt_mm.cli import (
    ArgumentParser,
    argument_type,
    output_path,
    run_reporting_errors,
)
from hetdpt_mm.pruning.width import IMPORTANCES


def parse_args(argv: Optional[Sequence[str]]) -> PruneWidthOptions:
    parser = ArgumentParser(
        description='Width-prune the HetDPTViT of a checkpoint (Torch-'
        'Pruning isomorphic pruning) to a MACs target or by a ratio.'
    )
    parser.add_argument('input', type=Path, help='checkpoint to prune')
    parser.add_argument('output', type=output_path, help='checkpoint to write')
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument(
        '--target-macs',
        type=argument_type(parse_macs),
        help='MACs of the pruned classifier on one image, e.g. 2.4G',
    )
    target.add_argument(
        '--ratio',
        type=float,
        help='channel pruning ratio in one step, e.g. 0.5',
    )
    parser.add_argument(
        '--macs-convention',
        choices=list(MACS_CONVENTIONS),
        help='count the two token x token products of every '
        'attention (with-attention-products, default) or '
        'leave them out (without-attention-products: the '
        "paper's HetDPT+ targets)",
    )
    parser.add_argument(
        '--importance',
        choices=IMPORTANCES,
        help='Torch-Pruning group importance (default '
        'taylor: needs --calib-dir)',
    )
    parser.add_argument(
        '--calib-dir',
        type=Path,
        help='ImageFolder of calibration images for Taylor '
        'importance (e.g. a subset of ImageNet train)',
    )
    parser.add_argument(
        '--calib-batches', type=int, help='calibration batches (default 50)'
    )
    parser.add_argument(
        '--calib-batch-size',
        type=int,
        help='images per calibration batch (default 64)',
    )
    parser.add_argument(
        '--max-ratio',
        type=float,
        help='largest channel ratio tried for a MACs target (default 0.9)',
    )
    parser.add_argument(
        '--search-steps',
        type=int,
        help='bisection trials for --target-macs (default '
        '10: the ratio to within 0.001)',
    )
    parser.add_argument(
        '--prefix',
        help='state-dict prefix of the backbone '
        '(default: from the record or meta)',
    )
    parser.add_argument(
        '--arch',
        help='architecture of a checkpoint without '
        "a HetDPT record whose heads are not a preset's",
    )
    parser.add_argument(
        '--report',
        type=output_path,
        help='write the MACs / params per stage, the search '
        'trials and the widths as JSON',
    )
    parser.add_argument(
        '--plot',
        type=output_path,
        help='draw the per-block widths (e.g. widths.png)',
    )
    parser.add_argument(
        '--force',
        action='store_true',
        help='replace existing outputs (never IN)',
    )
    args = parser.parse_args(argv)
    return PruneWidthOptions(
        **{
            name: value
            for name, value in vars(args).items()
            if value is not None
        }
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_reporting_errors(lambda: run_prune_width(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
