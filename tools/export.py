#!/usr/bin/env python
"""Export a classifier, a backbone, or a DETR / UperNet model with a HetDPT
backbone to ONNX, and verify the graph against PyTorch in ONNX Runtime
(and OpenVINO) at several input sizes; see docs/user_guides/deploy.md and
:mod:`hetdpt_mm.deploy.export`, which does the work.

Examples (from the repository root)::

    python tools/export.py classifier CONFIG CKPT --out cls.onnx
    python tools/export.py backbone CONFIG CKPT --out backbone.onnx \\
        --img-size 224 224 --verify-sizes 320 256
    python tools/export.py detr configs/demo/detr_hetdpt_demo.py CKPT \\
        --out detr.onnx --img-size 48 48 --verify-sizes 64 80 \\
        --runtimes onnxruntime openvino
    python tools/export.py classifier CONFIG CKPT --out cls.onnx \\
        --runtimes onnxruntime openvino --int8 --calib-images 256

Exit status: 0 verified and written, 1 a difference above --tolerance or
an INT8 metric drop above --max-drop (nothing written), 2 bad input
(``error: ...``, nothing written).
"""

import sys
from typing import List, Optional, Sequence

from hetdpt_mm.cli import (
    ArgumentParser,
    ConfigOptionsAction,
    output_path,
    positive_float,
    run_reporting_errors,
)
from hetdpt_mm.deploy.evaluate import CALIB_SPLITS
from hetdpt_mm.deploy.export import ExportOptions, run_export
from hetdpt_mm.deploy.networks import TASKS
from hetdpt_mm.deploy.quantize import (
    CALIBRATION_METHODS,
    DEFAULT_KEEP_FP32,
    FP32_GROUPS,
    SCOPES,
)
from hetdpt_mm.deploy.runtimes import OPSET, RUNTIMES
from hetdpt_mm.errors import VerificationError


def parse_args(argv: List[str]) -> ExportOptions:
    parser = ArgumentParser(
        description='Export a model to ONNX (opset %d, dynamic batch and, '
        'unless --static-hw, height and width) and verify it against '
        'PyTorch.' % OPSET
    )
    parser.add_argument(
        'task',
        choices=TASKS,
        help='the network to export (detr/upernet: raw head '
        'outputs, no pre- or post-processing)',
    )
    parser.add_argument('config', help="the model's config")
    parser.add_argument(
        'checkpoint',
        help='its checkpoint (the HetDPT '
        "record in it gives the backbone's structure)",
    )
    parser.add_argument(
        '--out',
        type=output_path,
        required=True,
        help='the .onnx file to write',
    )
    parser.add_argument(
        '--img-size',
        type=int,
        nargs=2,
        metavar=('H', 'W'),
        help="example input size (default: the backbone's img_size)",
    )
    parser.add_argument(
        '--batch-size',
        type=int,
        default=2,
        help='example batch size (>= 2; default 2)',
    )
    parser.add_argument(
        '--static-hw',
        action='store_true',
        help='fix height and width to --img-size',
    )
    parser.add_argument(
        '--verify-sizes',
        type=int,
        nargs=2,
        action='append',
        default=[],
        metavar=('H', 'W'),
        help='also verify at this size (repeatable)',
    )
    parser.add_argument(
        '--verify-batch-sizes',
        type=int,
        nargs='+',
        default=[1, 3],
        help='batch sizes to verify (default 1 3)',
    )
    parser.add_argument(
        '--runtimes',
        nargs='+',
        default=['onnxruntime'],
        choices=RUNTIMES,
        help='runtimes to verify in (default onnxruntime)',
    )
    parser.add_argument(
        '--tolerance',
        type=positive_float,
        default=1e-4,
        help='largest absolute difference allowed (default 1e-4)',
    )
    parser.add_argument(
        '--seed', type=int, default=0, help='seed of the random inputs'
    )
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=ConfigOptionsAction,
        help='override config settings, key=value',
    )
    parser.add_argument(
        '--force', action='store_true', help='replace an existing --out'
    )
    int8 = parser.add_argument_group('INT8 (docs/user_guides/deploy.md#int8)')
    int8.add_argument(
        '--int8',
        action='store_true',
        help='also quantize for each of --runtimes (NAME.int8.onnx: ONNX '
        'Runtime QDQ; NAME.int8.xml/.bin: OpenVINO NNCF) and evaluate FP32 '
        "vs INT8 on the config's test split",
    )
    int8.add_argument(
        '--calib-images',
        type=int,
        default=256,
        help='calibration images (default 256)',
    )
    int8.add_argument(
        '--calib-split',
        choices=CALIB_SPLITS,
        help="where they come from (default: the config's calib_dataloader "
        'if it has one, else train, through the test pipeline)',
    )
    int8.add_argument(
        '--calib-method',
        choices=CALIBRATION_METHODS,
        default='minmax',
        help="ONNX Runtime's activation ranges (default minmax)",
    )
    int8.add_argument(
        '--keep-fp32',
        nargs='*',
        choices=list(FP32_GROUPS),
        default=list(DEFAULT_KEEP_FP32),
        help='products left FP32 (default: %s; none: quantize all)'
        % ' '.join(DEFAULT_KEEP_FP32),
    )
    int8.add_argument(
        '--int8-scope',
        choices=SCOPES,
        default='network',
        help='quantize the whole network (default) or its backbone only',
    )
    int8.add_argument(
        '--max-drop',
        type=float,
        default=1.0,
        help='largest loss of the metric (top-1, mAP x 100, mIoU) in points '
        'allowed (default 1.0)',
    )
    args = parser.parse_args(argv)
    return ExportOptions(**vars(args))


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_reporting_errors(
        lambda: run_export(parse_args(argv)), {VerificationError: 1}
    )


if __name__ == '__main__':
    sys.exit(main())
