"""Test (evaluate) a checkpoint of any mmpretrain / mmdet / mmseg config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE.pkl]
        [--show-dir DIR] [--out-metrics FILE.json] [--tta] [--non-strict]
        [--cfg-options k=v ...] [--launcher pytorch]

CHECKPOINT may also be a network exported by ``tools/export.py`` (``.onnx``,
FP32 or INT8, run in ONNX Runtime or ``--runtime openvino``; an OpenVINO
IR ``.xml``): the config's data preprocessor and post-processing run around
it in PyTorch (docs/user_guides/deploy.md#int8).

The checkpoint is loaded strictly: weights that do not fit the model are an
error unless ``--non-strict``.  ``--out`` is a pickle of raw predictions
(mmdet, mmpretrain) or, for segmentation configs, a directory of predicted
masks (mmseg's ``--out``).  Every option is checked before a model is built;
bad input prints ``error: <message>`` and exits with status 2.
"""

import argparse
import json
import os.path as osp
import sys

from mmengine.config import Config
from mmengine.model import BaseTTAModel, is_model_wrapper
from mmengine.runner import Runner

from hetdpt_mm.cli import ArgumentParser, run_reporting_errors
from hetdpt_mm.deploy.runtimes import RUNTIMES
from hetdpt_mm.errors import UsageError
from hetdpt_mm.fileio import (
    atomic_write_text,
    check_input_file,
    check_output_path,
    same_file,
)
from hetdpt_mm.runner import (
    add_runner_arguments,
    build_runner,
    follow_backbone_width,
    load_config,
    load_fitting,
    release_distributed,
    take_checkpoint_structure,
)
from hetdpt_mm.work_dir import check_not_run_file, check_work_dir, input_files

#: mmdet's and mmpretrain's ``--out``: a pickle of raw predictions.
PICKLE_SUFFIXES = ('.pkl', '.pickle')
#: Exported networks (tools/export.py), by the runtime that runs them
#: unless --runtime says.
EXPORTED_SUFFIXES = {'.onnx': 'onnxruntime', '.xml': 'openvino'}


def enable_visualization(cfg, args: argparse.Namespace) -> None:
    """Turn on the toolbox's visualization hook (mmdet / mmseg / mmpretrain
    spell its switches differently)."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise UsageError(
            '--show/--show-dir need a visualization hook in default_hooks'
        )
    if hook['type'] == 'VisualizationHook':  # mmpretrain
        hook['enable'] = True
        hook['out_dir'] = args.show_dir
    else:  # mmdet DetVisualizationHook, mmseg SegVisualizationHook
        hook['draw'] = True
        if args.show_dir:
            cfg.visualizer['save_dir'] = args.show_dir
            if hook['type'] == 'DetVisualizationHook':
                hook['test_out_dir'] = args.show_dir
    if args.show:
        hook['show'] = True
        hook['wait_time'] = args.wait_time


def is_segmentation(cfg) -> bool:
    evaluator = cfg.get('test_evaluator') or {}
    return isinstance(evaluator, dict) and evaluator.get('type') in (
        'IoUMetric',
        'mmseg.IoUMetric',
    )


def apply_out(cfg, out: str, inputs) -> None:
    """``--out``: mmseg writes predicted masks into a directory (its
    ``IoUMetric(output_dir=..., keep_results=True)``); the other toolboxes
    dump a pickle (MMEngine's ``DumpResults``, added after the build)."""
    if is_segmentation(cfg) and not out.endswith(PICKLE_SUFFIXES):
        if osp.exists(out) and not osp.isdir(out):
            raise UsageError(
                f'--out {out}: segmentation predictions go to a '
                'directory, and this is a file'
            )
        for path in inputs:
            if same_file(osp.dirname(osp.abspath(path)), out):
                raise UsageError(
                    f'--out {out} holds the input {path}; '
                    'choose another directory'
                )
        cfg.test_evaluator['output_dir'] = out
        cfg.test_evaluator['keep_results'] = True
        return
    check_output_path(out, inputs, force=True)
    check_not_run_file(out)
    if not out.endswith(PICKLE_SUFFIXES):
        raise UsageError(
            f'--out {out}: raw predictions are dumped as a '
            'pickle; give a .pkl file (a directory of masks is '
            'only for segmentation configs)'
        )


def apply_tta(cfg) -> None:
    missing = [key for key in ('tta_model', 'tta_pipeline') if key not in cfg]
    if missing:
        raise UsageError(
            f'--tta needs {" and ".join(missing)} in the config '
            '(as in mmdet / mmseg / mmpretrain configs)'
        )
    cfg.test_dataloader.dataset.pipeline = cfg.tta_pipeline
    cfg.model = dict(cfg.tta_model, module=cfg.model)


def load_for_test(runner: Runner, checkpoint: str, strict: bool) -> None:
    """Load the weights a test evaluates.  Strict by default: a checkpoint
    whose keys do not fit the model is an error, not a test of random
    weights (MMEngine's ``load_from`` only warns)."""
    model = (
        runner.model.module if is_model_wrapper(runner.model) else runner.model
    )
    if isinstance(model, BaseTTAModel):
        model = model.module
    load_fitting(
        model,
        checkpoint,
        'this config',
        strict,
        fix='; pass --non-strict to test it anyway',
    )


def exported_runtime(args: argparse.Namespace):
    """The runtime of an exported CHECKPOINT, or None for a checkpoint."""
    default = EXPORTED_SUFFIXES.get(osp.splitext(args.checkpoint)[1])
    if default is None:
        if args.runtime:
            raise UsageError('--runtime is for an exported .onnx or .xml')
        return None
    if args.tta or args.launcher != 'none':
        raise UsageError(
            'an exported network is tested in one process without --tta'
        )
    if default == 'openvino' and args.runtime == 'onnxruntime':
        raise UsageError('an OpenVINO IR (.xml) runs in openvino only')
    return args.runtime or default


def _build_and_test(
    cfg: Config, args: argparse.Namespace, runtime=None
) -> dict:
    runner = build_runner(cfg, test=True)
    if runtime:
        from hetdpt_mm.deploy.evaluate import deployed_model

        runner.model = deployed_model(
            cfg, runner.model, args.checkpoint, runtime
        )
    else:
        load_for_test(runner, args.checkpoint, strict=not args.non_strict)
    if args.out and args.out.endswith(PICKLE_SUFFIXES):
        from mmengine.evaluator import DumpResults

        runner.test_evaluator.metrics.append(
            DumpResults(out_file_path=args.out)
        )
    return runner.test()


def run_test(args: argparse.Namespace) -> dict:
    if '://' not in args.checkpoint:
        check_input_file(args.checkpoint, 'checkpoint')
    runtime = exported_runtime(args)
    cfg = load_config(args)
    inputs = input_files(cfg, args.config) + [args.checkpoint]
    if args.out_metrics:  # results are replaced, inputs and runs' files never
        check_output_path(args.out_metrics, inputs, force=True)
        check_not_run_file(args.out_metrics)
    if args.out:
        apply_out(cfg, args.out, inputs)
    check_work_dir(cfg, args.config)
    if args.tta:
        apply_tta(cfg)
    if args.show or args.show_dir:
        enable_visualization(cfg, args)
    cfg.load_from = None  # loaded below, strictly
    if not runtime:
        follow_backbone_width(cfg, args.checkpoint)
    take_checkpoint_structure(cfg, args.checkpoint)
    try:
        metrics = _build_and_test(cfg, args, runtime)
    finally:
        release_distributed()  # after the runner is gone: see its docstring
    if args.out_metrics:
        atomic_write_text(
            args.out_metrics,
            json.dumps(
                {
                    k: float(v) if hasattr(v, '__float__') else v
                    for k, v in metrics.items()
                },
                indent=1,
            ),
        )
    return metrics


def parse_args(argv=None):
    parser = ArgumentParser(description='Test a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--out',
        help='dump raw predictions to this pickle '
        '(segmentation: a directory of predicted masks)',
    )
    parser.add_argument(
        '--out-metrics', help='write the evaluation metrics to this JSON'
    )
    parser.add_argument(
        '--show', action='store_true', help='show prediction results'
    )
    parser.add_argument(
        '--show-dir', help='directory where painted images are saved'
    )
    parser.add_argument(
        '--wait-time', type=float, default=2, help='the interval of show (s)'
    )
    parser.add_argument(
        '--tta',
        action='store_true',
        help="test-time augmentation (the config's "
        'tta_model and tta_pipeline)',
    )
    parser.add_argument(
        '--runtime',
        choices=RUNTIMES,
        help='what runs an exported CHECKPOINT (default: onnxruntime for '
        '.onnx, openvino for .xml)',
    )
    parser.add_argument(
        '--non-strict',
        action='store_true',
        help="test even if the checkpoint's keys do not "
        'fit the model (missing weights stay random)',
    )
    add_runner_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run_reporting_errors(lambda: run_test(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
