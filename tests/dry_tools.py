"""Dry runs of the tools, for the docs' command blocks that train or test on
ImageNet, COCO or ADE20K, or time full-size models (tests/test_docs.py).

A dry run parses the command with the tool's own ``parse_args``, loads a
config with its ``--cfg-options`` and builds its model on the meta device
(no weights, no data), requires every file the command or the config reads
(checkpoints, MAP points, specs, configs) to exist, and makes every file
the run would write, empty, so that a later command of the block finds it.
:mod:`warm_tools` runs a ``tools/*.py`` command, also one that
``tools/dist_train.sh`` launches, this way when
:data:`warm_tools.DRY_VARIABLE` is set.
"""

import dataclasses
import os.path as osp
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import torch
from mmengine.config import ConfigDict
from mmengine.registry import HOOKS, MODELS, DefaultScope

from hetdpt_mm.cli import run_reporting_errors
from hetdpt_mm.runner import apply_resume, check_pretrained_exist, load_config

#: Options naming what a tool writes.
OUTPUTS = frozenset(
    {
        'output',
        'out',
        'out_metrics',
        'report',
        'plot',
        'save_fit',
        'save_allocation',
        'json_path',
        'md_path',
    }
)
#: A value naming a file a tool reads: ``[NAME=|NAME:KEY=]PATH.suffix``.
INPUT = re.compile(
    r'^(?:[\w:.]+=)?(?P<path>[^={}\s]+\.(pth|safetensors|csv|json|py))$'
)


def required(value) -> None:
    """Every file ``value`` (a string, or a list or dict of them) names
    must exist."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            required(item)
        return
    match = INPUT.match(str(value))
    if match and '://' not in str(value) and not osp.exists(match['path']):
        raise FileNotFoundError(
            f'{match["path"]}: no such file (make or download it first)'
        )


def made(path) -> None:
    """What a tool writes: an empty file (its folder made), or an empty
    JSON object (a spec file: no layer removed)."""
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text('{}' if str(path).endswith('.json') else '')


def without_init(node):
    """A model config without what loads weights."""
    if isinstance(node, dict):
        return ConfigDict(
            {
                key: without_init(value)
                for key, value in node.items()
                if key not in ('init_cfg', 'pretrained', 'teacher_checkpoint')
            }
        )
    if isinstance(node, list):
        return [without_init(value) for value in node]
    return node


def load_and_build(args):
    """The config of a train or test command, its model built on the meta
    device, and what the run reads checked."""
    cfg = load_config(args)
    apply_resume(cfg, getattr(args, 'resume', None))
    check_pretrained_exist(
        cfg, loads_weights=bool(cfg.get('load_from') or cfg.get('resume'))
    )
    hooks = list(cfg.get('custom_hooks') or [])
    required(
        [cfg.get('load_from'), cfg.model.get('backbone', {}).get('prune_spec')]
        + [
            hook.get(key)
            for hook in hooks
            for key in ('map_points', 'map_fit')
        ]
    )
    scope = cfg.get('default_scope', 'mmpretrain')
    with DefaultScope.overwrite_default_scope(scope), torch.device('meta'):
        MODELS.build(without_init(cfg.model))
        built = [HOOKS.build(hook) for hook in hooks]
    return cfg, built


def dry_train(args) -> None:
    """What a training run leaves in its work dir: its last checkpoint and
    what its hooks write (merged file, MAP points, found spec)."""
    cfg, hooks = load_and_build(args)
    work_dir = Path(cfg.work_dir)
    loop = cfg.train_cfg
    last = work_dir / (
        f'iter_{loop.max_iters}.pth'
        if 'max_iters' in loop
        else f'epoch_{loop.max_epochs}.pth'
    )
    made(last)
    (work_dir / 'last_checkpoint').write_text(str(last))
    runner = SimpleNamespace(cfg=cfg, work_dir=str(work_dir))
    for hook in hooks:
        for writer in ('output_path', 'points_path'):
            if hasattr(hook, writer):
                made(getattr(hook, writer)(runner))
        if getattr(hook, 'spec_file', None):
            made(work_dir / hook.spec_file)


def dry_test(args) -> None:
    load_and_build(args)


def run(argv) -> int:
    """``python tools/NAME.py ARGS``, dry; returns the exit status."""
    tool = runpy.run_path(argv[0], run_name='dry_tool')
    name = Path(argv[0]).stem

    def action():
        options = tool['parse_args'](argv[1:])
        fields = (
            dataclasses.asdict(options)
            if dataclasses.is_dataclass(options)
            else vars(options)
        )
        for key, value in fields.items():
            if key in OUTPUTS:
                made(value)
            elif key != 'cfg_options':
                required(value)
        extra = {'train': dry_train, 'test': dry_test}.get(name)
        if extra is not None:
            extra(options)
        else:
            required(fields.get('cfg_options'))

    return run_reporting_errors(action)
