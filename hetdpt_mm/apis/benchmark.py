#!/usr/bin/env python
"""Measure the speed, MACs and parameters of dense vs HetDPT-pruned models.

Three comparisons, each run in ONE process with every model timed once per
repeat in rotating order (after warm-up), reporting the median time per
batch with its spread and the speedup over the first (baseline) model, both
as a ratio of medians and per repeat (paired):

* ``backbone``: a HetDPTViT in its dense, pruned (unmerged) and merged forms,
  given by ``--arch`` + ``--spec`` or by a ``--checkpoint`` with HetDPT meta;
* ``detr``: DETR (mmdet's config) with the dense vs the merged HetDPT DeiT-B;
* ``upernet``: mmseg's stock DeiT-B UperNet vs the same UperNet with the
  merged HetDPT DeiT-B, with the backbone also timed alone (Amdahl's law).

``detr`` and ``upernet`` build these models from the stock configs with the
backbone swapped (random weights: speed does not depend on them), or take
real configs with ``--config NAME=PATH`` (repeatable; the first is the
baseline). End to end means ``model.test_step`` on a batch of uint8 images:
normalisation, backbone, neck, heads and post-processing, no data loading.

Examples (from the repository root)::

    python tools/benchmark.py backbone --arch deit-base \\
        --spec '{"attn_removed": [0, 3, 7, 8, 11],
                 "act_removed": [2, 7, 8, 10, 11]}' \\
        --batch-size 16 --json bench/deit-b.json --md bench/deit-b.md
    python tools/benchmark.py detr --img-size 800 1216
    python tools/benchmark.py upernet --img-size 512 512 --profile 10
    python tools/benchmark.py detr \\
        --config dense=configs/detr_deit_b_dense.py \\
        --config merged=configs/detr_hetdpt_deit_b.py

Outputs are written atomically, only after every input has been validated,
and an existing output is kept unless ``--force``. Errors print
``error: <message>`` and exit with status 2.
"""
import argparse
import json
import os
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn as nn
from mmengine.config import Config, DictAction
from torch.profiler import ProfilerActivity

from hetdpt_mm.benchmark import (AUTHORS_SPEC, BACKBONE_VARIANTS, MacCount,
                                 TensorForward, TimingStats, amdahl_bound,
                                 analytic_macs, autocast,
                                 build_backbone_variants, build_from_config,
                                 count_macs, count_params, hetdpt_config,
                                 machine_info, make_test_batch,
                                 paired_speedups, spec_text, stock_config,
                                 synchronize, time_runs)
from hetdpt_mm.cli import ArgumentParser, UsageError, run_reporting_errors
from hetdpt_mm.fileio import atomic_write_text, check_output_path
from hetdpt_mm.models.hetdpt_vit import HetDPTViT, resolve_arch
from hetdpt_mm.spec import PruneSpec

TASKS = ('backbone', 'detr', 'upernet')
#: Models the dense-prediction tasks build without --config.
BUILTIN_MODELS = {'detr': BACKBONE_VARIANTS,
                  'upernet': ('stock', ) + BACKBONE_VARIANTS}
DEFAULTS = {
    # task: (img_size, batch_size, repeats, models, split_backbone)
    'backbone': ((224, 224), 16, 5, BACKBONE_VARIANTS, False),
    'detr': ((800, 1216), 1, 3, ('dense', 'merged'), False),
    'upernet': ((512, 512), 1, 3, ('stock', 'merged'), True),
}
#: The size the built-in backbones store their position embedding at, as in
#: configs/detr_hetdpt_deit_b.py and configs/upernet_hetdpt_deit_b_ade20k.py.
BACKBONE_IMG_SIZE = {'detr': (224, 224), 'upernet': (512, 512)}


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = ArgumentParser(
        description='Benchmark dense vs HetDPT-pruned models (speed, MACs, '
        'parameters) in one process.')
    parser.add_argument('task', choices=TASKS,
                        help='backbone variants, DETR, or UperNet')
    model = parser.add_argument_group('models')
    model.add_argument('--arch', default='deit-base',
                       help='deit-tiny/small/base or a JSON dict '
                       '(embed_dims, num_layers, num_heads[, mlp_ratio])')
    model.add_argument('--spec',
                       help='JSON prune spec, e.g. \'{"attn_removed": [0, 3],'
                       ' "act_removed": [2]}\' (default: the authors\' '
                       'DeiT-B spec, unless a --checkpoint says)')
    model.add_argument('--checkpoint',
                       help='backbone: a checkpoint whose HetDPT meta (or '
                       'keys) gives the structure; its weights are loaded')
    model.add_argument('--prefix',
                       help='backbone: key prefix of the backbone in '
                       '--checkpoint (e.g. backbone.)')
    model.add_argument('--distilled', action=argparse.BooleanOptionalAction,
                       default=None,
                       help='with the DeiT distillation token (default: '
                       'backbone no, detr/upernet yes, as HetDPT models)')
    model.add_argument('--models', nargs='+',
                       help='which models, in order (the first is the '
                       'baseline): dense pruned merged, and for upernet '
                       'also stock (mmseg\'s own ViT)')
    model.add_argument('--config', action='append', default=[],
                       metavar='NAME=PATH',
                       help='detr/upernet: benchmark this config instead of '
                       'the built-in models (repeatable, first = baseline)')
    model.add_argument('--cfg-options', nargs='+', default=[],
                       metavar='[NAME:]KEY=VALUE',
                       help='override settings of every --config, or of '
                       'NAME only (VALUE: JSON, or as mmengine parses it)')
    run = parser.add_argument_group('measurement')
    run.add_argument('--img-size', type=int, nargs='+', metavar='H [W]',
                     help='input size (default: backbone 224, detr '
                     '800 1216, upernet 512)')
    run.add_argument('--batch-size', type=int,
                     help='images per batch (default: backbone 16, else 1)')
    run.add_argument('--dtype', choices=('fp32', 'bf16', 'fp16'),
                     default='fp32',
                     help='fp32, or AMP (autocast) in bf16 / fp16')
    run.add_argument('--device', default='cpu', help='cpu, cuda, cuda:1 ...')
    run.add_argument('--threads', type=int,
                     help='torch.set_num_threads (default: torch\'s)')
    run.add_argument('--clock', choices=('wall', 'process'), default='wall',
                     help='wall: elapsed time (default); process: CPU '
                     'seconds of this process, for a loaded machine (use '
                     'with --threads 1, CPU only)')
    run.add_argument('--warmup', type=int, default=1,
                     help='untimed batches per model first (default 1)')
    run.add_argument('--repeats', type=int,
                     help='timed rounds over all models (default: backbone '
                     '5, else 3)')
    run.add_argument('--iters', type=int, default=1,
                     help='batches per model per round (default 1)')
    run.add_argument('--split-backbone', action=argparse.BooleanOptionalAction,
                     default=None,
                     help='also time each backbone alone and report the '
                     'Amdahl bound (default: on for upernet)')
    run.add_argument('--no-macs', dest='macs', action='store_false',
                     help='skip counting MACs (saves one traced forward)')
    run.add_argument('--profile', type=int, default=0, metavar='N',
                     help='profile one batch of each model with '
                     'torch.profiler and report its N costliest operators')
    out = parser.add_argument_group('output')
    out.add_argument('--json', type=Path, help='write the results as JSON')
    out.add_argument('--md', type=Path, help='write the markdown tables')
    out.add_argument('--force', action='store_true',
                     help='replace existing output files')
    args = parser.parse_args(argv)
    resolve_defaults(args)
    return args


def resolve_defaults(args: argparse.Namespace) -> None:
    """Fill task defaults and reject combinations that cannot work."""
    img_size, batch_size, repeats, models, split = DEFAULTS[args.task]
    if args.img_size is None:
        args.img_size = img_size
    elif len(args.img_size) == 1:
        args.img_size = (args.img_size[0], ) * 2
    elif len(args.img_size) != 2:
        raise UsageError('--img-size takes H or H W')
    args.img_size = tuple(args.img_size)
    args.batch_size = args.batch_size or batch_size
    args.repeats = args.repeats or repeats
    for name in ('batch_size', 'repeats', 'iters'):
        if getattr(args, name) < 1:
            raise UsageError(f'--{name.replace("_", "-")} must be >= 1')
    if args.warmup < 0:
        raise UsageError('--warmup must be >= 0')
    if min(args.img_size) < 1:
        raise UsageError(f'--img-size must be positive, got {args.img_size}')
    if args.threads is not None and args.threads < 1:
        raise UsageError('--threads must be >= 1')
    if args.clock == 'process' and torch.device(args.device).type != 'cpu':
        raise UsageError('--clock process measures CPU work; use the wall '
                         f'clock on {args.device}')
    if args.split_backbone is None:
        args.split_backbone = split
    elif args.split_backbone and args.task == 'backbone':
        raise UsageError('--split-backbone is for detr and upernet: the '
                         'backbone task times backbones only')
    if args.distilled is None:
        args.distilled = args.task != 'backbone'
    args.arch = parse_json_or_text(args.arch)
    try:
        depth = resolve_arch(args.arch)['num_layers']
    except ValueError as err:
        raise UsageError(f'--arch: {err}') from None
    if args.spec is not None:
        try:
            args.spec = PruneSpec.coerce(json.loads(args.spec),
                                         depth).to_dict()
        except (json.JSONDecodeError, TypeError, ValueError) as err:
            raise UsageError(f'--spec: {err}') from None
    elif args.checkpoint is None:
        if depth != AUTHORS_SPEC.depth:
            raise UsageError(f'--arch has {depth} blocks: give its --spec '
                             '(the default is the authors\' 12-block DeiT-B '
                             'spec)')
        args.spec = AUTHORS_SPEC.to_dict()
    if args.task == 'backbone':
        if args.config or args.cfg_options:
            raise UsageError('--config and --cfg-options are for detr and '
                             'upernet; backbone takes --arch/--spec or '
                             '--checkpoint')
        allowed = BACKBONE_VARIANTS
    else:
        if args.checkpoint or args.prefix:
            raise UsageError('--checkpoint is for the backbone task; for '
                             'detr/upernet give the checkpoint in the config '
                             '(or --cfg-options)')
        allowed = BUILTIN_MODELS[args.task]
        args.config = [parse_named_path(item) for item in args.config]
        if args.config and args.models:
            raise UsageError('--models selects built-in models; with '
                             '--config, the configs are the models')
        if args.cfg_options and not args.config:
            raise UsageError('--cfg-options applies to --config models')
    if args.config:
        args.models = [name for name, _ in args.config]
        if len(set(args.models)) != len(args.models):
            raise UsageError(f'--config names must be unique, got '
                             f'{args.models}')
    else:
        args.models = list(args.models or models)
        unknown = [m for m in args.models if m not in allowed]
        if unknown:
            raise UsageError(f'unknown models {unknown} for {args.task}; '
                             f'choose from {list(allowed)}')
        if len(set(args.models)) != len(args.models):
            raise UsageError(f'--models has duplicates: {args.models}')


def parse_json_or_text(value: str) -> Any:
    """A command-line value: JSON when it parses, else the text."""
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def parse_named_path(item: str):
    name, sep, path = item.partition('=')
    if not sep or not name or not path:
        raise UsageError(f'--config takes NAME=PATH, got {item!r}')
    if not Path(path).is_file():
        raise UsageError(f'--config {name}: no such file {path}')
    return name, path


def parse_cfg_options(options: Sequence[str], names: Sequence[str]
                      ) -> Dict[Optional[str], Dict[str, Any]]:
    """``KEY=VALUE`` (all configs) and ``NAME:KEY=VALUE`` (one config), by
    config name (``None``: all)."""
    parsed: Dict[Optional[str], Dict[str, Any]] = {}
    for option in options:
        key, sep, value = option.partition('=')
        if not sep or not key:
            raise UsageError(f'--cfg-options takes [NAME:]KEY=VALUE, got '
                             f'{option!r}')
        name, colon, rest = key.partition(':')
        if colon:
            if name not in names:
                raise UsageError(f'--cfg-options {option!r}: no --config '
                                 f'named {name!r} (have {list(names)})')
            key = rest
        else:
            name = None
        try:
            parsed_value = json.loads(value)
        except json.JSONDecodeError:
            parsed_value = DictAction._parse_iterable(value)
        parsed.setdefault(name, {})[key] = parsed_value
    return parsed


def check_outputs(args: argparse.Namespace) -> None:
    """Fail before any work if an output path is unusable."""
    outputs = [p for p in (args.json, args.md) if p is not None]
    if len(outputs) == 2 and outputs[0].absolute() == outputs[1].absolute():
        raise UsageError(f'--json and --md are the same file {outputs[0]}')
    inputs = [path for _, path in args.config]
    if args.checkpoint:
        inputs.append(args.checkpoint)
    for out in outputs:
        check_output_path(out, inputs=inputs, force=args.force)


# ------------------------------------------------------------------ models
@dataclass
class Entry:
    """One model under test: how to run a batch, and what to count."""
    name: str
    description: str
    model: nn.Module
    run: Callable[[], Any]
    macs_module: nn.Module
    macs_inputs: torch.Tensor
    backbone: nn.Module
    backbone_inputs: torch.Tensor


def backbone_entries(args: argparse.Namespace) -> List[Entry]:
    variants = build_backbone_variants(
        arch=args.arch, spec=args.spec, variants=args.models,
        checkpoint=args.checkpoint, prefix=args.prefix,
        img_size=args.img_size, distilled=args.distilled)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(args.batch_size, 3, *args.img_size,
                         generator=generator).to(args.device)
    entries = []
    for name, model in variants.items():
        model.to(args.device)
        entries.append(Entry(
            name=name, description=describe(model), model=model,
            run=lambda model=model: model(images), macs_module=model,
            macs_inputs=images[:1], backbone=model,
            backbone_inputs=images))
    return entries


def describe(model: nn.Module) -> str:
    """What a model's backbone is, for the tables."""
    backbone = model if isinstance(model, HetDPTViT) else model.backbone
    if not isinstance(backbone, HetDPTViT):
        toolbox = type(backbone).__module__.split('.')[0]
        return f'{toolbox} {type(backbone).__name__}'
    spec = backbone.prune_spec
    if spec.is_dense:
        return 'HetDPTViT dense'
    form = {'merged': 'pruned and merged', 'pruned': 'pruned, FFNs unmerged',
            'gated': 'gated'}[backbone.form]
    return f'HetDPTViT {form} ({spec_text(spec)})'


def config_entries(args: argparse.Namespace) -> List[Entry]:
    if args.config:
        options = parse_cfg_options(args.cfg_options, args.models)
        configs = []
        for name, path in args.config:
            cfg = Config.fromfile(path)
            cfg.merge_from_dict(options.get(None, {}))
            cfg.merge_from_dict(options.get(name, {}))
            configs.append((name, cfg))
    else:
        configs = [(name, builtin_config(args, name)) for name in args.models]
    entries = []
    for name, cfg in configs:
        model = build_from_config(cfg).to(args.device)
        data = make_test_batch(cfg.get('default_scope'), args.batch_size,
                               args.img_size)
        with torch.no_grad():
            batch = model.data_preprocessor(data, False)
        entries.append(Entry(
            name=name, description=describe(model), model=model,
            run=lambda model=model, data=data: model.test_step(data),
            macs_module=TensorForward(model, batch['data_samples'][:1]),
            macs_inputs=batch['inputs'][:1], backbone=model.backbone,
            backbone_inputs=batch['inputs']))
    return entries


def builtin_config(args: argparse.Namespace, name: str) -> Config:
    if name == 'stock':
        return stock_config(args.task)
    return hetdpt_config(args.task, arch=args.arch,
                         spec=None if name == 'dense' else args.spec,
                         merged=name == 'merged',
                         img_size=BACKBONE_IMG_SIZE[args.task],
                         distilled=args.distilled)


# ------------------------------------------------------------ measurement
def measure_macs(entry: Entry, args: argparse.Namespace) -> Dict[str, Any]:
    counts: Dict[str, Any] = dict(params=count_params(entry.model))
    if entry.backbone is not entry.model:
        counts['backbone_params'] = count_params(entry.backbone)
    if not args.macs:
        return counts
    macs: MacCount = count_macs(entry.macs_module, entry.macs_inputs)
    counts['macs'] = macs.to_dict()
    backbone = entry.backbone
    if backbone is not entry.model:
        counts['backbone_macs'] = count_macs(
            backbone, entry.backbone_inputs[:1]).to_dict()
    if isinstance(backbone, HetDPTViT) and all(
            s % backbone.patch_size == 0 for s in args.img_size):
        counts['backbone_analytic_macs'] = analytic_macs(backbone,
                                                         args.img_size)
    return counts


def profile(run: Callable, top: int,
            args: argparse.Namespace) -> List[Dict[str, Any]]:
    """The ``top`` operators by self time (device time on CUDA) in one
    batch of ``run``."""
    activities = [ProfilerActivity.CPU]
    if torch.device(args.device).type == 'cuda':
        activities.append(ProfilerActivity.CUDA)
    with torch.inference_mode(), autocast(args.device, args.dtype):
        run()  # warm
        with torch.profiler.profile(activities=activities) as prof:
            run()
            synchronize(args.device)
    events = prof.key_averages()
    key = ('self_device_time_total' if len(activities) > 1 else
           'self_cpu_time_total')
    total = sum(getattr(e, key) for e in events) or 1.0
    rows = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:top]
    return [dict(op=e.key, calls=e.count, self_ms=getattr(e, key) / 1e3,
                 share=getattr(e, key) / total) for e in rows]


def run_benchmark(args: argparse.Namespace) -> Dict[str, Any]:
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info(args.device)
    entries = (backbone_entries(args) if args.task == 'backbone' else
               config_entries(args))
    runs = {}
    for entry in entries:
        runs[entry.name] = entry.run
        if args.split_backbone:
            runs[f'{entry.name}/backbone'] = (
                lambda e=entry: e.backbone(e.backbone_inputs))
    counts = {entry.name: measure_macs(entry, args) for entry in entries}
    timings = time_runs(runs, batch_size=args.batch_size,
                        repeats=args.repeats, warmup=args.warmup,
                        iters=args.iters, device=args.device,
                        dtype=args.dtype, clock=args.clock)
    profiles = {name: profile(run, args.profile, args)
                for name, run in runs.items()} if args.profile else {}
    if hasattr(os, 'getloadavg'):
        machine['loadavg_after'] = [round(v, 2) for v in os.getloadavg()]
    baseline = entries[0].name
    models = []
    for entry in entries:
        name = entry.name
        record = dict(name=name, description=entry.description,
                      **counts[name], timing=timings[name].to_dict(),
                      speedup=speedup(timings[baseline], timings[name],
                                      counts[baseline].get('macs'),
                                      counts[name].get('macs')))
        if args.split_backbone:
            key = f'{name}/backbone'
            record['backbone_timing'] = timings[key].to_dict()
            record['backbone_speedup'] = speedup(
                timings[f'{baseline}/backbone'], timings[key],
                counts[baseline].get('backbone_macs'),
                counts[name].get('backbone_macs'))
        if profiles:
            record['profile'] = profiles[entry.name]
            if args.split_backbone:
                record['backbone_profile'] = profiles[f'{entry.name}/backbone']
        models.append(record)
    result = dict(
        task=args.task,
        command='python tools/benchmark.py ' + shlex.join(args.argv),
        settings=dict(img_size=list(args.img_size), batch_size=args.batch_size,
                      dtype=args.dtype, device=args.device,
                      threads=torch.get_num_threads(), clock=args.clock,
                      warmup=args.warmup,
                      repeats=args.repeats, iters=args.iters,
                      # --config models take all of these from configs.
                      arch=None if args.config else args.arch,
                      spec=None if args.config else args.spec,
                      distilled=None if args.config else args.distilled,
                      configs=dict(args.config) or None),
        machine=machine, baseline=baseline, models=models)
    if args.split_backbone:
        result['amdahl'] = amdahl_section(timings, entries)
    return result


def speedup(base: TimingStats, other: TimingStats,
            base_macs: Optional[Dict] = None,
            other_macs: Optional[Dict] = None) -> Dict[str, Any]:
    """Speedup of ``other`` over ``base``: ratio of medians, per-repeat
    (paired) ratios, ratio of the fastest repeats (the least disturbed on a
    shared machine), and the MACs ratio when both were counted."""
    paired = paired_speedups(base, other)
    result = dict(
        median=base.median / other.median,
        paired=paired, paired_median=statistics.median(paired),
        paired_min=min(paired), paired_max=max(paired),
        best=min(base.seconds) / min(other.seconds))
    if base_macs and other_macs:
        result['macs'] = base_macs['total'] / other_macs['total']
    return result


def amdahl_section(timings, entries: List[Entry]) -> List[Dict[str, Any]]:
    """For each pair of models (earlier one as baseline): the backbone's
    share of the baseline's time, the backbone speedup, the end-to-end
    speedup it allows by Amdahl's law, and the speedup measured."""
    rows = []
    for index, base in enumerate(entries):
        base_total = timings[base.name].median
        base_backbone = timings[f'{base.name}/backbone'].median
        share = base_backbone / base_total
        for entry in entries[index + 1:]:
            backbone_speedup = (base_backbone /
                                timings[f'{entry.name}/backbone'].median)
            bound = amdahl_bound(share, backbone_speedup)
            end_to_end = base_total / timings[entry.name].median
            rows.append(dict(
                baseline=base.name, model=entry.name, backbone_share=share,
                backbone_speedup=backbone_speedup, bound=bound,
                end_to_end_speedup=end_to_end,
                fraction_of_bound=end_to_end / bound))
    return rows


# --------------------------------------------------------------- markdown
def format_markdown(result: Dict[str, Any]) -> str:
    settings = result['settings']
    height, width = settings['img_size']
    clock = ('' if settings['clock'] == 'wall' else
             ', process CPU time (not elapsed)')
    lines = [f'### {result["task"]}: {height}x{width}, batch '
             f'{settings["batch_size"]}, {settings["dtype"]}, '
             f'{settings["device"]}, {settings["threads"]} threads{clock}',
             '',
             f'`{result["command"]}`', '']
    split = 'amdahl' in result
    lines += model_table(result, 'timing', 'speedup', 'macs', 'params',
                         'end to end' if split else None)
    if split:
        lines += [''] + model_table(result, 'backbone_timing',
                                    'backbone_speedup', 'backbone_macs',
                                    'backbone_params', 'backbone only')
        lines += ['', 'Amdahl\'s law: the backbone\'s share of the '
                  'baseline\'s end-to-end time and its backbone speedup '
                  'bound the end-to-end speedup.', '',
                  '| baseline -> model | backbone share | backbone speedup | '
                  'Amdahl bound | end-to-end speedup | % of bound |',
                  '| --- | ---: | ---: | ---: | ---: | ---: |']
        for row in result['amdahl']:
            lines.append(f'| {row["baseline"]} -> {row["model"]} | '
                         f'{100 * row["backbone_share"]:.1f} % | '
                         f'{row["backbone_speedup"]:.3f}x | '
                         f'{row["bound"]:.3f}x | '
                         f'{row["end_to_end_speedup"]:.3f}x | '
                         f'{100 * row["fraction_of_bound"]:.1f} % |')
    analytic = [m for m in result['models']
                if 'backbone_analytic_macs' in m]
    if analytic:
        lines += ['', 'Backbone MACs, mmengine FlopAnalyzer (matrix '
                  'products) vs AnalyticCost: ' + '; '.join(
                      f'{m["name"]} {backbone_matmul(m):,} vs '
                      f'{m["backbone_analytic_macs"]:,}'
                      for m in analytic)]
    machine = result['machine']
    lines += ['', f'Machine: {machine["cpu"]}, {machine["logical_cores"]} '
              f'logical cores, torch {machine["torch"]}, '
              f'{machine["threads"]} threads'
              + (f', {machine["gpu"]}' if 'gpu' in machine else '')
              + (f'; load average {machine["loadavg"][0]} before, '
                 f'{machine["loadavg_after"][0]} after'
                 if 'loadavg_after' in machine else '') + '.']
    for model in result['models']:
        for key, label in (('profile', 'end to end'),
                           ('backbone_profile', 'backbone')):
            if key in model:
                lines += ['', f'Profile of {model["name"]} ({label}), one '
                          'batch:', '', '| operator | calls | self ms | '
                          'share |', '| --- | ---: | ---: | ---: |']
                lines += [f'| `{row["op"]}` | {row["calls"]} | '
                          f'{row["self_ms"]:.1f} | '
                          f'{100 * row["share"]:.1f} % |'
                          for row in model[key]]
    return '\n'.join(lines) + '\n'


def si(count: float) -> str:
    """``17.56 G``, ``3.10 M``: a count with a unit prefix."""
    for factor, prefix in ((1e12, 'T'), (1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
        if count >= factor:
            return f'{count / factor:.2f} {prefix}'
    return f'{count:.0f}'


def backbone_matmul(model: Dict[str, Any]) -> int:
    macs = model.get('backbone_macs') or model['macs']
    return macs['matmul']


def model_table(result: Dict[str, Any], timing_key: str, speedup_key: str,
                macs_key: str, params_key: str,
                title: Optional[str]) -> List[str]:
    lines = [f'{title}:', ''] if title else []
    lines += ['| model | backbone | params (M) | MACs/img | ms/batch, '
              'median [min-max] | img/s | speedup (of medians) | '
              'paired speedup, median [min-max] | speedup of best times | '
              'MACs ratio |',
              '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: '
              '| ---: |']
    for model in result['models']:
        timing = model[timing_key]
        gain = model[speedup_key]
        params = model.get(params_key, model['params'])
        macs = model.get(macs_key)
        macs_ratio = f'{gain["macs"]:.3f}x' if 'macs' in gain else '-'
        lines.append(
            f'| {model["name"]} | {model["description"]} | '
            f'{params / 1e6:.2f} | {si(macs["total"]) if macs else "-"} | '
            f'{timing["median_ms"]:.1f} [{timing["min_ms"]:.1f}-'
            f'{timing["max_ms"]:.1f}] | {timing["throughput"]:.2f} | '
            f'{gain["median"]:.3f}x | {gain["paired_median"]:.3f}x '
            f'[{gain["paired_min"]:.2f}-{gain["paired_max"]:.2f}] | '
            f'{gain["best"]:.3f}x | {macs_ratio} |')
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_reporting_errors(lambda: run(argv))


def run(argv: List[str]) -> None:
    args = parse_args(argv)
    args.argv = argv
    check_outputs(args)
    result = run_benchmark(args)
    markdown = format_markdown(result)
    print(markdown)
    if args.json is not None:
        atomic_write_text(args.json, json.dumps(result, indent=2) + '\n')
    if args.md is not None:
        atomic_write_text(args.md, markdown)


if __name__ == '__main__':
    sys.exit(main())
