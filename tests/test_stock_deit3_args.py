"""mmpretrain's ``DeiT3`` dicts carry over with ``type='HetDPTDeiT3'``
(issue 33, docs/user_guides/dinov2.md): built from mmpretrain's registry on
the stock module's weights, every argument gives the stock module's outputs.

mmpretrain's ``DeiT3TransformerEncoderLayer`` normalizes the FFN's input with
``ln1`` (its ``ln2`` is built and loaded but unused); ours uses ``ln2``, as
timm's and the official DeiT-III do, so the stock weights here have
``ln2 = ln1``, where both compute the same."""

import pytest
import torch
from helpers import (
    MMPRETRAIN_TINY,
    STOCK_INPUT_SHAPE,
    assert_same_outputs,
    randomized_stock,
)
from mmpretrain.models.backbones.deit3 import DeiT3
from mmpretrain.registry import MODELS

import hetdpt_mm.registry
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.models import HetDPTLayerScaleViT
from hetdpt_mm.models.layerscale_vit.stock_args import deit3_arch


@pytest.fixture(scope='module', autouse=True)
def registered():
    hetdpt_mm.registry.register_all_modules()


def randomized_deit3(**args):
    stock = randomized_stock(DeiT3, **args)
    with torch.no_grad():
        for layer in stock.layers:
            layer.ln2.load_state_dict(layer.ln1.state_dict())
    return stock


def built_on_stock_weights(tmp_path, stock, prefix='', **args):
    path = tmp_path / 'deit3.pth'
    state = {prefix + k: v for k, v in stock.state_dict().items()}
    torch.save(dict(state_dict=state), path)
    init_cfg = dict(type='Pretrained', checkpoint=str(path))
    if prefix:
        init_cfg['prefix'] = prefix
    ours = MODELS.build(dict(type='HetDPTDeiT3', **args, init_cfg=init_cfg))
    ours.init_weights()
    return ours.eval()


@pytest.mark.parametrize(
    'args',
    [
        dict(),
        dict(img_size=48),  # its 6x6 positions resampled to the 4x5 grid
        dict(in_channels=1),
        dict(out_indices=[0, -1]),
        dict(drop_rate=0.1, drop_path_rate=0.1),
        dict(qkv_bias=False),
        dict(norm_cfg=dict(type='LN')),  # mmcv's eps, 1e-5
        dict(final_norm=False),
        dict(out_type='featmap'),
        dict(out_type='raw', with_cls_token=False),
        dict(interpolate_mode='bilinear'),
        dict(use_layer_scale=True, patch_cfg=dict(), layer_cfgs=dict()),
    ],
)
def test_deit3_arguments_give_deit3_outputs(args, tmp_path):
    args = dict(MMPRETRAIN_TINY, **args)
    stock = randomized_deit3(**args)
    ours = built_on_stock_weights(tmp_path, stock, **args)
    assert isinstance(ours, HetDPTLayerScaleViT) and ours.no_embed_class
    assert_same_outputs(
        stock, ours, (2, args.get('in_channels', 3), *STOCK_INPUT_SHAPE[2:])
    )
    assert torch.equal(
        ours.blocks[0].ls2.gamma, stock.layers[0].ffn.gamma2.weight
    )


def test_a_checkpoint_of_a_classifier_loads_with_its_prefix(tmp_path):
    stock = randomized_deit3(**MMPRETRAIN_TINY)
    ours = built_on_stock_weights(
        tmp_path, stock, 'backbone.', **MMPRETRAIN_TINY
    )
    assert_same_outputs(stock, ours, STOCK_INPUT_SHAPE)


@pytest.mark.parametrize('name', ['s', 'medium', 'b', 'large', 'huge'])
def test_deit3_arch_names(name):
    with torch.device('meta'):
        stock = DeiT3(arch=name)
        ours = MODELS.build(dict(type='HetDPTDeiT3', arch=name))
    assert ours.arch_settings == {
        k: v for k, v in deit3_arch(name).items() if k != 'ffn'
    }
    assert ours.arch_settings['embed_dims'] == stock.embed_dims
    assert len(ours.blocks) == len(stock.layers)
    assert ours.patch_size == 16  # DeiT3's, for every arch (huge too)
    assert ours.pos_embed.shape == stock.pos_embed.shape


def test_pruned_and_merged_forms_compute_the_same(tmp_path):
    stock = randomized_deit3(**MMPRETRAIN_TINY)
    spec = dict(attn_removed=[1], act_removed=[0, 1])
    gated, pruned = (
        built_on_stock_weights(
            tmp_path, stock, **MMPRETRAIN_TINY, prune_spec=spec, gated=is_gated
        )
        for is_gated in (True, False)
    )
    merged = pruned.to_merged().eval()
    # The record holds the structure; the resampling is an output argument.
    rebuilt = HetDPTLayerScaleViT.from_record(
        merged.record(), pos_embed_antialias=False
    ).eval()
    rebuilt.load_state_dict(merged.state_dict())
    x = torch.randn(STOCK_INPUT_SHAPE)
    with torch.no_grad():
        outs = [m(x)[0] for m in (gated, pruned, merged, rebuilt)]
    for out in outs[1:]:
        assert (out - outs[0]).abs().max() <= 1e-5


@pytest.mark.parametrize(
    'args, message',
    [
        (dict(use_layer_scale=False), "type='HetDPTViT'"),
        (dict(out_type='avg_featmap'), "out_type='featmap'"),
        (dict(layer_cfgs=dict(qkv_bias=False)), 'qkv_bias'),
        (dict(patch_cfg=dict(padding=1)), 'patch_size'),
        (dict(arch='deit3-base'), "'base'"),
    ],
)
def test_arguments_without_a_counterpart_name_the_alternative(args, message):
    with pytest.raises(ValueError, match=message.replace('[', r'\[')):
        MODELS.build(dict(type='HetDPTDeiT3', **dict(MMPRETRAIN_TINY, **args)))


def test_deit3_weights_under_the_family_name_name_the_alias(tmp_path):
    """A DeiT3 dict with type='HetDPTLayerScaleViT' is mmpretrain's
    VisionTransformer (a class-token position): its weights say so."""
    stock = randomized_deit3(**MMPRETRAIN_TINY)
    path = tmp_path / 'deit3.pth'
    torch.save(dict(state_dict=stock.state_dict()), path)
    ours = MODELS.build(
        dict(
            type='HetDPTLayerScaleViT',
            **MMPRETRAIN_TINY,
            init_cfg=dict(type='Pretrained', checkpoint=str(path)),
        )
    )
    with pytest.raises(CheckpointError, match="type='HetDPTDeiT3'"):
        ours.init_weights()
