"""Layer depths of a backbone's parameters for layer-wise learning-rate
decay: what the families' ``get_layer_depth`` answers to mmpretrain's
``LearningRateDecayOptimWrapperConstructor``, or to
:class:`~hetdpt_mm.optim.HetDPTLayerDecayOptimWrapperConstructor` for
detectors and segmentors.

Blocks keep their depth whatever HetDPT removed from them: a block whose
attention (or GELU, or both) is gone still holds weights at that depth (its
norms, its FFN), and the decay of every other block stays that of the dense
model the recipe was tuned for."""

from typing import Sequence, Tuple


def vit_layer_depth(
    param_name: str, prefix: str, depth: int
) -> Tuple[int, int]:
    """Of ``depth + 2`` depths, a ViT's embeddings are depth 0, block ``i``
    depth ``i + 1`` and everything after the blocks (final norm, neck,
    heads) the last depth, ``depth + 1``."""
    num_layers = depth + 2
    if not param_name.startswith(prefix):
        return num_layers - 1, num_layers
    name = param_name[len(prefix) :]
    if name in ('cls_token', 'dist_token', 'pos_embed') or name.startswith(
        'patch_embed.'
    ):
        return 0, num_layers
    if name.startswith('blocks.'):
        return int(name.split('.')[1]) + 1, num_layers
    return num_layers - 1, num_layers


def swin_layer_depth(
    param_name: str, prefix: str, depths: Sequence[int]
) -> Tuple[int, int]:
    """Numbered as mmpretrain's ``SwinTransformer.get_layer_depth``
    (mmdet's and mmseg's layer-decay constructors have no Swin rule): of
    ``depth + 2`` depths, the patch embedding is depth 0, block ``j`` of
    stage ``s`` depth ``sum(depths[:s]) + j + 1`` (its global index + 1),
    the patch merging after stage ``s`` the depth of that stage's last
    block, and everything else (the output norms ``norm{i}``, neck, heads)
    the last depth, ``depth + 1``."""
    num_layers = sum(depths) + 2
    if not param_name.startswith(prefix):
        return num_layers - 1, num_layers
    name = param_name[len(prefix) :]
    if name.startswith('patch_embed'):
        return 0, num_layers
    if name.startswith('stages.'):
        parts = name.split('.')
        stage = int(parts[1])
        if parts[2] == 'blocks':
            return sum(depths[:stage]) + int(parts[3]) + 1, num_layers
        return sum(depths[: stage + 1]), num_layers  # patch merging
    return num_layers - 1, num_layers
