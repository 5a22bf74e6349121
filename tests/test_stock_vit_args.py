"""Stock ViT dicts carry over (issue 33, docs/advanced/backbone.md):
HetDPTViT and HetDPTLayerScaleViT take the constructor arguments of mmseg's and
mmpretrain's ``VisionTransformer`` with their meaning.  Every argument,
given to our backbone on the stock module's weights, gives the stock
module's outputs; the few without a counterpart are errors naming what to
write instead; and a stock mmseg ViT config with only ``type`` changed
trains under mmseg's own ``tools/train.py``."""

import os
import subprocess
import sys
from pathlib import Path

import mmseg
import pytest
import torch
from helpers import (
    MMPRETRAIN_TINY,
    REPO,
    STOCK_INPUT_SHAPE,
    assert_same_outputs,
    randomize_,
    randomized_stock,
)
from mmpretrain.models.backbones import VisionTransformer as PretrainViT
from mmseg.models.backbones import VisionTransformer as SegViT

from hetdpt_demo.data import make_segmentation
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.models import HetDPTLayerScaleViT, HetDPTViT
from hetdpt_mm.models.vit.state_dict import (
    from_openmmlab_layout,
    openmmlab_name,
)

#: mmseg's spelling of a tiny ViT (with the LayerNorm epsilon its configs
#: give: mmcv's LayerNorm default is 1e-5, DeiT's 1e-6).
SEG_TINY = dict(
    img_size=32,
    patch_size=8,
    embed_dims=32,
    num_layers=3,
    num_heads=2,
    mlp_ratio=2,
    norm_cfg=dict(type='LN', eps=1e-6),
)


def ours_on_stock_weights(tmp_path, stock, ours_cls=HetDPTViT, **args):
    path = tmp_path / 'stock.pth'
    torch.save(dict(state_dict=stock.state_dict()), path)
    ours = ours_cls(
        **args, init_cfg=dict(type='Pretrained', checkpoint=str(path))
    )
    ours.init_weights()
    return ours.eval()


@pytest.mark.parametrize(
    'args',
    [
        dict(),
        dict(final_norm=True),
        dict(final_norm=True, norm_cfg=dict(type='LN')),  # mmcv's eps, 1e-5
        dict(out_indices=(0, 2), output_cls_token=True),
        dict(out_indices=1),
        dict(out_origin=True),
        dict(with_cls_token=False),
        dict(qkv_bias=False),
        dict(in_channels=1),
        dict(img_size=(24, 40)),
        dict(interpolate_mode='bilinear'),
        dict(drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.1),
        dict(pre_norm=True),
        dict(patch_norm=True, final_norm=True),
        dict(pre_norm=True, patch_norm=True, out_origin=True),
        dict(pre_norm=True, with_cls_token=False, out_indices=(0, 2)),
        dict(
            act_cfg=dict(type='GELU'),
            num_fcs=2,
            patch_norm=False,
            pre_norm=False,
            patch_pad='corner',
            norm_eval=True,
            with_cp=True,
        ),
    ],
)
def test_mmseg_arguments_give_mmseg_outputs(args, tmp_path):
    args = dict(SEG_TINY, **args)
    stock = randomized_stock(SegViT, **args)
    ours = ours_on_stock_weights(
        tmp_path,
        stock,
        out_type='featmap',
        final_norm=args.pop('final_norm', False),
        **args,
    )
    if args.get('in_channels') == 1:
        stock_forward = stock.forward
        stock.forward = lambda x: stock_forward(x[:, :1])
        ours_forward = ours.forward
        ours.forward = lambda x: ours_forward(x[:, :1])
    assert_same_outputs(stock, ours, STOCK_INPUT_SHAPE)


@pytest.mark.parametrize(
    'args',
    [
        dict(),
        dict(out_type='avg_featmap'),
        dict(out_type='avg_featmap', with_cls_token=False, frozen_stages=3),
        dict(out_type='featmap', out_indices=[0, -1]),
        dict(out_type='raw', final_norm=False),
        dict(
            frozen_stages=1,
            drop_rate=0.1,
            drop_path_rate=0.1,
            interpolate_mode='bilinear',
            qkv_bias=False,
            norm_cfg=dict(type='LN', eps=1e-5),
        ),
        dict(
            pre_norm=False,
            layer_scale_init_value=0.0,
            layer_cfgs=dict(),
            patch_cfg=dict(),
        ),
        dict(pre_norm=True),  # CLIP-style: no patch embedding bias
        dict(pre_norm=True, frozen_stages=1, out_type='featmap'),
    ],
)
def test_mmpretrain_arguments_give_mmpretrain_outputs(args, tmp_path):
    stock = randomized_stock(PretrainViT, **MMPRETRAIN_TINY, **args)
    ours = ours_on_stock_weights(tmp_path, stock, **MMPRETRAIN_TINY, **args)
    assert_same_outputs(stock, ours, STOCK_INPUT_SHAPE)
    if args.get('out_type') == 'avg_featmap':  # mmpretrain's ln2, loaded
        assert torch.equal(ours.fc_norm.weight, stock.ln2.weight)
    trainable = {n for n, p in ours.named_parameters() if p.requires_grad}
    stock_trainable = {
        n for n, p in stock.named_parameters() if p.requires_grad
    }
    if 'patch_embed.projection.bias' not in stock.state_dict():
        trainable.discard('patch_embed.proj.bias')  # ours always has one
    assert len(trainable) == len(stock_trainable)


@pytest.mark.parametrize(
    'name', ['base', 'b', 'deit-b', 'deit-base', 'small', 'deit-t', 'large']
)
def test_mmpretrain_arch_names(name):
    stock = PretrainViT.arch_zoo[name]
    with torch.device('meta'):
        ours = HetDPTViT(arch=name)
    assert ours.arch_settings == dict(
        embed_dims=stock['embed_dims'],
        num_layers=stock['num_layers'],
        num_heads=stock['num_heads'],
        mlp_ratio=stock['feedforward_channels'] / stock['embed_dims'],
    )


def test_frozen_stages_and_frozen_exclude_freeze_as_the_stock_ones():
    stock = SegViT(**SEG_TINY, frozen_exclude=['pos_embed', 'cls_token'])
    ours = HetDPTViT(**SEG_TINY, frozen_exclude=['pos_embed', 'cls_token'])
    for module in (stock, ours):
        assert {
            n for n, p in module.named_parameters() if p.requires_grad
        } == {'pos_embed', 'cls_token'}
    stock = PretrainViT(**MMPRETRAIN_TINY, frozen_stages=2)
    ours = HetDPTViT(**MMPRETRAIN_TINY, frozen_stages=2)
    count = [
        sum(p.numel() for p in m.parameters() if not p.requires_grad)
        for m in (stock, ours)
    ]
    assert count[0] == count[1] > 0


def test_the_record_keeps_the_norm_epsilon_and_the_averaged_norm():
    backbone = HetDPTViT(
        **SEG_TINY, final_norm=False, out_type='avg_featmap', gated=True
    )
    record = backbone.record()
    assert 'norm_cfg' not in record.arch  # DeiT's epsilon: as before
    randomize_(backbone)
    backbone.set_spec(dict(attn_removed=[1], act_removed=[0, 1]))
    merged = backbone.to_merged()
    assert merged.out_type == 'avg_featmap' and merged.fc_norm is not None
    x = torch.randn(STOCK_INPUT_SHAPE)
    with torch.no_grad():
        assert (
            merged.eval()(x)[0] - backbone.eval()(x)[0]
        ).abs().max() <= 1e-5
    loaded = HetDPTViT(**SEG_TINY, out_type='avg_featmap', final_norm=False)
    loaded.load_state_dict(merged.state_dict())
    assert loaded.form == 'merged'
    other_eps = HetDPTViT(
        **dict(SEG_TINY, norm_cfg=dict(type='LN')),
        final_norm=False,
        gated=True,
    )
    randomize_(other_eps).set_spec(dict(act_removed=[2]))
    assert other_eps.record().arch['norm_cfg'] == dict(type='LN', eps=1e-5)
    assert other_eps.to_merged().norm_eps == 1e-5


@pytest.mark.parametrize(
    'args, message',
    [
        (dict(act_cfg=dict(type='ReLU')), 'act_cfg must be .*GELU'),
        (dict(num_fcs=3), 'num_fcs must be 2'),
        (dict(patch_pad='same'), "patch_pad must be 'corner'"),
        (dict(layer_scale_init_value=1e-5), 'HetDPTLayerScaleViT'),
        (dict(layer_cfgs=dict(ffn_type='swiglu')), 'layer_cfgs must be'),
        (dict(norm_cfg=dict(type='BN')), "norm_cfg=dict\\(type='LN'"),
        (
            dict(arch='deit-small', embed_dims=384),
            'give the architecture once',
        ),
    ],
)
def test_arguments_without_a_counterpart_name_the_alternative(args, message):
    with pytest.raises(ValueError, match=message):
        HetDPTViT(**args)


def test_the_layerscale_family_takes_mmseg_spelling():
    ours = HetDPTLayerScaleViT(
        embed_dims=48,
        num_layers=2,
        num_heads=3,
        mlp_ratio=4,
        img_size=28,
        patch_size=14,
        frozen_exclude=['pos_embed'],
        norm_cfg=dict(type='LN', eps=1e-6),
    )
    assert ours.arch_settings['embed_dims'] == 48 and ours.depth == 2
    assert [n for n, p in ours.named_parameters() if p.requires_grad] == [
        'pos_embed'
    ]


# ------------------------------------- a stock mmseg config, type changed
MMSEG_CONFIGS = Path(mmseg.__file__).parent / '.mim/configs'
STOCK_CONFIG = (
    MMSEG_CONFIGS / 'vit/vit_deit-s16_upernet_8xb2-80k_ade20k-512x512.py'
)


def test_a_stock_mmseg_vit_config_trains_with_only_the_type_changed(tmp_path):
    """mmseg's DeiT-S UperNet config under mmseg's own tools/train.py, its
    backbone dict as it is but for ``type``; the rest shrunk (width, heads,
    data, one iteration, no download)."""
    make_segmentation(
        tmp_path / 'data/ade', num_train=4, num_val=2, size=(64, 64)
    )
    config = tmp_path / 'stock_vit.py'
    config.write_text(f"""
_base_ = [{str(STOCK_CONFIG)!r}]
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)
model = dict(
    backbone=dict(
        type='HetDPTViT',  # the change; the rest of the dict is mmseg's
        embed_dims=32, num_heads=2, img_size=(64, 64)),  # shrunk
    # Shrunk: heads' channels, input size; no download.
    pretrained=None, data_preprocessor=dict(size=(64, 64)),
    decode_head=dict(in_channels=[32] * 4, channels=16),
    auxiliary_head=dict(in_channels=32, channels=16))
# Shrunk: data, one iteration.
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomCrop', crop_size=(64, 64)),
    dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root={str(tmp_path / 'data/ade')!r},
                                     pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False,
                      dataset=dict(data_root={str(tmp_path / 'data/ade')!r}))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=1, val_interval=100)
default_hooks = dict(logger=dict(interval=1))
""")
    mmseg_train = Path(mmseg.__file__).parent / '.mim/tools/train.py'
    result = subprocess.run(
        [
            sys.executable,
            str(mmseg_train),
            str(config),
            '--work-dir',
            str(tmp_path / 'work'),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(
            os.environ,
            OMP_NUM_THREADS='1',
            PYTHONPATH=os.pathsep.join(
                [str(REPO), os.environ.get('PYTHONPATH', '')]
            ),
        ),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert 'Iter(train) [1/1]' in output
    assert 'HetDPTViT' in (tmp_path / 'work/stock_vit.py').read_text()
    record = read_backbone_checkpoint(tmp_path / 'work/iter_1.pth').record
    assert record.family == 'vit' and record.arch['arch'] == dict(
        embed_dims=32, num_layers=12, num_heads=2, mlp_ratio=4
    )


@pytest.mark.parametrize(
    'scope, out_type, final_norm',
    [
        ('mmseg', 'featmap', False),
        ('mmpretrain', 'cls_token', True),
        ('mmdet', 'cls_token', True),
    ],
)
def test_each_toolbox_registry_gives_its_defaults(scope, out_type, final_norm):
    """mmseg's ViT gives feature maps without a final norm; mmpretrain's
    defaults are ours (mmdet has no ViT of its own)."""
    from mmengine.registry import MODELS, DefaultScope

    for family in ('HetDPTViT', 'HetDPTLayerScaleViT'):
        with DefaultScope.overwrite_default_scope(scope):
            backbone = MODELS.build(
                dict(
                    type=family,
                    embed_dims=48,
                    num_layers=2,
                    num_heads=3,
                    img_size=28,
                    patch_size=14,
                )
            )
        assert backbone.out_type == out_type
        assert isinstance(backbone.norm, torch.nn.LayerNorm) == final_norm
        assert backbone.build_args()['final_norm'] == final_norm


# ------------------------------------------ frozen_exclude: mmseg's names
@pytest.mark.parametrize(
    'frozen_exclude',
    [
        ['all'],
        ['pos_embed'],
        ['cls_token', 'pos_embed'],
        ['ln'],
        ['ln1'],
        ['layers.1.'],
        ['attn.attn'],
        ['in_proj', 'ffn.layers.1'],
        ['patch_embed.projection'],
        ['layers.2.ln2', 'out_proj.bias'],
        ['ln_pre', 'patch_embed.norm'],
    ],
)
def test_frozen_exclude_takes_mmseg_names(frozen_exclude):
    """Every parameter mmseg's ViT has is trainable here exactly when it
    is there (names matched through the layout conversion)."""
    args = dict(
        SEG_TINY,
        final_norm=True,
        pre_norm=True,
        patch_norm=True,
        frozen_exclude=frozen_exclude,
    )
    stock = SegViT(**args)
    ours = HetDPTViT(**args)
    stock_params = dict(stock.named_parameters())
    ours_params = dict(ours.named_parameters())
    renamed = from_openmmlab_layout(stock_params)
    compared = 0
    for name, stock_param in renamed.items():
        if stock_param is stock_params.get(openmmlab_name(name)):
            assert ours_params[name].requires_grad == stock_param.requires_grad
            compared += 1
    assert compared == len(stock_params)


def test_frozen_exclude_names_the_parameters_mmseg_lacks_under_its_modules():
    gated = HetDPTLayerScaleViT(
        **SEG_TINY, gated=True, reg_tokens=1, frozen_exclude=['ffn', 'gamma']
    )
    trainable = {n for n, p in gated.named_parameters() if p.requires_grad}
    assert trainable == {
        f'blocks.{i}.{name}'
        for i in range(3)
        for name in (
            'mlp.fc1.weight',
            'mlp.fc1.bias',
            'mlp.fc2.weight',
            'mlp.fc2.bias',
            'mlp.act.hetdpt_score',
            'ls1.gamma',
            'ls2.gamma',
        )
    }
    merged = HetDPTViT(
        **SEG_TINY,
        prune_spec=dict(act_removed=[0]),
        merged=True,
        frozen_exclude=['layers.0.ffn'],
    )
    assert {n for n, p in merged.named_parameters() if p.requires_grad} == {
        'blocks.0.mlp.fc.weight',
        'blocks.0.mlp.fc.bias',
    }


# ------------------------- mmpretrain's ViT with LayerScale (its layout)
@pytest.mark.parametrize(
    'args',
    [
        dict(),
        dict(out_type='avg_featmap'),
        dict(out_type='featmap', out_indices=[0, -1], final_norm=False),
        dict(img_size=48),  # its 6x6 positions shrunk to the 4x5 input grid
        dict(with_cls_token=False, out_type='raw', frozen_stages=1),
    ],
)
def test_mmpretrain_layer_scale_vit_gives_mmpretrain_outputs(args, tmp_path):
    args = dict(MMPRETRAIN_TINY, layer_scale_init_value=0.1, **args)
    stock = randomized_stock(PretrainViT, **args)
    ours = ours_on_stock_weights(
        tmp_path,
        stock,
        HetDPTLayerScaleViT,
        pos_embed_antialias=False,  # mmpretrain's registry's default
        **args,
    )
    assert_same_outputs(stock, ours, STOCK_INPUT_SHAPE)
    gammas = [ours.blocks[0].ls1.gamma, ours.blocks[0].ls2.gamma]
    assert torch.equal(gammas[0], stock.layers[0].attn.gamma1.weight)
    assert torch.equal(gammas[1], stock.layers[0].ffn.gamma2.weight)


def test_mmpretrain_layer_scale_weights_resampled_on_load_as_mmpretrain(
    tmp_path,
):
    """Weights of a 48-pixel model into 32-pixel ones: mmpretrain's
    loader and ours resample the position embedding alike."""
    args = dict(MMPRETRAIN_TINY, layer_scale_init_value=0.1)
    source = randomized_stock(PretrainViT, **dict(args, img_size=48))
    stock = PretrainViT(**args)
    stock.load_state_dict(source.state_dict())
    stock.eval()
    ours = ours_on_stock_weights(
        tmp_path,
        source,
        HetDPTLayerScaleViT,
        pos_embed_antialias=False,
        **args,
    )
    assert_same_outputs(stock, ours, STOCK_INPUT_SHAPE)


def test_mmpretrain_layer_scale_forms_compute_the_same(tmp_path):
    args = dict(MMPRETRAIN_TINY, layer_scale_init_value=0.1)
    stock = randomized_stock(PretrainViT, **args)
    spec = dict(attn_removed=[1], act_removed=[0, 1])
    gated, pruned = (
        ours_on_stock_weights(
            tmp_path,
            stock,
            HetDPTLayerScaleViT,
            prune_spec=spec,
            gated=is_gated,
            **args,
        )
        for is_gated in (True, False)
    )
    merged = pruned.to_merged().eval()
    assert merged.pos_embed_antialias == pruned.pos_embed_antialias
    x = torch.randn(STOCK_INPUT_SHAPE)
    with torch.no_grad():
        outs = [model(x)[0] for model in (gated, pruned, merged)]
    for out in outs[1:]:
        assert (out - outs[0]).abs().max() <= 1e-5


@pytest.mark.parametrize('name', ['dinov2-s', 'dinov2-small', 'base', 'b'])
def test_mmpretrain_arch_names_of_the_layerscale_family(name):
    stock = PretrainViT.arch_zoo[name]
    with torch.device('meta'):
        ours = HetDPTLayerScaleViT(arch=name, layer_scale_init_value=1e-5)
    assert ours.arch_settings == dict(
        embed_dims=stock['embed_dims'],
        num_layers=stock['num_layers'],
        num_heads=stock['num_heads'],
        mlp_ratio=stock['feedforward_channels'] / stock['embed_dims'],
    )
    assert ours.ffn == 'mlp'


@pytest.mark.parametrize(
    'scope, antialias',
    [('mmpretrain', False), ('mmseg', True), ('mmdet', True)],
)
def test_mmpretrain_registry_resamples_positions_as_mmpretrain(
    scope, antialias
):
    """mmpretrain's ViT resamples without antialiasing; elsewhere the
    LayerScale family keeps timm's."""
    from mmengine.registry import MODELS, DefaultScope

    with DefaultScope.overwrite_default_scope(scope):
        backbone = MODELS.build(
            dict(type='HetDPTLayerScaleViT', **MMPRETRAIN_TINY)
        )
    assert backbone.pos_embed_antialias is antialias


def test_norms_before_the_blocks_are_in_the_record_and_merge():
    backbone = randomize_(
        HetDPTViT(**SEG_TINY, pre_norm=True, patch_norm=True, gated=True)
    )
    record = backbone.record()
    assert record.arch['pre_norm'] and record.arch['patch_norm']
    assert 'pre_norm' not in HetDPTViT(**SEG_TINY).record().arch
    backbone.set_spec(dict(attn_removed=[1], act_removed=[0, 1]))
    merged = backbone.to_merged()
    rebuilt = HetDPTViT.from_record(merged.record())
    rebuilt.load_state_dict(merged.state_dict())
    x = torch.randn(STOCK_INPUT_SHAPE)
    with torch.no_grad():
        want = backbone.eval()(x)[0]
        for other in (merged, rebuilt):
            assert (other.eval()(x)[0] - want).abs().max() <= 1e-5


@pytest.mark.parametrize(
    'args',
    [
        dict(layer_cfgs=dict(ffn_type='swiglu_fused')),
        dict(layer_cfgs=dict(ffn_type='origin'), out_type='avg_featmap'),
    ],
)
def test_mmpretrain_ffn_types_of_the_layerscale_family(args, tmp_path):
    """DINOv2-g's mmpretrain configs: its fused SwiGLU FFN (w12, w3)."""
    args = dict(
        MMPRETRAIN_TINY,
        arch=dict(
            embed_dims=48, num_layers=2, num_heads=3, feedforward_channels=200
        ),
        layer_scale_init_value=0.1,
        **args,
    )
    stock = randomized_stock(PretrainViT, **args)
    ours = ours_on_stock_weights(
        tmp_path,
        stock,
        HetDPTLayerScaleViT,
        pos_embed_antialias=False,
        **args,
    )
    assert_same_outputs(stock, ours, STOCK_INPUT_SHAPE)
    swiglu = args['layer_cfgs']['ffn_type'] == 'swiglu_fused'
    assert ours.ffn == ('swiglu' if swiglu else 'mlp')


@pytest.mark.parametrize('backbone', [HetDPTViT, HetDPTLayerScaleViT])
def test_an_unknown_arch_name_lists_ours_and_mmpretrains(backbone):
    with pytest.raises(ValueError) as error:
        backbone(arch='dinov2-smal')
    message = str(error.value)
    assert 'did you mean `dinov2-small`' in message
    assert all(repr(name) in message for name in PretrainViT.arch_zoo)
    assert "'deit-small'" in message
