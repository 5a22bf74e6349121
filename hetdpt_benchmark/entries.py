"""The models a benchmark times (:class:`Entry`): a backbone's variants or
side-by-side checkpoints in each runtime, or DETR / UperNet models from the
built-in or given configs, each described for the tables."""

import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, List

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.logging import print_log

from hetdpt_mm.deploy.networks import build_from_config
from hetdpt_mm.models.family import HetDPTBackbone
from hetdpt_mm.registry import get_family
from hetdpt_mm.spec import ACT, ATTN, PruneSpec

from .builders import (
    TensorForward,
    build_backbone_variants,
    hetdpt_config,
    make_test_batch,
    stock_config,
)
from .options import (
    BACKBONE_IMG_SIZE,
    BenchmarkOptions,
    parse_cfg_options,
    token_reduction,
)
from .runtimes import benchmark_runner, runtime_name

__all__ = [
    'Entry',
    'backbone_entries',
    'config_entries',
    'describe',
]


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
    max_abs_diff: float = 0.0  # of the runtime's outputs from PyTorch's


def backbone_entries(options: BenchmarkOptions) -> List[Entry]:
    sized = get_family(options.family).sized_args(options.img_size)
    if options.distilled is not None:
        sized['distilled'] = options.distilled
    sized.update(token_reduction(options))
    if options.checkpoints:
        variants = side_by_side_models(options, sized)
    else:
        variants = build_backbone_variants(
            arch=options.arch,
            spec=options.spec,
            variants=options.models,
            checkpoint=options.checkpoint,
            prefix=options.prefix,
            family=options.family,
            **sized,
        )
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(
        options.batch_size, 3, *options.img_size, generator=generator
    ).to(options.device)
    entries = []
    with tempfile.TemporaryDirectory() as workdir:
        for runtime in options.runtimes:
            for name, model in variants.items():
                model.to(options.device)
                run, diff = benchmark_runner(
                    model, images, runtime, workdir, name, options.dtype
                )
                if runtime != 'torch' or options.dtype != 'fp32':
                    print_log(
                        f'{name} in {runtime} ({options.dtype}): '
                        f'largest difference from PyTorch in fp32 '
                        f'{diff:.3g}',
                        logger='current',
                    )
                entries.append(
                    Entry(
                        name=runtime_name(name, runtime),
                        description=describe(model),
                        model=model,
                        run=run,
                        macs_module=model,
                        macs_inputs=images[:1],
                        backbone=model,
                        backbone_inputs=images,
                        runtime=runtime,
                        max_abs_diff=diff,
                    )
                )
    return entries


def side_by_side_models(
    options: BenchmarkOptions, sized: Dict[str, Any]
) -> Dict[str, nn.Module]:
    """Several checkpoints' models: each in its deployable form (a merged
    file as stored, a pruned or gated one merged from its weights), after
    the dense form of the first one's architecture if asked for."""

    def build(path, variant):
        return build_backbone_variants(
            arch=options.arch,
            spec=options.spec,
            variants=(variant,),
            checkpoint=path,
            prefix=options.prefix,
            family=options.family,
            **sized,
        )[variant]

    models = {}
    if 'dense' in options.models:
        models['dense'] = build(options.checkpoints[0][1], 'dense')
    for name, path in options.checkpoints:
        models[name] = build(path, 'merged')
    return models


def describe(model: nn.Module) -> str:
    """What a model's backbone is, for the tables."""
    backbone = model if isinstance(model, HetDPTBackbone) else model.backbone
    name = type(backbone).__name__
    if not isinstance(backbone, HetDPTBackbone):
        toolbox = type(backbone).__module__.split('.')[0]
        return f'{toolbox} {name}'
    spec = backbone.prune_spec
    width = (
        ''
        if spec.widths is None
        else f', width-pruned to {spec.widths.embed_dims} channels'
    )
    form = {
        'merged': 'pruned and merged',
        'pruned': 'pruned, FFNs unmerged',
        'gated': 'gated',
    }[backbone.form]
    merging = ''
    if getattr(backbone, 'token_merge', None) is not None:
        merging = f', ToMe r={backbone.token_merge.r}'
    elif getattr(backbone, 'graph_propagation', None) is not None:
        propagation = backbone.graph_propagation
        merging = (
            f', GTP-ViT num_prop={propagation.num_prop} '
            f'({propagation.graph} graph)'
        )
    if spec.is_dense:
        return f'{name} dense{width}{merging}'
    return f'{name} {form} ({spec_text(spec)}){width}{merging}'


def spec_text(spec: PruneSpec) -> str:
    """``attn 0,3 / act 2,7`` for tables."""
    return (
        f'attn {",".join(map(str, spec.removed(ATTN))) or "-"} / '
        f'act {",".join(map(str, spec.removed(ACT))) or "-"}'
    )


def config_entries(options: BenchmarkOptions) -> List[Entry]:
    if options.config:
        overrides = parse_cfg_options(options.cfg_options, options.models)
        configs = []
        for name, path in options.config:
            cfg = Config.fromfile(path)
            cfg.merge_from_dict(overrides.get(None, {}))
            cfg.merge_from_dict(overrides.get(name, {}))
            cfg.model.backbone.update(token_reduction(options))
            configs.append((name, cfg))
    else:
        configs = [
            (name, builtin_config(options, name)) for name in options.models
        ]
    entries = []
    for name, cfg in configs:
        model = build_from_config(cfg).to(options.device)
        data = make_test_batch(
            cfg.get('default_scope'), options.batch_size, options.img_size
        )
        with torch.no_grad():
            batch = model.data_preprocessor(data, False)
        entries.append(
            Entry(
                name=name,
                description=describe(model),
                model=model,
                run=lambda model=model, data=data: model.test_step(data),
                macs_module=TensorForward(model, batch['data_samples'][:1]),
                macs_inputs=batch['inputs'][:1],
                backbone=model.backbone,
                backbone_inputs=batch['inputs'],
            )
        )
    return entries


def builtin_config(options: BenchmarkOptions, name: str) -> Config:
    if name == 'stock':
        return stock_config(options.task)
    return hetdpt_config(
        options.task,
        arch=options.arch,
        spec=None if name == 'dense' else options.spec,
        merged=name == 'merged',
        img_size=BACKBONE_IMG_SIZE[options.task],
        distilled=options.distilled,
        token_reduction=token_reduction(options),
    )
