"""Test (evaluate) a checkpoint of any mmpretrain / mmdet / mmseg config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE.pkl]
        [--show-dir DIR] [--out-metrics FILE.json] [--cfg-options k=v ...]
        [--launcher pytorch]
"""
import argparse
import json
import os.path as osp

from hetdpt_mm.fileio import atomic_write_text, check_output_path
from hetdpt_mm.runner import (add_runner_arguments, build_runner, load_config,
                              release_distributed)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--out', help='dump raw predictions to this pickle')
    parser.add_argument('--out-metrics',
                        help='write the evaluation metrics to this JSON')
    parser.add_argument('--show', action='store_true',
                        help='show prediction results')
    parser.add_argument('--show-dir',
                        help='directory where painted images are saved')
    parser.add_argument('--wait-time', type=float, default=2,
                        help='the interval of show (s)')
    add_runner_arguments(parser)
    return parser.parse_args(argv)


def enable_visualization(cfg, args):
    """Turn on the toolbox's visualization hook (mmdet / mmseg / mmpretrain
    spell its switches differently)."""
    hook = cfg.default_hooks.get('visualization')
    if hook is None:
        raise SystemExit('error: --show/--show-dir need a visualization hook '
                         'in default_hooks')
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


def main(argv=None):
    args = parse_args(argv)
    if not osp.isfile(args.checkpoint):
        raise SystemExit(f'error: checkpoint {args.checkpoint} does not exist')
    for out in filter(None, (args.out, args.out_metrics)):
        try:  # results are replaced, inputs never
            check_output_path(out, [args.config, args.checkpoint], force=True)
        except (ValueError, OSError) as err:
            raise SystemExit(f'error: {err}') from None
    cfg = load_config(args)
    cfg.load_from = args.checkpoint
    if args.show or args.show_dir:
        enable_visualization(cfg, args)
    runner = build_runner(cfg)
    if args.out:
        from mmengine.evaluator import DumpResults
        runner.test_evaluator.metrics.append(
            DumpResults(out_file_path=args.out))
    try:
        metrics = runner.test()
    finally:
        release_distributed()
    if args.out_metrics:
        atomic_write_text(args.out_metrics, json.dumps(
            {k: float(v) if hasattr(v, '__float__') else v
             for k, v in metrics.items()}, indent=1))


if __name__ == '__main__':
    main()
