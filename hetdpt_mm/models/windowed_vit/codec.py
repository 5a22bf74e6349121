"""The windowed-ViT family's codec (SAM's image encoder, ViTDet): its arch
table, which tensors are its, the build arguments they say and the MACs per
block, as functions apart from the module; what its per-block keys say (a
record), their check and the tensor surgery are the ViT family's
(:mod:`..vit.codec`), whose keys its blocks share.  Its checkpoint layouts:
:mod:`.state_dict`."""

import functools
import math
from typing import Dict, Mapping, Optional, Union

from ...errors import CheckpointError
from ..vit import codec as vit_codec
from ..vit import state_dict as vit_state_dict
from ..vit.codec import resolve_arch
from . import state_dict as windowed_state_dict

#: SAM's image encoders (timm ``samvit_*``, mmpretrain ``ViTSAM``) and
#: ViTDet's backbones (MAE ViT-B / L / H): the blocks with global attention;
#: the others attend within windows.
WINDOWED_ARCH_PRESETS = {
    'base': dict(
        embed_dims=768,
        num_layers=12,
        num_heads=12,
        mlp_ratio=4.0,
        global_attn_indexes=[2, 5, 8, 11],
    ),
    'large': dict(
        embed_dims=1024,
        num_layers=24,
        num_heads=16,
        mlp_ratio=4.0,
        global_attn_indexes=[5, 11, 17, 23],
    ),
    'huge': dict(
        embed_dims=1280,
        num_layers=32,
        num_heads=16,
        mlp_ratio=4.0,
        global_attn_indexes=[7, 15, 23, 31],
    ),
}
#: mmpretrain's one-letter names of the presets.
_ALIASES = {name[0]: name for name in WINDOWED_ARCH_PRESETS}


def resolve_windowed_arch(arch: Union[str, Mapping]) -> Dict:
    """A preset (``'base'``, ``'large'``, ``'huge'``, mmpretrain's ``'b'``
    ...) or a dict of the ViT's arch keys (or mmpretrain's
    ``feedforward_channels``) and ``global_attn_indexes``, spelled out."""
    if isinstance(arch, str):
        name = _ALIASES.get(arch.lower(), arch.lower())
        arch = WINDOWED_ARCH_PRESETS.get(name, arch)
    if isinstance(arch, str):
        raise ValueError(f'unknown arch {arch!r}: {[*WINDOWED_ARCH_PRESETS]}')
    arch = dict(arch)
    global_blocks = sorted({int(i) for i in arch.pop('global_attn_indexes')})
    arch = resolve_arch(arch)
    if not set(global_blocks) <= set(range(arch['num_layers'])):
        raise ValueError(f'global_attn_indexes {global_blocks}: no such block')
    arch['mlp_ratio'] = float(arch['mlp_ratio'])
    return dict(arch, global_attn_indexes=global_blocks)


def window_blocks(arch: Mapping, window_size: int):
    """The blocks that attend within windows (the rest: globally)."""
    if not window_size:
        return []
    global_blocks = set(arch['global_attn_indexes'])
    return [i for i in range(arch['num_layers']) if i not in global_blocks]


arch_settings = resolve_windowed_arch


def arch_depth(arch) -> int:
    return resolve_windowed_arch(arch)['num_layers']


def recognizes(state: Mapping) -> bool:
    return windowed_state_dict.is_windowed_state_dict(state)


def canonical_state(state: Mapping) -> Mapping:
    return windowed_state_dict.canonical_layout(state)


#: Per-block keys say what a ViT's do: the ViT family reads them.
record_from_tensors = functools.partial(
    vit_codec.record_from_tensors, family='windowed_vit'
)
check_record = vit_codec.check_record
convert_state_dict = vit_codec.convert_state_dict


def build_args_from_tensors(
    state: Mapping, arch: Optional[Mapping] = None
) -> Dict:
    """The structure from tensor shapes: widths, depth and the MLP ratio;
    heads from the relative position tables' width (head dimension),
    windowed blocks from their rows (``2 * window - 1``; global blocks:
    ``2 * grid - 1``).  ``arch`` (or the preset of the same width and
    depth) gives what the tensors cannot: the heads without tables, the
    global blocks where a window is as large as the map."""
    if isinstance(arch, Mapping) and 'arch' in arch:
        arch = arch['arch']
    proj = state['patch_embed.proj.weight']
    dim, patch = int(proj.shape[0]), int(proj.shape[-1])
    depth = vit_state_dict.infer_layout(state)['depth']
    tables = {
        i: state[f'blocks.{i}.attn.rel_pos_h']
        for i in range(depth)
        if f'blocks.{i}.attn.rel_pos_h' in state
    }
    known = (
        resolve_windowed_arch(arch)
        if arch
        else next(
            (
                resolve_windowed_arch(preset)
                for preset in WINDOWED_ARCH_PRESETS.values()
                if preset['embed_dims'] == dim
                and preset['num_layers'] == depth
            ),
            None,
        )
    )
    rows = sorted({int(t.shape[0]) for t in tables.values()})
    if len(rows) == 2:  # windows and the grid
        global_blocks = [i for i, t in tables.items() if t.shape[0] == rows[1]]
    elif known is not None:
        global_blocks = known['global_attn_indexes']
    else:
        raise ValueError('the weights show no global blocks: give --arch')
    sides = {
        is_global: {
            (int(t.shape[0]) + 1) // 2
            for i, t in tables.items()
            if (i in global_blocks) == is_global
        }
        for is_global in (False, True)
    }
    window = min(sides[False], default=None)
    grid = min(sides[True], default=None)
    head_dim = int(next(iter(tables.values())).shape[1]) if tables else None
    heads = dim // head_dim if head_dim else (known or {}).get('num_heads')
    if heads is None:
        raise ValueError('the weights show no number of heads: give --arch')
    fc1 = next((k for k in state if k.endswith('mlp.fc1.weight')), None)
    mlp_ratio = state[fc1].shape[0] / dim if fc1 else 4.0
    pos_embed = state.get('pos_embed')
    pos_grid = None if pos_embed is None else int(pos_embed.shape[1])
    grid = grid or pos_grid or 64
    args = dict(
        arch=resolve_windowed_arch(
            dict(
                embed_dims=dim,
                num_layers=depth,
                num_heads=heads,
                mlp_ratio=mlp_ratio,
                global_attn_indexes=global_blocks,
            )
        ),
        img_size=(grid * patch, grid * patch),
        patch_size=patch,
        in_channels=int(proj.shape[1]),
        window_size=window or 14,
        out_channels=int(state['neck.0.weight'].shape[0])
        if 'neck.0.weight' in state
        else 0,
        qkv_bias=any(k.endswith('attn.qkv.bias') for k in state),
        use_abs_pos=pos_embed is not None,
        use_rel_pos=bool(tables),
    )
    if pos_grid is not None and pos_grid != grid:
        args['pretrain_img_size'] = (pos_grid * patch, pos_grid * patch)
    if known is not None and (
        known['embed_dims'],
        known['num_layers'],
    ) != (dim, depth):
        raise CheckpointError(f'arch is not of width {dim}, depth {depth}')
    return args


def layer_macs(
    arch: Mapping, img_size, attention_products: bool = True
) -> Dict[str, object]:
    """Per block: attention (qkv and projection over the tokens its windows
    cover, padding included; the two token x token products within each
    window, or over the map, unless ``attention_products`` is false; the
    decomposed relative positions' products with the queries), FFN and
    merged FFN; the rest: patch embedding and SAM's neck."""
    settings = resolve_windowed_arch(arch['arch'])
    patch = arch['patch_size']
    height, width = (-(-side // patch) for side in img_size)
    tokens, dim = height * width, settings['embed_dims']
    windowed = set(window_blocks(settings, arch['window_size']))
    macs = dict(attn=[], ffn=[], merged_ffn=[])
    for index in range(settings['num_layers']):
        if index in windowed:
            side = arch['window_size']
            span = (side, side)
            covered = math.ceil(height / side) * math.ceil(width / side)
            covered *= side * side
        else:
            span, covered = (height, width), tokens
        keys = span[0] * span[1]
        products = 2 * covered * keys * dim if attention_products else 0
        relative = covered * sum(span) * dim if arch['use_rel_pos'] else 0
        macs['attn'].append(4 * covered * dim * dim + products + relative)
        macs['ffn'].append(2 * tokens * dim * int(settings['mlp_ratio'] * dim))
        macs['merged_ffn'].append(tokens * dim * dim)
    neck = arch['out_channels']
    macs['rest'] = tokens * dim * arch['in_channels'] * patch * patch + (
        tokens * neck * (dim + 9 * neck)
    )
    return macs
