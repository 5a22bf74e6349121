"""Measure the speed, MACs and parameters of dense vs HetDPT-pruned models.

Three comparisons, each run in ONE process with every model timed once per
repeat in rotating order (after warm-up), reporting the median time per
batch with its spread and the speedup over the first (baseline) model, both
as a ratio of medians and per repeat (paired):

* ``backbone``: a HetDPTViT, HetDPTSwin or HetDPTLayerScaleViT
  (``--family``) in its dense, pruned (unmerged) and merged forms, given by
  ``--arch`` + ``--spec`` or by a ``--checkpoint`` with HetDPT meta;
* ``detr``: DETR (mmdet's config) with the dense vs the merged HetDPT DeiT-B;
* ``upernet``: mmseg's stock DeiT-B UperNet vs the same UperNet with the
  merged HetDPT DeiT-B, with the backbone also timed alone (Amdahl's law).

``detr`` and ``upernet`` build these models from the stock configs with the
backbone swapped (random weights: speed does not depend on them), or take
real configs with ``--config NAME=PATH`` (repeatable; the first is the
baseline). End to end means ``model.test_step`` on a batch of uint8 images:
normalisation, backbone, neck, heads and post-processing, no data loading.

The options are those of ``tools/benchmark.py`` (:class:`BenchmarkOptions`,
checked by :func:`resolve_options`); outputs are written atomically, only
after every input has been validated, and an existing output is kept unless
``force``.  The building blocks (timing loop, MAC counts, model builders)
are in :mod:`hetdpt_mm.benchmark`.
"""
import json
import os
import shlex
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
import torch.nn as nn
from mmengine.config import Config, DictAction
from mmengine.logging import print_log
from torch.profiler import ProfilerActivity

from ..analysis import MacCount, analytic_macs, count_macs, count_params
from ..benchmark import (
    AUTHORS_SPEC,
    BACKBONE_VARIANTS,
    TensorForward,
    TimingStats,
    amdahl_bound,
    autocast,
    build_backbone_variants,
    build_from_config,
    glibc_malloc,
    hetdpt_config,
    keep_freed_memory,
    machine_info,
    make_test_batch,
    paired_speedups,
    spec_text,
    stock_config,
    synchronize,
    time_runs,
)
from ..cli import UsageError
from ..deploy.runtimes import (
    BENCHMARK_RUNTIMES,
    RUNTIME_DTYPES,
    benchmark_runner,
)
from ..fileio import check_input_file, check_output_paths, write_outputs
from ..models.family import HetDPTBackbone
from ..models.hetdpt_layerscale_vit import resolve_layerscale_arch
from ..models.hetdpt_swin import resolve_swin_arch
from ..models.hetdpt_vit import resolve_arch
from ..spec import PruneSpec, loads_json

__all__ = ['TASKS', 'BenchmarkOptions', 'resolve_options', 'run_benchmark',
           'format_markdown', 'run_and_write']

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
#: The arch each family's backbone benchmark takes without --arch.
DEFAULT_ARCHS = {'vit': 'deit-base', 'swin': 'base',
                 'layerscale_vit': 'dinov2-base'}
#: The size the built-in backbones store their position embedding at, as in
#: configs/detr_hetdpt_deit_b.py and configs/upernet_hetdpt_deit_b_ade20k.py.
BACKBONE_IMG_SIZE = {'detr': (224, 224), 'upernet': (512, 512)}


@dataclass
class BenchmarkOptions:
    """What to benchmark and how, as ``tools/benchmark.py`` takes it (see
    its help); ``None`` means the task's default, which
    :func:`resolve_options` fills in."""
    task: str  # one of TASKS
    family: str = 'vit'  # backbone: a key of DEFAULT_ARCHS
    #: a preset of the family or a JSON dict (text or parsed); None: the
    #: family's DEFAULT_ARCHS
    arch: Union[None, str, Dict[str, Any]] = None
    spec: Union[None, str, Dict[str, Any]] = None  # JSON prune spec
    checkpoint: Optional[str] = None  # backbone: structure and weights
    prefix: Optional[str] = None  # backbone: key prefix in checkpoint
    distilled: Optional[bool] = None  # with the distillation token
    models: Optional[Sequence[str]] = None  # first = baseline
    config: Sequence = ()  # NAME=PATH configs (detr/upernet)
    cfg_options: Sequence[str] = ()  # [NAME:]KEY=VALUE
    img_size: Optional[Sequence[int]] = None  # H or H W
    batch_size: Optional[int] = None
    dtype: str = 'fp32'  # fp32, bf16, fp16
    device: str = 'cpu'
    threads: Optional[int] = None  # torch.set_num_threads
    clock: str = 'wall'  # wall or process
    keep_freed_memory: bool = False  # glibc malloc keeps its heap
    warmup: int = 1
    repeats: Optional[int] = None
    iters: int = 1
    split_backbone: Optional[bool] = None  # also time backbones alone
    macs: bool = True
    profile: int = 0  # operators to report per model (0: no profile)
    json_path: Optional[Path] = None
    md_path: Optional[Path] = None
    force: bool = False  # replace existing outputs
    #: backbone: what runs each model (hetdpt_mm.deploy BENCHMARK_RUNTIMES)
    runtimes: Sequence[str] = ('torch', )
    argv: Sequence[str] = ()  # the command line, for the result


def resolve_options(given: BenchmarkOptions) -> BenchmarkOptions:
    """A copy of ``given`` with the task's defaults filled in; raises
    ``UsageError`` for combinations that cannot work."""
    options = replace(given)
    if options.task not in TASKS:
        raise UsageError(f'unknown task {options.task!r}; choose from '
                         f'{list(TASKS)}')
    img_size, batch_size, repeats, models, split = DEFAULTS[options.task]
    if options.img_size is None:
        options.img_size = img_size
    elif len(options.img_size) == 1:
        options.img_size = (options.img_size[0], ) * 2
    elif len(options.img_size) != 2:
        raise UsageError('--img-size takes H or H W')
    options.img_size = tuple(options.img_size)
    options.batch_size = options.batch_size or batch_size
    options.repeats = options.repeats or repeats
    for name in ('batch_size', 'repeats', 'iters'):
        if getattr(options, name) < 1:
            raise UsageError(f'--{name.replace("_", "-")} must be >= 1')
    if options.warmup < 0:
        raise UsageError('--warmup must be >= 0')
    if min(options.img_size) < 1:
        raise UsageError(f'--img-size must be positive, got '
                         f'{options.img_size}')
    if options.threads is not None and options.threads < 1:
        raise UsageError('--threads must be >= 1')
    if (options.clock == 'process'
            and torch.device(options.device).type != 'cpu'):
        raise UsageError('--clock process measures CPU work; use the wall '
                         f'clock on {options.device}')
    if options.keep_freed_memory and not glibc_malloc():
        raise UsageError('--keep-freed-memory needs glibc\'s malloc (Linux '
                         'with glibc)')
    check_runtimes(options)
    if options.split_backbone is None:
        options.split_backbone = split
    elif options.split_backbone and options.task == 'backbone':
        raise UsageError('--split-backbone is for detr and upernet: the '
                         'backbone task times backbones only')
    if options.family not in DEFAULT_ARCHS:
        raise UsageError(f'unknown --family {options.family!r}; choose from '
                         f'{list(DEFAULT_ARCHS)}')
    if options.family != 'vit':
        if options.task != 'backbone':
            raise UsageError(f'--family {options.family} is for the backbone '
                             'task (detr and upernet build DeiT models; '
                             'give other models with --config)')
        if options.distilled:
            raise UsageError('--distilled is for ViT backbones')
    elif options.distilled is None:
        options.distilled = options.task != 'backbone'
    options.arch = parse_json_or_text(
        options.arch or DEFAULT_ARCHS[options.family], '--arch')
    try:
        depth = arch_depth(options.family, options.arch)
    except ValueError as err:
        raise UsageError(f'--arch: {err}') from None
    if options.spec is not None:
        try:
            spec = loads_json(options.spec, '--spec')
        except json.JSONDecodeError as err:
            raise UsageError(f'--spec: {err}') from None
        try:
            options.spec = PruneSpec.coerce(spec, depth).to_dict()
        except (TypeError, ValueError) as err:
            raise UsageError(f'--spec: {err}') from None
    elif options.checkpoint is None:
        if depth != AUTHORS_SPEC.depth:
            raise UsageError(f'--arch has {depth} blocks: give its --spec '
                             '(the default is the authors\' 12-block DeiT-B '
                             'spec)')
        options.spec = AUTHORS_SPEC.to_dict()
    if options.task == 'backbone':
        if options.config or options.cfg_options:
            raise UsageError('--config and --cfg-options are for detr and '
                             'upernet; backbone takes --arch/--spec or '
                             '--checkpoint')
        allowed = BACKBONE_VARIANTS
    else:
        if options.checkpoint or options.prefix:
            raise UsageError('--checkpoint is for the backbone task; for '
                             'detr/upernet give the checkpoint in the config '
                             '(or --cfg-options)')
        allowed = BUILTIN_MODELS[options.task]
        options.config = [parse_named_path(item) for item in options.config]
        if options.config and options.models:
            raise UsageError('--models selects built-in models; with '
                             '--config, the configs are the models')
        if options.cfg_options and not options.config:
            raise UsageError('--cfg-options applies to --config models')
    if options.config:
        options.models = [name for name, _ in options.config]
        if len(set(options.models)) != len(options.models):
            raise UsageError(f'--config names must be unique, got '
                             f'{options.models}')
    else:
        options.models = list(options.models or models)
        unknown = [m for m in options.models if m not in allowed]
        if unknown:
            raise UsageError(f'unknown models {unknown} for {options.task}; '
                             f'choose from {list(allowed)}')
        if len(set(options.models)) != len(options.models):
            raise UsageError(f'--models has duplicates: {options.models}')
    return options


def arch_depth(family: str, arch: Union[str, Dict[str, Any]]) -> int:
    """Blocks of ``arch`` (over all stages), which specs index."""
    if family == 'swin':
        return sum(resolve_swin_arch(arch)['depths'])
    if family == 'layerscale_vit':
        return resolve_layerscale_arch(arch)['num_layers']
    return resolve_arch(arch)['num_layers']


def check_runtimes(options: BenchmarkOptions) -> None:
    runtimes = list(dict.fromkeys(options.runtimes))
    unknown = [r for r in runtimes if r not in BENCHMARK_RUNTIMES]
    if unknown:
        raise UsageError(f'unknown runtimes {unknown}; choose from '
                         f'{list(BENCHMARK_RUNTIMES)}')
    options.runtimes = runtimes
    if runtimes == ['torch']:
        return
    if options.task != 'backbone':
        raise UsageError('--runtime other than torch is for the backbone '
                         'task (detr/upernet time post-processing too)')
    exported = [r for r in runtimes if r in RUNTIME_DTYPES]
    for runtime in exported:
        if options.dtype not in RUNTIME_DTYPES[runtime]:
            raise UsageError(f'{runtime} runs the exported graph in '
                             f'{" or ".join(RUNTIME_DTYPES[runtime])} '
                             f'here, not --dtype {options.dtype}')
    if exported and torch.device(options.device).type != 'cpu':
        raise UsageError(f'{", ".join(exported)} run on the CPU here; use '
                         '--device cpu')
    if 'compile' in runtimes and options.warmup < 1:
        raise UsageError('--runtime compile needs --warmup >= 1 (the first '
                         'call compiles)')


def parse_json_or_text(value: str, source: str) -> Any:
    """A command-line value: JSON when it parses, else the text."""
    try:
        return loads_json(value, source)
    except json.JSONDecodeError:
        return value


def parse_named_path(item: str):
    name, sep, path = item.partition('=')
    if not sep or not name or not path:
        raise UsageError(f'--config takes NAME=PATH, got {item!r}')
    if not Path(path).exists():
        raise UsageError(f'--config {name}: no such file {path}')
    check_input_file(path, f'--config {name}')
    return name, path


def parse_cfg_options(items: Sequence[str], names: Sequence[str]
                      ) -> Dict[Optional[str], Dict[str, Any]]:
    """``KEY=VALUE`` (all configs) and ``NAME:KEY=VALUE`` (one config), by
    config name (``None``: all)."""
    parsed: Dict[Optional[str], Dict[str, Any]] = {}
    for option in items:
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


def check_outputs(options: BenchmarkOptions) -> None:
    """Fail before any work if an output path is unusable."""
    outputs = [p for p in (options.json_path, options.md_path)
               if p is not None]
    inputs = [path for _, path in options.config]
    if options.checkpoint:
        inputs.append(options.checkpoint)
    check_output_paths(outputs, inputs, options.force)


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
    runtime: str = 'torch'
    max_abs_diff: float = 0.  # of the runtime's outputs from PyTorch's


def backbone_entries(options: BenchmarkOptions) -> List[Entry]:
    # A ViT stores its position embedding at the input size; a Swin's
    # relative position biases serve any size.
    vit_args = {'vit': dict(img_size=options.img_size,
                            distilled=options.distilled),
                'layerscale_vit': dict(img_size=options.img_size)
                }.get(options.family, {})
    variants = build_backbone_variants(
        arch=options.arch, spec=options.spec, variants=options.models,
        checkpoint=options.checkpoint, prefix=options.prefix,
        family=options.family, **vit_args)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(options.batch_size, 3, *options.img_size,
                         generator=generator).to(options.device)
    entries = []
    with tempfile.TemporaryDirectory() as workdir:
        for runtime in options.runtimes:
            for name, model in variants.items():
                model.to(options.device)
                run, diff = benchmark_runner(model, images, runtime,
                                             workdir, name, options.dtype)
                if runtime != 'torch' or options.dtype != 'fp32':
                    print_log(f'{name} in {runtime} ({options.dtype}): '
                              f'largest difference from PyTorch in fp32 '
                              f'{diff:.3g}', logger='current')
                entries.append(Entry(
                    name=runtime_name(name, runtime),
                    description=describe(model), model=model, run=run,
                    macs_module=model, macs_inputs=images[:1],
                    backbone=model, backbone_inputs=images,
                    runtime=runtime, max_abs_diff=diff))
    return entries


def runtime_name(variant: str, runtime: str) -> str:
    return variant if runtime == 'torch' else f'{variant}@{runtime}'


def describe(model: nn.Module) -> str:
    """What a model's backbone is, for the tables."""
    backbone = model if isinstance(model, HetDPTBackbone) else \
        model.backbone
    name = type(backbone).__name__
    if not isinstance(backbone, HetDPTBackbone):
        toolbox = type(backbone).__module__.split('.')[0]
        return f'{toolbox} {name}'
    spec = backbone.prune_spec
    width = '' if spec.widths is None else \
        f', width-pruned to {spec.widths.embed_dims} channels'
    if spec.is_dense:
        return f'{name} dense{width}'
    form = {'merged': 'pruned and merged', 'pruned': 'pruned, FFNs unmerged',
            'gated': 'gated'}[backbone.form]
    return f'{name} {form} ({spec_text(spec)}){width}'


def config_entries(options: BenchmarkOptions) -> List[Entry]:
    if options.config:
        overrides = parse_cfg_options(options.cfg_options, options.models)
        configs = []
        for name, path in options.config:
            cfg = Config.fromfile(path)
            cfg.merge_from_dict(overrides.get(None, {}))
            cfg.merge_from_dict(overrides.get(name, {}))
            configs.append((name, cfg))
    else:
        configs = [(name, builtin_config(options, name))
                   for name in options.models]
    entries = []
    for name, cfg in configs:
        model = build_from_config(cfg).to(options.device)
        data = make_test_batch(cfg.get('default_scope'), options.batch_size,
                               options.img_size)
        with torch.no_grad():
            batch = model.data_preprocessor(data, False)
        entries.append(Entry(
            name=name, description=describe(model), model=model,
            run=lambda model=model, data=data: model.test_step(data),
            macs_module=TensorForward(model, batch['data_samples'][:1]),
            macs_inputs=batch['inputs'][:1], backbone=model.backbone,
            backbone_inputs=batch['inputs']))
    return entries


def builtin_config(options: BenchmarkOptions, name: str) -> Config:
    if name == 'stock':
        return stock_config(options.task)
    return hetdpt_config(options.task, arch=options.arch,
                         spec=None if name == 'dense' else options.spec,
                         merged=name == 'merged',
                         img_size=BACKBONE_IMG_SIZE[options.task],
                         distilled=options.distilled)


# ------------------------------------------------------------ measurement
def measure_macs(entry: Entry, options: BenchmarkOptions) -> Dict[str, Any]:
    counts: Dict[str, Any] = dict(params=count_params(entry.model))
    if entry.backbone is not entry.model:
        counts['backbone_params'] = count_params(entry.backbone)
    if not options.macs:
        return counts
    macs: MacCount = count_macs(entry.macs_module, entry.macs_inputs)
    counts['macs'] = macs.to_dict()
    backbone = entry.backbone
    if backbone is not entry.model:
        counts['backbone_macs'] = count_macs(
            backbone, entry.backbone_inputs[:1]).to_dict()
    # The analytic model knows uniform widths only (not HetDPT+'s).
    if isinstance(backbone, HetDPTBackbone) and all(
            s % backbone.build_args()['patch_size'] == 0
            for s in options.img_size) and backbone.prune_spec.widths is None:
        counts['backbone_analytic_macs'] = analytic_macs(backbone,
                                                         options.img_size)
    return counts


def profile(run: Callable, top: int,
            options: BenchmarkOptions) -> List[Dict[str, Any]]:
    """The ``top`` operators by self time (device time on CUDA) in one
    batch of ``run``."""
    activities = [ProfilerActivity.CPU]
    if torch.device(options.device).type == 'cuda':
        activities.append(ProfilerActivity.CUDA)
    with torch.inference_mode(), autocast(options.device, options.dtype):
        run()  # warm
        with torch.profiler.profile(activities=activities) as prof:
            run()
            synchronize(options.device)
    events = prof.key_averages()
    key = ('self_device_time_total' if len(activities) > 1 else
           'self_cpu_time_total')
    total = sum(getattr(e, key) for e in events) or 1.0
    rows = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:top]
    return [dict(op=e.key, calls=e.count, self_ms=getattr(e, key) / 1e3,
                 share=getattr(e, key) / total) for e in rows]


def run_benchmark(options: BenchmarkOptions) -> Dict[str, Any]:
    if options.threads:
        torch.set_num_threads(options.threads)
    if options.keep_freed_memory:
        keep_freed_memory()
    machine = machine_info(options.device)
    entries = (backbone_entries(options) if options.task == 'backbone' else
               config_entries(options))
    runs = {}
    for entry in entries:
        runs[entry.name] = entry.run
        if options.split_backbone:
            runs[f'{entry.name}/backbone'] = (
                lambda e=entry: e.backbone(e.backbone_inputs))
    by_model: Dict[int, Dict[str, Any]] = {}
    for entry in entries:  # a model run in several runtimes counts once
        if id(entry.model) not in by_model:
            by_model[id(entry.model)] = measure_macs(entry, options)
    counts = {entry.name: by_model[id(entry.model)] for entry in entries}
    timings = time_runs(runs, batch_size=options.batch_size,
                        repeats=options.repeats, warmup=options.warmup,
                        iters=options.iters, device=options.device,
                        dtype=options.dtype, clock=options.clock)
    profiles = {name: profile(run, options.profile, options)
                for name, run in runs.items()} if options.profile else {}
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
        if options.split_backbone:
            key = f'{name}/backbone'
            record['backbone_timing'] = timings[key].to_dict()
            record['backbone_speedup'] = speedup(
                timings[f'{baseline}/backbone'], timings[key],
                counts[baseline].get('backbone_macs'),
                counts[name].get('backbone_macs'))
        if options.task == 'backbone' and (entry.runtime != 'torch' or
                                           options.dtype != 'fp32'):
            record.update(runtime=entry.runtime,
                          max_abs_diff=entry.max_abs_diff)
        if profiles:
            record['profile'] = profiles[entry.name]
            if options.split_backbone:
                record['backbone_profile'] = profiles[f'{entry.name}/backbone']
        models.append(record)
    result = dict(
        task=options.task,
        command='python tools/benchmark.py ' + shlex.join(options.argv),
        settings=dict(img_size=list(options.img_size),
                      batch_size=options.batch_size,
                      dtype=options.dtype, device=options.device,
                      threads=torch.get_num_threads(), clock=options.clock,
                      keep_freed_memory=options.keep_freed_memory,
                      warmup=options.warmup,
                      repeats=options.repeats, iters=options.iters,
                      # --config models take all of these from configs.
                      family=None if options.config else options.family,
                      arch=None if options.config else options.arch,
                      spec=None if options.config else options.spec,
                      distilled=None if options.config else options.distilled,
                      configs=dict(options.config) or None),
        machine=machine, baseline=baseline, models=models)
    if options.split_backbone:
        result['amdahl'] = amdahl_section(timings, entries)
    if list(options.runtimes) != ['torch']:
        result['runtimes'] = runtime_section(timings, entries, options)
    return result


def runtime_section(timings, entries: List[Entry],
                    options: BenchmarkOptions) -> List[Dict[str, Any]]:
    """Per runtime: each variant's speedup over the first (baseline)
    variant in that runtime, and over the same variant in PyTorch eager."""
    base = options.models[0]
    diffs = {entry.name: entry.max_abs_diff for entry in entries}
    rows = []
    for runtime in options.runtimes:
        for variant in options.models[1:]:
            name = runtime_name(variant, runtime)
            rows.append(dict(
                runtime=runtime, model=variant, baseline=base,
                max_abs_diff=max(diffs[name],
                                 diffs[runtime_name(base, runtime)]),
                ms=1e3 * timings[name].median,
                baseline_ms=1e3 * timings[runtime_name(base, runtime)].median,
                speedup=speedup(timings[runtime_name(base, runtime)],
                                timings[name]),
                vs_torch=speedup(timings[variant], timings[name])))
    return rows


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
    if settings.get('keep_freed_memory'):
        clock += ', freed memory kept (no page faults per batch)'
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
    if 'runtimes' in result:
        lines += ['', 'By runtime (paired speedups, median [min-max] over '
                  'repeats; the largest difference of either model\'s '
                  'outputs from PyTorch eager in fp32):', '',
                  '| runtime | baseline ms | model ms | model vs baseline | '
                  'model vs PyTorch eager model | max abs diff |',
                  '| --- | ---: | ---: | ---: | ---: | ---: |']
        for row in result['runtimes']:
            gain, eager = row['speedup'], row['vs_torch']
            lines.append(
                f'| {row["runtime"]} ({row["model"]} vs {row["baseline"]}) '
                f'| {row["baseline_ms"]:.1f} | {row["ms"]:.1f} | '
                f'{gain["paired_median"]:.3f}x [{gain["paired_min"]:.2f}-'
                f'{gain["paired_max"]:.2f}] | {eager["paired_median"]:.3f}x '
                f'[{eager["paired_min"]:.2f}-{eager["paired_max"]:.2f}] | '
                f'{row["max_abs_diff"]:.2g} |')
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


def run_and_write(options: BenchmarkOptions) -> Dict[str, Any]:
    """Check the outputs, benchmark, print the markdown tables and write
    the requested files; returns the result."""
    check_outputs(options)
    result = run_benchmark(options)
    markdown = format_markdown(result)
    print(markdown)
    outputs = {}
    if options.json_path is not None:
        outputs[options.json_path] = json.dumps(result, indent=2) + '\n'
    if options.md_path is not None:
        outputs[options.md_path] = markdown
    write_outputs(outputs, exclusive=not options.force)
    return result
