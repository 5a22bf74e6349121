"""``tools/train.py``: train any mmpretrain / mmdet / mmseg config, checking
the config, its inputs and the work dir before a runner is built."""

import argparse

from ..errors import UsageError
from ..runner import (
    apply_resume,
    build_runner,
    check_pretrained_exist,
    load_config,
    release_distributed,
)
from ..work_dir import check_work_dir, claim_work_dir

__all__ = ['run_train']


def run_train(args: argparse.Namespace) -> None:
    """Train ``args.config`` with the options of ``tools/train.py``."""
    cfg = load_config(args)
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise UsageError('the config has no auto_scale_lr.base_batch_size')
        cfg.auto_scale_lr.enable = True
    if args.no_validate:
        if args.validate_first:
            raise UsageError(
                '--validate-first needs validation: drop --no-validate'
            )
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if args.validate_first:
        cfg.custom_hooks = list(cfg.get('custom_hooks') or []) + [
            dict(type='ValidateFirstHook')
        ]
    apply_resume(cfg, args.resume)
    check_work_dir(
        cfg,
        args.config,
        resume_from=cfg.load_from if cfg.get('resume') else None,
        training=True,
    )
    # loaded weights replace init_cfg's
    check_pretrained_exist(
        cfg, loads_weights=bool(cfg.get('load_from') or cfg.get('resume'))
    )
    try:
        with claim_work_dir(
            cfg, resume=args.resume is not None, overwrite=args.overwrite
        ):
            build_runner(cfg).train()
    finally:
        release_distributed()  # after the runner is gone: see its docstring
