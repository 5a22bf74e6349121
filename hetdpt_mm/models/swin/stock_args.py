"""HetDPTSwin's architecture arguments: its presets, and the constructor
arguments of mmdet's / mmseg's and mmpretrain's ``SwinTransformer`` read as
HetDPTSwin's, so that a stock Swin config builds it with only ``type``
changed (docs/user_guides/swin.md).

Stock arguments that only concern an absolute position embedding
(``pretrain_img_size``, ``img_size``, ``interpolate_mode``) or batch norms
(``norm_eval``) change nothing in a Swin without either; ``convert_weights``
changes nothing because every Swin layout is recognised when loaded.  The
few stock choices HetDPTSwin does not build are refused with the supported
alternative named.
"""

from typing import Dict, Mapping, Optional, Sequence, Union

from ...registry import constructor_keywords, unexpected_keywords_message

SWIN_ARCH_PRESETS = {
    'tiny': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
    'small': dict(
        embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)
    ),
    'base': dict(
        embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)
    ),
    'large': dict(
        embed_dims=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48)
    ),
}
#: mmpretrain's one-letter names of the presets.
_PRESET_ALIASES = {name[0]: name for name in SWIN_ARCH_PRESETS}
#: mmdet's / mmseg's arguments that make up an arch dict.
ARCH_KEYS = ('embed_dims', 'depths', 'num_heads', 'mlp_ratio')
#: Stock arguments without an effect here (see the module docstring).
_NO_EFFECT = (
    'pretrain_img_size',
    'img_size',
    'interpolate_mode',
    'norm_eval',
    'convert_weights',
)
#: The other stock arguments read here.
_READ_ARGS = {
    'strides',
    'use_abs_pos_embed',
    'act_cfg',
    'norm_cfg',
    'stage_cfgs',
    'patch_cfg',
}
#: What the patch embedding of every stock Swin is built with.
_PATCH_DEFAULTS = dict(
    conv_type='Conv2d',
    padding='corner',
    dilation=1,
    bias=True,
    norm_cfg=dict(type='LN'),
)


def resolve_swin_arch(arch: Union[str, Mapping]) -> Dict:
    if isinstance(arch, str):
        name = _PRESET_ALIASES.get(arch.lower(), arch.lower())
        arch = SWIN_ARCH_PRESETS.get(name, arch)
    if isinstance(arch, str):
        raise ValueError(f'unknown arch {arch!r} (docs/user_guides/swin.md)')
    arch = dict(arch)
    if (
        not {'embed_dims', 'depths', 'num_heads'}
        <= set(arch)
        <= set(ARCH_KEYS)
    ):
        raise ValueError(f'a Swin arch takes {ARCH_KEYS}, not {[*arch]}')
    depths = arch['depths'] = [int(d) for d in arch['depths']]
    heads = arch['num_heads'] = [int(h) for h in arch['num_heads']]
    widths = [arch['embed_dims'] * 2**stage for stage in range(len(heads))]
    if (
        len(depths) != len(heads)
        or min(depths, default=0) < 1
        or any(h < 1 or w % h for h, w in zip(heads, widths))
    ):
        raise ValueError('Swin stages: blocks >= 1, heads dividing widths')
    # A float either way, so that a stock dict's ``mlp_ratio=4`` records as
    # the preset's 4.0.
    arch['mlp_ratio'] = float(arch.get('mlp_ratio', 4.0))
    return arch


def _refuse(name: str, value, supported: str):
    raise ValueError(f'{name}={value!r}: HetDPTSwin builds {supported}')


def _check_layer_cfg(name: str, cfg, layer_type: str, aliases) -> None:
    """``act_cfg`` / ``norm_cfg``: only the layer every Swin uses."""
    extra = (
        {key: value for key, value in cfg.items() if key != 'type'}
        if isinstance(cfg, Mapping)
        else None
    )
    if (
        extra not in ({}, dict(eps=1e-5), dict(requires_grad=True))
        or cfg.get('type') not in aliases
    ):
        _refuse(
            name,
            cfg,
            f'dict(type={layer_type!r}) only',
        )


def _uniform(name: str, values: Sequence, given):
    """One value for all stages and blocks (``given`` where none)."""
    distinct = {repr(v): v for v in values}
    if len(distinct) > 1:
        _refuse(
            name,
            values,
            'the same value everywhere',
        )
    return next(iter(distinct.values()), given)


def _stage_cfgs(stage_cfgs, stages: int, window_size: int, mlp_ratio: float):
    """The window and MLP ratio mmpretrain's ``stage_cfgs`` give (the only
    per-stage choices HetDPTSwin takes, and uniformly)."""
    per_stage = (
        list(stage_cfgs)
        if isinstance(stage_cfgs, Sequence)
        else [stage_cfgs] * stages
    )
    windows, ratios = [], []
    for stage_cfg in per_stage:
        stage_cfg = dict(stage_cfg)
        if 'window_size' in stage_cfg:
            windows.append(stage_cfg.pop('window_size'))
        blocks = stage_cfg.pop('block_cfgs', {})
        for block in blocks if isinstance(blocks, Sequence) else [blocks]:
            block = dict(block)
            if 'window_size' in block:
                windows.append(block.pop('window_size'))
            if 'ffn_ratio' in block:
                ratios.append(block.pop('ffn_ratio'))
            if block:
                _refuse(
                    'stage_cfgs.block_cfgs',
                    block,
                    'window_size and ffn_ratio only',
                )
        if stage_cfg.pop('downsample_cfg', {}):
            _refuse(
                'stage_cfgs.downsample_cfg',
                stage_cfg,
                'the stock patch merging only',
            )
        if stage_cfg:
            _refuse(
                'stage_cfgs',
                stage_cfg,
                'window_size and block_cfgs only (the rest in arch)',
            )
    return (
        _uniform('window_size', windows, window_size),
        _uniform('ffn_ratio', ratios, mlp_ratio),
    )


def _patch_cfg(
    patch_cfg: Mapping, patch_size: int, in_channels: int, embed_dims: int
) -> int:
    """The patch size mmpretrain's ``patch_cfg`` gives; anything but the
    stock non-overlapping embedding is refused."""
    cfg = dict(patch_cfg)
    cfg.pop('input_size', None)  # sizes the absolute position embedding
    sizes = {cfg.pop(key) for key in ('kernel_size', 'stride') if key in cfg}
    if len(sizes) > 1:
        _refuse(
            'patch_cfg',
            patch_cfg,
            'non-overlapping patches: pass patch_size',
        )
    patch_size = sizes.pop() if sizes else patch_size
    fixed = dict(
        _PATCH_DEFAULTS, in_channels=in_channels, embed_dims=embed_dims
    )
    for key, value in cfg.items():
        if key not in fixed or fixed[key] != value:
            _refuse(
                f'patch_cfg.{key}',
                value,
                'the stock patch embedding only',
            )
    return patch_size


def read_stock_args(
    arch: Union[str, Mapping],
    window_size: int,
    patch_size: int,
    in_channels: int,
    stock: Dict,
    owner: type,
) -> Dict:
    """``arch``, ``window_size`` and ``patch_size`` from HetDPTSwin's own
    arguments and the stock ones in ``stock`` (refused where they cannot
    apply; an unknown name is a ``TypeError`` naming ``owner`` and the
    closest argument it takes)."""
    stock_names = set(ARCH_KEYS) | set(_NO_EFFECT) | _READ_ARGS
    unknown = set(stock) - stock_names
    if unknown:
        valid = constructor_keywords(owner) | stock_names
        raise TypeError(
            unexpected_keywords_message(owner.__name__, unknown, valid)
        )
    arch = resolve_swin_arch(arch)
    arch.update({key: stock[key] for key in ARCH_KEYS if key in stock})
    arch = resolve_swin_arch(arch)
    if stock.get('use_abs_pos_embed'):
        _refuse(
            'use_abs_pos_embed',
            True,
            'use_abs_pos_embed=False only',
        )
    _check_layer_cfg(
        'act_cfg', stock.get('act_cfg', dict(type='GELU')), 'GELU', ('GELU',)
    )
    _check_layer_cfg(
        'norm_cfg',
        stock.get('norm_cfg', dict(type='LN')),
        'LN',
        ('LN', 'LayerNorm'),
    )
    stages = len(arch['depths'])
    window_size, arch['mlp_ratio'] = _stage_cfgs(
        stock.get('stage_cfgs', {}), stages, window_size, arch['mlp_ratio']
    )
    patch_size = _patch_cfg(
        stock.get('patch_cfg', {}), patch_size, in_channels, arch['embed_dims']
    )
    strides = stock.get('strides')
    if strides is not None and list(strides) != [patch_size] + [2] * (
        stages - 1
    ):
        _refuse(
            'strides',
            strides,
            'strides=(patch_size, 2, 2, ...)',
        )
    return dict(arch=arch, window_size=window_size, patch_size=patch_size)


#: The defaults of each toolbox's ``SwinTransformer`` where they differ
#: from HetDPTSwin's own, applied when that toolbox's registry builds it.
TOOLBOX_DEFAULTS = {
    'mmdet': dict(pad_small_map=True),
    'mmseg': dict(pad_small_map=True),
    'mmpretrain': dict(out_indices=(3,), block_drop_rate=0.0),
}


def toolbox_args(toolbox: str, args: Dict) -> Dict:
    """``args`` as ``toolbox``'s registry passes them to HetDPTSwin: its
    defaults, and mmpretrain's ``frozen_stages=N``, which freezes stages
    ``0..N`` (HetDPTSwin's, as mmdet's: ``0..N-1``)."""
    out = dict(TOOLBOX_DEFAULTS.get(toolbox, {}), **args)
    frozen: Optional[int] = out.get('frozen_stages')
    if toolbox == 'mmpretrain' and frozen is not None and frozen >= 0:
        stages = len(resolve_swin_arch(out.get('arch', 'tiny'))['depths'])
        if frozen >= stages:
            raise ValueError(f'frozen_stages must be in -1..{stages - 1}')
        out['frozen_stages'] = frozen + 1
    return out
