#!/usr/bin/env python
"""Convert a checkpoint's HetDPTViT backbone to the merged (deployable) form,
or apply a spec to dense weights.

    python tools/merge_ckpt.py IN OUT [--spec JSON|FILE] [--form FORM]
        [--prefix PREFIX] [--arch NAME|JSON] [--force]

Accepts our classification checkpoints (gated or pruned; the spec comes from
``meta['hetdpt']`` or from the gates), mmdet / mmseg / mmpretrain checkpoints
(only the backbone under ``--prefix``, default from the meta or
``backbone.``, changes; every other tensor is copied bit-identical), the
authors' stage-2 checkpoints (``{'model': state_dict}`` in timm layout: give
the spec with ``--spec``, e.g. ``'{"attn_removed": [0, 3, 7, 8, 11],
"act_removed": [2, 7, 8, 10, 11]}'``) and bare state dicts.  A checkpoint that
is already merged is written unchanged, in OUT's format.

Given ``--spec``, dense weights (an official DeiT file, mmpretrain's, ours)
are cut to that spec, heads kept: ``--form merged`` (default) for the
deployable network, ``--form pruned`` for the unmerged one to fine-tune.

OUT is ``{'state_dict': ..., 'meta': {..., 'hetdpt': record}}`` (the input's
other meta entries kept; a bare classifier in mmpretrain's classifier
layout, ``backbone.`` and ``head.layers.head``; an EMAHook's
``ema_state_dict`` merged the same way; optimizer, schedulers and message
hub dropped, named in the summary) and loads with
``HetDPTViT(init_cfg=dict(type='Pretrained', checkpoint=OUT,
prefix='backbone.'))`` without further arguments; ``OUT.safetensors`` holds
its state dict as safetensors (the record in the backbone's extra state).
Everything is validated before anything is written; OUT is written
atomically, never over IN, never through a link, and an existing OUT is kept
unless ``--force``.  Errors print ``error: <message>``
and exit with status 2.
"""

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from hetdpt_mm.apis.merge_ckpt import run_merge
from hetdpt_mm.cli import ArgumentParser, output_path, run_reporting_errors


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = ArgumentParser(
        description='Merge the HetDPTViT backbone of a checkpoint: drop '
        'removed attention layers and gates, merge activation-free FFNs.'
    )
    parser.add_argument('input', type=Path, help='checkpoint to convert')
    parser.add_argument(
        'output', type=output_path, help='merged checkpoint to write'
    )
    parser.add_argument(
        '--spec',
        help='prune spec as JSON or a JSON file: {"attn_removed": '
        '[...], "act_removed": [...]} (needed for the authors\' stage-2 '
        'checkpoints, and to apply a spec to dense weights; a gated or '
        "merged checkpoint's spec it must match)",
    )
    parser.add_argument(
        '--form',
        choices=('merged', 'pruned'),
        default='merged',
        help='form of the output backbone (default: merged; pruned keeps '
        'the FFNs of removed GELUs as two linears, to fine-tune)',
    )
    parser.add_argument(
        '--prefix',
        help='state-dict prefix of the backbone (default: from '
        'the meta, else "backbone." or none for a bare ViT state dict)',
    )
    parser.add_argument(
        '--arch',
        help='architecture for checkpoints without HetDPT meta '
        'whose number of heads is not that of a DeiT preset: a preset name '
        'or JSON {"embed_dims", "num_layers", "num_heads", "mlp_ratio"}',
    )
    parser.add_argument(
        '--force',
        action='store_true',
        help='replace an existing OUT (never IN)',
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_reporting_errors(lambda: run_merge(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
