"""The Swin family's codec: which tensors are a Swin's, what they say (a
record, build arguments), their conversion and the MACs per block, as
functions apart from the module; once the blocks are numbered over all
stages, the ViT family's functions (:mod:`..vit.codec`) read them.  Its
checkpoint layouts and surgery: :mod:`.state_dict`."""

from dataclasses import replace
from typing import Dict, Mapping

from ...checkpoint.record import HetDPTRecord
from ..vit import codec as vit_codec
from . import state_dict as swin_state_dict
from .stock_args import resolve_swin_arch

#: What removed layers leave in a Swin block.  A removed W-MSA / SW-MSA
#: leaves ``x + LN1(x)`` by default: the released ViT semantics carried
#: over, because a Swin block is the same pre-norm residual block (only the
#: attention's token set differs), so a model pruned from dense Swin
#: weights starts from the function the method's recipe was tuned on;
#: ``removed_attn_output='zero'`` leaves ``x``, a true identity, for
#: recipes that want one (docs/user_guides/swin.md).
SWIN_SEMANTICS = dict(removed_attn_output='norm', residual_gelu='both_removed')


def recognizes(state: Mapping) -> bool:
    return swin_state_dict.is_swin_state_dict(state)


def canonical_state(state: Mapping) -> Mapping:
    return swin_state_dict.canonical_layout(state)


# Once the blocks are numbered over all stages, a Swin state dict's
# per-block keys say what a ViT's do (attention missing, FFN merged,
# gates): the ViT family reads them.
def record_from_tensors(
    state: Mapping, source: str, family: str = 'swin'
) -> HetDPTRecord:
    flat = swin_state_dict.to_global_blocks(state)[0]
    return replace(
        vit_codec.record_from_tensors(flat, source, family),
        semantics=dict(SWIN_SEMANTICS),
    )


def check_record(record: HetDPTRecord, state: Mapping) -> None:
    vit_codec.check_record(record, swin_state_dict.to_global_blocks(state)[0])


#: The family's tensor surgery and its reading of tensor shapes.
convert_state_dict = swin_state_dict.convert_state_dict
build_args_from_tensors = swin_state_dict.build_args_from_tensors


arch_settings = resolve_swin_arch


def arch_depth(arch) -> int:
    return sum(resolve_swin_arch(arch)['depths'])


def layer_macs(
    arch: Mapping, img_size, attention_products: bool = True
) -> Dict[str, object]:
    """Per block (global index): attention (qkv, both attention
    products over the padded windows unless ``attention_products`` is
    false, proj), FFN and merged FFN; the rest: patch embedding and
    patch merging."""
    settings = resolve_swin_arch(arch['arch'])
    window = arch['window_size']
    patch = arch['patch_size']
    height = -(-img_size[0] // patch)
    width = -(-img_size[1] // patch)
    dim = settings['embed_dims']
    rest = height * width * dim * arch['in_channels'] * patch * patch
    macs = dict(attn=[], ffn=[], merged_ffn=[])
    stages = len(settings['depths'])
    for stage, count in enumerate(settings['depths']):
        tokens = height * width
        side = min(height, width, window)
        padded = (-(-height // side) * side) * (-(-width // side) * side)
        hidden = int(dim * settings['mlp_ratio'])
        products = 2 * side * side * dim if attention_products else 0
        macs['attn'] += [padded * (4 * dim * dim + products)] * count
        macs['ffn'] += [2 * tokens * dim * hidden] * count
        macs['merged_ffn'] += [tokens * dim * dim] * count
        if stage < stages - 1:
            height, width = -(-height // 2), -(-width // 2)
            rest += height * width * 4 * dim * 2 * dim
            dim *= 2
    macs['rest'] = rest
    return macs
