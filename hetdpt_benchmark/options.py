"""The options of ``tools/benchmark.py`` (:class:`BenchmarkOptions`) and
their checks (:func:`resolve_options`), all before anything is built."""

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import torch
from mmengine.config import Config

from hetdpt_mm.analysis import MACS_CONVENTIONS
from hetdpt_mm.cli import config_option_value
from hetdpt_mm.deploy.runtimes import RUNTIME_DTYPES
from hetdpt_mm.errors import UsageError
from hetdpt_mm.fileio import check_input_file, check_output_paths
from hetdpt_mm.registry import FAMILIES
from hetdpt_mm.spec import PruneSpec, read_json_value

from .builders import AUTHORS_SPEC, BACKBONE_VARIANTS
from .machine import glibc_malloc
from .runtimes import BENCHMARK_RUNTIMES, INT8
from .timing import CLOCKS

TASKS = ('backbone', 'detr', 'upernet')
#: Models the dense-prediction tasks build without --config.
BUILTIN_MODELS = {
    'detr': BACKBONE_VARIANTS,
    'upernet': ('stock',) + BACKBONE_VARIANTS,
}
DEFAULTS = {
    # task: (img_size, batch_size, repeats, models, split_backbone)
    'backbone': ((224, 224), 16, 5, BACKBONE_VARIANTS, False),
    'detr': ((800, 1216), 1, 3, ('dense', 'merged'), False),
    'upernet': ((512, 512), 1, 3, ('stock', 'merged'), True),
}
#: The arch each family's backbone benchmark takes without --arch.
#: The size the built-in backbones store their position embedding at, as in
#: configs/detr_hetdpt_deit_b.py and configs/upernet_hetdpt_deit_b_ade20k.py.
BACKBONE_IMG_SIZE = {'detr': (224, 224), 'upernet': (512, 512)}


@dataclass
class BenchmarkOptions:
    """What to benchmark and how, as ``tools/benchmark.py`` takes it (see
    its help); ``None`` means the task's default, which
    :func:`resolve_options` fills in."""

    task: str  # one of TASKS
    family: str = 'vit'  # backbone: a family of the family table
    #: a preset of the family or a JSON dict (text or parsed); None: the
    #: family's DEFAULT_ARCH
    arch: Union[None, str, Dict[str, Any]] = None
    spec: Union[None, str, Dict[str, Any]] = None  # JSON prune spec
    checkpoint: Optional[str] = None  # backbone: structure and weights
    #: backbone: several models side by side, ``[NAME=]PATH`` each (one
    #: unnamed PATH is ``checkpoint``); resolved to ``(name, path)`` pairs
    checkpoints: Sequence = ()
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
    #: a key of MACS_CONVENTIONS: whether MACs count attention's products
    macs_convention: str = 'with-attention-products'
    token_merge: Optional[int] = None  # ToMe r in every HetDPT backbone
    graph_propagation: Optional[int] = None  # GTP-ViT num_prop, alike
    propagation_graph: Optional[str] = None  # its patch graph
    profile: int = 0  # operators to report per model (0: no profile)
    json_path: Optional[Path] = None
    md_path: Optional[Path] = None
    force: bool = False  # replace existing outputs
    #: backbone: what runs each model (one of runtimes.BENCHMARK_RUNTIMES)
    runtimes: Sequence[str] = ('torch',)
    argv: Sequence[str] = ()  # the command line, for the result


def resolve_options(given: BenchmarkOptions) -> BenchmarkOptions:
    """A copy of ``given`` with the task's defaults filled in; raises
    ``UsageError`` for combinations that cannot work."""
    options = replace(given)
    if options.task not in TASKS:
        raise UsageError(
            f'unknown task {options.task!r}; choose from {list(TASKS)}'
        )
    img_size, batch_size, repeats, models, split = DEFAULTS[options.task]
    if options.img_size is None:
        options.img_size = img_size
    elif len(options.img_size) == 1:
        options.img_size = (options.img_size[0],) * 2
    elif len(options.img_size) != 2:
        raise UsageError('--img-size takes H or H W')
    options.img_size = tuple(options.img_size)
    # Unset is None: a given 0 is a value, refused below.
    if options.batch_size is None:
        options.batch_size = batch_size
    if options.repeats is None:
        options.repeats = repeats
    for name in ('batch_size', 'repeats', 'iters'):
        if getattr(options, name) < 1:
            raise UsageError(f'--{name.replace("_", "-")} must be >= 1')
    if options.warmup < 0:
        raise UsageError('--warmup must be >= 0')
    if min(options.img_size) < 1:
        raise UsageError(
            f'--img-size must be positive, got {options.img_size}'
        )
    if options.threads is not None and options.threads < 1:
        raise UsageError('--threads must be >= 1')
    if options.clock not in CLOCKS:
        raise UsageError(
            f'unknown --clock {options.clock!r}; choose from {list(CLOCKS)}'
        )
    if (
        options.clock == 'process'
        and torch.device(options.device).type != 'cpu'
    ):
        raise UsageError(
            '--clock process measures CPU work; use the wall '
            f'clock on {options.device}'
        )
    if options.keep_freed_memory and not glibc_malloc():
        raise UsageError(
            "--keep-freed-memory needs glibc's malloc (Linux with glibc)"
        )
    check_runtimes(options)
    if options.macs_convention not in MACS_CONVENTIONS:
        raise UsageError(
            f'unknown --macs-convention '
            f'{options.macs_convention!r}; choose from '
            f'{list(MACS_CONVENTIONS)}'
        )
    if options.split_backbone is None:
        options.split_backbone = split
    elif options.split_backbone and options.task == 'backbone':
        raise UsageError(
            '--split-backbone is for detr and upernet: the '
            'backbone task times backbones only'
        )
    if options.family not in FAMILIES:
        raise UsageError(
            f'unknown --family {options.family!r}; choose from '
            f'{sorted(FAMILIES)}'
        )
    family = FAMILIES[options.family]
    if options.family != 'vit':
        if options.task != 'backbone':
            raise UsageError(
                f'--family {options.family} is for the backbone '
                'task (detr and upernet build DeiT models; '
                'give other models with --config)'
            )
        if options.distilled:
            raise UsageError('--distilled is for ViT backbones')
    elif options.distilled is None:
        options.distilled = options.task != 'backbone'
    options.arch = read_json_value(
        options.arch or family.DEFAULT_ARCH, '--arch'
    )
    try:
        depth = family.codec.arch_depth(options.arch)
    except ValueError as err:
        raise UsageError(f'--arch: {err}') from None
    if options.task == 'backbone':
        resolve_checkpoints(options)
    if options.spec is not None:
        try:
            options.spec = PruneSpec.coerce(options.spec, depth).to_dict()
        except (OSError, TypeError, ValueError) as err:
            raise UsageError(f'--spec: {err}') from None
    elif options.checkpoint is None and not options.checkpoints:
        if depth != AUTHORS_SPEC.depth:
            raise UsageError(
                f'--arch has {depth} blocks: give its --spec '
                "(the default is the authors' 12-block DeiT-B "
                'spec)'
            )
        options.spec = AUTHORS_SPEC.to_dict()
    if options.task == 'backbone':
        if options.config or options.cfg_options:
            raise UsageError(
                '--config and --cfg-options are for detr and '
                'upernet; backbone takes --arch/--spec or '
                '--checkpoint'
            )
        allowed = BACKBONE_VARIANTS
    else:
        if options.checkpoint or options.checkpoints or options.prefix:
            raise UsageError(
                '--checkpoint is for the backbone task; for '
                'detr/upernet give the checkpoint in the config '
                '(or --cfg-options)'
            )
        allowed = BUILTIN_MODELS[options.task]
        options.config = [parse_named_path(item) for item in options.config]
        if options.config and options.models:
            raise UsageError(
                '--models selects built-in models; with '
                '--config, the configs are the models'
            )
        if options.cfg_options and not options.config:
            raise UsageError('--cfg-options applies to --config models')
    if options.checkpoints:
        side_by_side_names(options)
    elif options.config:
        options.models = [name for name, _ in options.config]
        if len(set(options.models)) != len(options.models):
            raise UsageError(
                f'--config names must be unique, got {options.models}'
            )
    else:
        options.models = list(options.models or models)
        unknown = [m for m in options.models if m not in allowed]
        if unknown:
            raise UsageError(
                f'unknown models {unknown} for {options.task}; '
                f'choose from {list(allowed)}'
            )
        if len(set(options.models)) != len(options.models):
            raise UsageError(f'--models has duplicates: {options.models}')
    check_token_reduction(options, family)
    return options


def token_reduction(options: BenchmarkOptions) -> Dict[str, dict]:
    """The token-reduction option every HetDPT backbone of the run gets
    (``{}``: none)."""
    if options.token_merge is not None:
        return dict(token_merge=dict(r=options.token_merge))
    if options.graph_propagation is not None:
        propagation = dict(num_prop=options.graph_propagation)
        if options.propagation_graph is not None:
            propagation['graph'] = options.propagation_graph
        return dict(graph_propagation=propagation)
    return {}


def check_token_reduction(options: BenchmarkOptions, family) -> None:
    given = [
        (flag, value)
        for flag, value in (
            ('--token-merge', options.token_merge),
            ('--graph-propagation', options.graph_propagation),
        )
        if value is not None
    ]
    if options.propagation_graph is not None and (
        options.graph_propagation is None
    ):
        raise UsageError('--propagation-graph needs --graph-propagation')
    if not given:
        return
    flag, value = given[0]
    if len(given) > 1:
        raise UsageError(
            '--token-merge and --graph-propagation both reduce the '
            'tokens: give one of them'
        )
    if value < 0:
        raise UsageError(f'{flag} must be >= 0')
    if not family.MERGES_TOKENS:
        raise UsageError(
            f'{flag}: {family.__name__} does not merge or propagate '
            'tokens (docs/user_guides/token_merge.md)'
        )
    if 'stock' in options.models:
        raise UsageError(
            f'{flag} applies to HetDPT backbones; the stock model has none'
        )
    overrides = parse_cfg_options(options.cfg_options, options.models)
    for name, path in options.config:
        cfg = Config.fromfile(path)
        cfg.merge_from_dict(overrides.get(None, {}))
        cfg.merge_from_dict(overrides.get(name, {}))
        backbone = str(cfg.model.backbone.get('type'))
        # A registry scope (``hetdpt.HetDPTViT``) names the same class.
        merging = [
            family
            for family in FAMILIES.values()
            if family.__name__ == backbone.rpartition('.')[2]
            and family.MERGES_TOKENS
        ]
        if not merging:
            raise UsageError(
                f'{flag} applies to HetDPT ViT '
                f'backbones; --config {name} ({path}) builds '
                f'a {backbone} backbone'
            )


def check_runtimes(options: BenchmarkOptions) -> None:
    runtimes = list(dict.fromkeys(options.runtimes))
    unknown = [r for r in runtimes if r not in BENCHMARK_RUNTIMES]
    if unknown:
        raise UsageError(
            f'unknown runtimes {unknown}; choose from '
            f'{list(BENCHMARK_RUNTIMES)}'
        )
    options.runtimes = runtimes
    if runtimes == ['torch']:
        return
    if options.task != 'backbone':
        raise UsageError(
            '--runtime other than torch is for the backbone '
            'task (detr/upernet time post-processing too)'
        )
    exported = [r for r in runtimes if r.removesuffix(INT8) in RUNTIME_DTYPES]
    for runtime in exported:
        dtypes = (
            ('fp32',) if runtime.endswith(INT8) else RUNTIME_DTYPES[runtime]
        )
        if options.dtype not in dtypes:
            raise UsageError(
                f'{runtime} runs the exported graph in '
                f'{" or ".join(dtypes)} here, not --dtype {options.dtype}'
            )
    if exported and torch.device(options.device).type != 'cpu':
        raise UsageError(
            f'{", ".join(exported)} run on the CPU here; use --device cpu'
        )
    if 'compile' in runtimes and options.warmup < 1:
        raise UsageError(
            '--runtime compile needs --warmup >= 1 (the first call compiles)'
        )


def parse_named_path(item: str, option: str = '--config', named: bool = True):
    """``NAME=PATH`` as ``(name, path)``; with ``named=False`` a bare
    PATH (an existing file, or no ``=``) is named by its file's stem."""
    name, sep, path = item.partition('=')
    if not named and (Path(item).is_file() or not sep):
        name, sep, path = Path(item).stem, '=', item
    if not sep or not name or not path:
        raise UsageError(f'{option} takes NAME=PATH, got {item!r}')
    if not Path(path).exists():
        raise UsageError(f'{option} {name}: no such file {path}')
    check_input_file(path, f'{option} {name}')
    return name, path


def resolve_checkpoints(options: BenchmarkOptions) -> None:
    """One unnamed ``--checkpoint`` is the checkpoint of the dense /
    pruned / merged comparison; several (or a named one) are models timed
    side by side, as ``(name, path)`` pairs."""
    items = list(options.checkpoints)
    if not items:
        return
    if options.checkpoint is not None:
        raise UsageError('give checkpoint or checkpoints, not both')
    if (
        len(items) == 1
        and not isinstance(items[0], tuple)
        and (Path(items[0]).is_file() or '=' not in items[0])
    ):
        options.checkpoint, options.checkpoints = items[0], ()
        return
    options.checkpoints = [
        tuple(item)
        if isinstance(item, tuple)
        else parse_named_path(item, '--checkpoint', named=False)
        for item in items
    ]


def side_by_side_names(options: BenchmarkOptions) -> None:
    """The models of several checkpoints: ``dense`` first if
    ``--models`` asks for it (the first checkpoint's architecture, dense),
    then each checkpoint in its deployable (merged) form."""
    extra = list(options.models or ())
    if any(m != 'dense' for m in extra):
        raise UsageError(
            f'with several --checkpoint, --models takes only '
            f"dense (the first checkpoint's dense form), got "
            f'{extra}'
        )
    names = extra[:1] + [name for name, _ in options.checkpoints]
    if len(set(names)) != len(names):
        raise UsageError(
            f'--checkpoint names must be unique (name them '
            f'NAME=PATH), got {names}'
        )
    options.models = names


def parse_cfg_options(
    items: Sequence[str], names: Sequence[str]
) -> Dict[Optional[str], Dict[str, Any]]:
    """``KEY=VALUE`` (all configs) and ``NAME:KEY=VALUE`` (one config), by
    config name (``None``: all)."""
    parsed: Dict[Optional[str], Dict[str, Any]] = {}
    for option in items:
        key, sep, value = option.partition('=')
        if not sep or not key:
            raise UsageError(
                f'--cfg-options takes [NAME:]KEY=VALUE, got {option!r}'
            )
        name, colon, rest = key.partition(':')
        if colon:
            if name not in names:
                raise UsageError(
                    f'--cfg-options {option!r}: no --config '
                    f'named {name!r} (have {list(names)})'
                )
            key = rest
        else:
            name = None
        parsed.setdefault(name, {})[key] = config_option_value(
            key, value, '--cfg-options'
        )
    return parsed


def check_outputs(options: BenchmarkOptions) -> None:
    """Fail before any work if an output path is unusable."""
    outputs = [
        p for p in (options.json_path, options.md_path) if p is not None
    ]
    inputs = [path for _, path in options.config]
    if options.checkpoint:
        inputs.append(options.checkpoint)
    inputs += [path for _, path in options.checkpoints]
    check_output_paths(outputs, inputs, options.force)


# ------------------------------------------------------------------ models
