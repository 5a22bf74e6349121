"""State-dict layouts and surgery for HetDPTSwin, in one place.

:func:`canonical_layout` reads the official, timm and OpenMMLab layouts into
the family's own (docs/user_guides/swin.md, *Checkpoints*).  Specs address
blocks by their index over all stages, so the surgery is the ViT family's
(:mod:`hetdpt_mm.models.vit.state_dict`), whose per-block keys are the same."""

import re
from collections import OrderedDict
from typing import Dict, List, Mapping, Tuple

import torch
from timm.layers.pos_embed_rel import resize_rel_pos_bias_table_simple

from ...errors import CheckpointError
from ...spec import PruneSpec
from ..vit import state_dict as vit_state_dict
from .stock_args import SWIN_ARCH_PRESETS, resolve_swin_arch

_BLOCK_KEY = re.compile(r'^stages\.(\d+)\.blocks\.(\d+)\.(.+)$')
_GLOBAL_BLOCK_KEY = re.compile(r'^blocks\.(\d+)\.(.+)$')
_LAYERS_KEY = re.compile(r'^layers\.(\d+)\.(.+)$')
_DOWNSAMPLE_KEY = re.compile(r'^stages\.(\d+)\.downsample\.(.+)$')
#: Key-name pieces that are buffers of other implementations.
_BUFFER_SUFFIXES = ('relative_position_index', 'attn_mask')

OWN_MARKERS = ('patch_embed.proj.weight', 'stages.0.blocks.0.norm1.weight')
REFERENCE_MARKERS = (
    'patch_embed.proj.weight',
    'layers.0.blocks.0.norm1.weight',
)
OPENMMLAB_MARKERS = (
    'patch_embed.projection.weight',
    'stages.0.blocks.0.norm1.weight',
)
_OPENMMLAB_BLOCK_RENAMES = (
    ('attn.w_msa.', 'attn.'),
    ('ffn.layers.0.0.', 'mlp.fc1.'),
    ('ffn.layers.1.', 'mlp.fc2.'),
)


def _has(state: Mapping, markers) -> bool:
    return all(key in state for key in markers)


def is_swin_state_dict(state: Mapping) -> bool:
    """Whether ``state`` holds Swin weights in any layout read here."""
    return any(
        _has(state, markers)
        for markers in (OWN_MARKERS, REFERENCE_MARKERS, OPENMMLAB_MARKERS)
    )


def num_stages(state: Mapping, pattern=_BLOCK_KEY) -> int:
    return max(
        (int(m.group(1)) + 1 for m in map(pattern.match, state) if m),
        default=0,
    )


def _drop_buffers_and_heads(key: str) -> bool:
    return (
        key.endswith(_BUFFER_SUFFIXES)
        or key.startswith('head.')
        or key.startswith('head_')
    )


def _refuse_absolute_pos_embed(state: Mapping) -> None:
    if 'absolute_pos_embed' in state:
        raise CheckpointError('HetDPTSwin has no absolute_pos_embed')


def _reference_layout(state: Mapping) -> 'OrderedDict':
    """Official or timm keys (``layers.{s}``) in ours."""
    last = num_stages(state, _LAYERS_KEY) - 1
    # The official release merges at the end of stage s, timm at the start
    # of stage s + 1: timm has no layers.0.downsample.
    timm_order = any(
        k.startswith('layers.') and '.downsample.' in k for k in state
    ) and not any(k.startswith('layers.0.downsample.') for k in state)
    out = OrderedDict()
    for key, value in state.items():
        if _drop_buffers_and_heads(key):
            continue
        match = _LAYERS_KEY.match(key)
        if match:
            stage, rest = int(match.group(1)), match.group(2)
            if rest.startswith('downsample.') and timm_order:
                stage -= 1
            key = f'stages.{stage}.{rest}'
        elif key.startswith('norm.'):
            key = f'norm{last}.' + key[len('norm.') :]
        out[key] = value
    return _centre_clamped_bias_tables(out)


#: The window of the official Swins and timm's, where every stage's table
#: is shrunk and so none shows it.
DEFAULT_WINDOW = 7


def _centre_clamped_bias_tables(state: 'OrderedDict') -> 'OrderedDict':
    """The official code and timm shrink a stage's window (and its bias
    table) to a smaller map; such a table goes to the centre of one for the
    model's window, whose central offsets a shrunk window reads
    (:meth:`~.layers.WindowAttention.relative_position_bias`).  Tables that
    shrink from every stage to the next were all shrunk: the model's window
    is the default one."""
    tables = [k for k in state if k.endswith('relative_position_bias_table')]
    sides = {k: table_side(state[k], k) for k in tables}
    by_stage = [
        max(v for k, v in sides.items() if k.startswith(f'stages.{s}.'))
        for s in range(num_stages(state))
        if any(k.startswith(f'stages.{s}.') for k in sides)
    ]
    side = max(by_stage, default=0)
    if len(by_stage) > 1 and by_stage == sorted(set(by_stage), reverse=True):
        side = max(side, 2 * DEFAULT_WINDOW - 1)
    for key in tables:
        table, small = state[key], sides[key]
        if small < side:
            grid = table.new_zeros(side, side, table.shape[1])
            start = (side - small) // 2
            centre = slice(start, start + small)
            grid[centre, centre] = table.reshape(small, small, -1)
            state[key] = grid.reshape(side * side, -1)
    return state


def table_side(table: torch.Tensor, key: str) -> int:
    """The side ``2w - 1`` of a window's relative position bias table."""
    side = int(round(table.shape[0] ** 0.5))
    if side * side != table.shape[0] or side % 2 == 0:
        raise CheckpointError(f'{key}: {table.shape[0]} rows, no window')
    return side


def unfold_to_official_order(weight: torch.Tensor) -> torch.Tensor:
    """Patch-merging input channels from ``nn.Unfold``'s order (channel-
    major, neighbours ``(0,0), (0,1), (1,0), (1,1)``) to the official one
    (neighbour-major, ``(0,0), (1,0), (0,1), (1,1)``); the last dimension
    of ``weight`` (a reduction weight or a norm's vector) is permuted."""
    channels = weight.shape[-1] // 4
    by_neighbour = weight.reshape(*weight.shape[:-1], channels, 4)
    return (
        by_neighbour[..., [0, 2, 1, 3]].transpose(-1, -2).reshape(weight.shape)
    )


def _openmmlab_layout(state: Mapping) -> 'OrderedDict':
    out = OrderedDict()
    for key, value in state.items():
        if _drop_buffers_and_heads(key):
            continue
        if key.startswith('patch_embed.projection.'):
            key = 'patch_embed.proj.' + key[len('patch_embed.projection.') :]
        match = _BLOCK_KEY.match(key)
        if match:
            key = (
                f'stages.{match.group(1)}.blocks.{match.group(2)}.'
                + vit_state_dict.rename_key(
                    match.group(3), _OPENMMLAB_BLOCK_RENAMES
                )
            )
        elif _DOWNSAMPLE_KEY.match(key):
            value = unfold_to_official_order(value)
        out[key] = value
    return out


def canonical_layout(state: Mapping) -> Mapping:
    """Swin tensors in HetDPTSwin's layout, from any layout read here."""
    _refuse_absolute_pos_embed(state)
    if _has(state, OWN_MARKERS):
        out = state
    elif _has(state, OPENMMLAB_MARKERS):
        out = _openmmlab_layout(state)
    else:
        out = _reference_layout(state)
    for key, value in out.items():
        if key.endswith('relative_position_bias_table'):
            table_side(value, key)
    return out


# ------------------------------------------------ blocks numbered globally
def stage_depths(state: Mapping) -> List[int]:
    """Blocks per stage, from the keys (own layout)."""
    depths = [0] * num_stages(state)
    for match in filter(None, map(_BLOCK_KEY.match, state)):
        stage, block = int(match.group(1)), int(match.group(2))
        depths[stage] = max(depths[stage], block + 1)
    return depths


def build_args_from_tensors(state: Mapping, arch=None) -> Dict:
    """HetDPTSwin's structural arguments from tensor shapes (own layout):
    widths, depths, heads (the bias tables' columns), window (their rows),
    MLP ratio, the outputs with a norm (an official or timm classifier: the
    last); ``arch`` (or the preset of the same width and depths) gives the
    heads of a stage whose attention is all removed."""
    if isinstance(arch, Mapping) and 'arch' in arch:
        arch = arch['arch']
    depths = stage_depths(state)
    proj = state['patch_embed.proj.weight']
    dim = int(proj.shape[0])
    heads, window = [], None
    for stage, count in enumerate(depths):
        tables = [
            state[
                f'stages.{stage}.blocks.{j}.attn.relative_position_bias_table'
            ]
            for j in range(count)
            if f'stages.{stage}.blocks.{j}.attn.'
            'relative_position_bias_table' in state
        ]
        heads.append(int(tables[0].shape[1]) if tables else None)
        if tables:
            window = (int(round(tables[0].shape[0] ** 0.5)) + 1) // 2
    if None in heads:
        known = (
            resolve_swin_arch(arch)
            if arch
            else next(
                (
                    dict(p)
                    for p in SWIN_ARCH_PRESETS.values()
                    if p['embed_dims'] == dim and list(p['depths']) == depths
                ),
                None,
            )
        )
        if known is None:
            raise ValueError('a stage has no attention left: give --arch')
        heads = [
            h if h is not None else known['num_heads'][s]
            for s, h in enumerate(heads)
        ]
    fc1 = [
        v
        for k, v in state.items()
        if k.endswith('mlp.fc1.weight') and k.startswith('stages.0.')
    ]
    mlp_ratio = fc1[0].shape[0] / dim if fc1 else 4.0
    outputs = [s for s in range(len(depths)) if f'norm{s}.weight' in state]
    # A stage's output norm twice its width: taken after the merging.
    after = any(
        state[f'norm{s}.weight'].shape[0] == 2 ** (s + 1) * dim
        for s in outputs
        if s < len(depths) - 1
    )
    return dict(
        arch=dict(
            embed_dims=dim, depths=depths, num_heads=heads, mlp_ratio=mlp_ratio
        ),
        window_size=window or 7,
        patch_size=int(proj.shape[-1]),
        in_channels=int(proj.shape[1]),
        qkv_bias=any(k.endswith('attn.qkv.bias') for k in state),
        patch_norm='patch_embed.norm.weight' in state,
        out_indices=outputs,
        out_after_downsample=after,
        qk_scale=None,
    )  # a scale leaves no trace in the tensors


def block_positions(depths) -> List[Tuple[int, int]]:
    """``(stage, block in stage)`` of each global block index."""
    return [
        (stage, block)
        for stage, count in enumerate(depths)
        for block in range(count)
    ]


def to_global_blocks(state: Mapping) -> Tuple['OrderedDict', List[int]]:
    """Block keys renamed ``blocks.{global index}.*`` (the ViT surgery's
    names), and the depths that undo it."""
    depths = stage_depths(state)
    offsets = [sum(depths[:stage]) for stage in range(len(depths))]
    out = OrderedDict()
    for key, value in state.items():
        match = _BLOCK_KEY.match(key)
        if match:
            index = offsets[int(match.group(1))] + int(match.group(2))
            key = f'blocks.{index}.{match.group(3)}'
        out[key] = value
    return out, depths


def from_global_blocks(state: Mapping, depths) -> 'OrderedDict':
    positions = block_positions(depths)
    out = OrderedDict()
    for key, value in state.items():
        match = _GLOBAL_BLOCK_KEY.match(key)
        if match:
            stage, block = positions[int(match.group(1))]
            key = f'stages.{stage}.blocks.{block}.{match.group(2)}'
        out[key] = value
    return out


def convert_state_dict(
    state: Mapping, spec: PruneSpec, form: str
) -> 'OrderedDict[str, torch.Tensor]':
    """``state`` (own layout) in the layout of a ``form`` network with
    ``spec``: the ViT surgery (drop removed attention, drop gates, merge
    ``fc2 fc1``) on globally numbered blocks."""
    flat, depths = to_global_blocks(state)
    if sum(depths) != spec.depth:
        raise CheckpointError(f'{sum(depths)} blocks, spec {spec.depth}')
    return from_global_blocks(
        vit_state_dict.convert_state_dict(flat, spec, form), depths
    )


def resize_relative_position_bias_table(
    table: torch.Tensor, window: int
) -> torch.Tensor:
    """A ``((2w' - 1)², heads)`` bias table for window ``w'`` resampled
    (bicubic) to window ``window``."""
    resized = resize_rel_pos_bias_table_simple(
        table.float(),
        (window, window),
        ((2 * window - 1) ** 2, table.shape[1]),
    )
    return resized.to(table.dtype)
