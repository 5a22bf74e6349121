#!/usr/bin/env python
"""Fit the Model Accuracy Predictor (MAP) and split a pruning budget.

Prints the leave-2-out CV table over polynomial degrees, the chosen fit, the
allocation of ``--budget`` removed layers between attention and GELU layers
(or FFN branches, when the points' columns count them; for each ``--bounds``
choice) and, given a cost model, latency-aware
recommendations for ``--speedup`` / ``--min-accuracy`` targets.

Examples (from the repository root)::

    python tools/fit_map.py points.csv --depth 12 --budget 8 --bounds both \
        --plot map.png --save-fit map_fit.json
    python tools/fit_map.py points.csv --depth 12 --budget 10 \
        --cost analytic --arch deit-base --img-size 800 1216 --speedup 1.3 1.5
    python tools/fit_map.py points.csv --depth 12 --cost measured.json \
        --speedup 1.5          # see hetdpt_mm.pruning.cost.MeasuredCost

Outputs are written atomically, only after every input has been validated,
never over an input, and an existing output is kept unless ``--force``.
Errors print ``error: <message>`` and exit with status 2.
The work is :func:`hetdpt_mm.apis.fit_map.run_fit_map`.
"""

import sys
from pathlib import Path
from typing import Optional, Sequence

from hetdpt_mm.apis.fit_map import FitMapOptions, run_fit_map
from hetdpt_mm.cli import ArgumentParser, run_reporting_errors
from hetdpt_mm.pruning import ARCH_PRESETS


def parse_args(argv: Optional[Sequence[str]]) -> FitMapOptions:
    parser = ArgumentParser(
        description='Fit MAP to (a, t, accuracy) points and allocate a '
        'depth-pruning budget between attention and GELU layers (or FFN '
        "branches, as the points' columns say)."
    )
    parser.add_argument(
        'points',
        type=Path,
        help='CSV or JSON points: accuracy (or acc) and '
        'either a, t (retained ratios) or n_attn, n_act '
        '(or n_attn, n_ffn: removed counts)',
    )
    parser.add_argument(
        '--depth', type=int, required=True, help='number of blocks L'
    )
    parser.add_argument(
        '--budget', type=int, help='number K of layers to remove in total'
    )
    parser.add_argument(
        '--bounds',
        choices=('full', 'paper', 'both'),
        help='per-type count bounds: full = 0..L, paper = '
        "1..L-1 (the authors' snippet), both (default full)",
    )
    parser.add_argument(
        '--degrees',
        type=int,
        nargs='+',
        help='candidate polynomial degrees (default 1 2 3 4)',
    )
    parser.add_argument(
        '--cost',
        help='"analytic" (MACs; needs --arch) or a measured latency JSON file',
    )
    parser.add_argument(
        '--arch',
        choices=sorted(ARCH_PRESETS),
        help='architecture for --cost analytic',
    )
    parser.add_argument(
        '--img-size',
        type=int,
        nargs=2,
        metavar=('H', 'W'),
        help='input size for --cost analytic (default 224 224)',
    )
    parser.add_argument(
        '--speedup',
        type=float,
        nargs='+',
        help='speedup targets: maximise predicted accuracy '
        'subject to speedup >= target (needs --cost)',
    )
    parser.add_argument(
        '--min-accuracy',
        type=float,
        nargs='+',
        help='accuracy targets: maximise speedup subject to '
        'predicted accuracy >= target (needs --cost)',
    )
    parser.add_argument(
        '--plot',
        type=Path,
        help='write the fitted surface here (e.g. map.png)',
    )
    parser.add_argument(
        '--save-fit',
        type=Path,
        help='write the fit as JSON (MAPFit.from_dict)',
    )
    parser.add_argument(
        '--save-allocation',
        type=Path,
        help='write the allocation of --budget for each '
        '--bounds choice as JSON (Allocation.from_dict, by '
        'bounds name)',
    )
    parser.add_argument(
        '--force', action='store_true', help='replace existing output files'
    )
    args = parser.parse_args(argv)
    # Options not given keep FitMapOptions' defaults.
    return FitMapOptions(
        **{
            name: value
            for name, value in vars(args).items()
            if value is not None
        }
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_reporting_errors(lambda: run_fit_map(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
