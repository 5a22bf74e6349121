"""A stock config with only the backbone ``type`` changed to ours computes
and trains as the stock module, or says at build time what differs
(issue 51 items 2, 3 and 6)."""

from pathlib import Path

import pytest
import torch
from helpers import (
    MMPRETRAIN_TINY,
    STOCK_INPUT_SHAPE,
    assert_same_outputs,
    randomized_stock,
)
from mmengine.registry import DefaultScope

from hetdpt_mm.models import HetDPTSwin
from hetdpt_mm.models.vit import backbone as vit_backbone


def test_an_unknown_swin_argument_names_the_closest():
    with pytest.raises(TypeError) as error:
        HetDPTSwin(**HetDPTSwin.SMALL_ARGS, window_sise=7)
    assert str(error.value) == (
        "HetDPTSwin got unexpected keyword arguments ['window_sise'] "
        '(did you mean `window_size`?)'
    )


@pytest.mark.parametrize(
    'stock, message',
    [
        (
            dict(arch='b', patch_size=16, mask_ratio=0.75),
            "HetDPTViT does not take ['mask_ratio']: mmpretrain's MAEViT is "
            'masked-image pretraining',
        ),
        (
            dict(
                arch='base',
                out_type='avg_featmap',
                use_abs_pos_emb=False,
                use_rel_pos_bias=True,
                use_shared_rel_pos_bias=False,
                layer_scale_init_value=0.1,
            ),
            "HetDPTViT does not take ['use_abs_pos_emb', 'use_rel_pos_bias', "
            "'use_shared_rel_pos_bias']: mmpretrain's BEiTViT and "
            'BEiTPretrainViT have relative position biases',
        ),
        (  # BEiTPretrainViT's stock config passes no BEiT-only argument
            dict(arch='base', out_type='raw', layer_scale_init_value=0.1),
            'layer_scale_init_value must be 0.0 here: LayerScale ViTs '
            "(DeiT-III, DINOv2) are type='HetDPTLayerScaleViT' (not "
            "masked-image pretraining: mmpretrain's BEiTPretrainViT",
        ),
    ],
)
def test_mae_and_beit_swaps_say_what_is_supported(stock, message):
    """Issue 51 item 6: mmpretrain's MAE / BEiT backbone configs with
    ``type`` swapped, built by mmpretrain's registry as a config is."""
    from mmpretrain.registry import MODELS

    with (
        DefaultScope.overwrite_default_scope('mmpretrain'),
        pytest.raises((TypeError, ValueError)) as error,
    ):
        MODELS.build(dict(type='HetDPTViT', **stock))
    assert str(error.value).startswith(message), error.value


def test_a_masked_image_pretraining_swap_says_what_is_supported():
    """Issue 51 item 6: mmpretrain's BEiT config (its BEiTPretrainViT dict,
    shrunk) builds as a LayerScale ViT; the algorithm's masked call is
    refused by name, and its unmasked feature call computes."""
    from mmpretrain.registry import MODELS

    with DefaultScope.overwrite_default_scope('mmpretrain'):
        backbone = MODELS.build(
            dict(
                type='HetDPTLayerScaleViT',
                **MMPRETRAIN_TINY,
                drop_path_rate=0.1,
                final_norm=True,
                out_type='raw',
                layer_scale_init_value=0.1,
            )
        )
    x = torch.randn(2, 3, 32, 32)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    with pytest.raises(TypeError) as error:
        backbone(x, mask)  # as BEiT.loss calls it
    assert 'takes no mask: pretrain with the stock backbone' in str(
        error.value
    )
    (features,) = backbone(x, mask=None)  # as BEiT.extract_feat calls it
    assert features.shape == (2, 17, 32)


def test_a_deit3_swap_logs_how_it_computes_unlike_mmpretrains(
    monkeypatch, tmp_path
):
    """Issue 51 item 3: mmpretrain 1.2's ``DeiT3`` norms the FFN input by
    ``ln1``; ``HetDPTDeiT3`` (timm's, the official DeiT-III's) by ``ln2``.
    On the stock module's weights the two differ; the build says so."""
    from mmpretrain.models.backbones.deit3 import DeiT3
    from mmpretrain.registry import MODELS

    from hetdpt_mm.models.layerscale_vit import stock_args as deit3_args

    logged = []
    monkeypatch.setattr(
        deit3_args, 'print_log', lambda message, **_: logged.append(message)
    )
    args = dict(MMPRETRAIN_TINY)
    stock = randomized_stock(DeiT3, **args)
    torch.save(dict(state_dict=stock.state_dict()), tmp_path / 'deit3.pth')
    init_cfg = dict(type='Pretrained', checkpoint=str(tmp_path / 'deit3.pth'))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        ours = MODELS.build(
            dict(type='HetDPTDeiT3', **args, init_cfg=init_cfg)
        )
    assert logged == [deit3_args.FFN_NORM_DIFFERENCE]
    ours.init_weights()
    image = torch.randn(STOCK_INPUT_SHAPE)
    with torch.no_grad():
        assert not torch.allclose(ours.eval()(image)[0], stock(image)[0])


def no_decay_names(module, paramwise_cfg, rename=lambda name: name):
    """The parameters of ``module`` that mmengine's default constructor
    puts at weight decay 0 under ``paramwise_cfg`` (named by ``rename``)."""
    from mmengine.optim import DefaultOptimWrapperConstructor

    optim_wrapper = dict(
        type='OptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.01),
    )
    wrapper = DefaultOptimWrapperConstructor(optim_wrapper, paramwise_cfg)(
        module
    )
    names = {id(param): name for name, param in module.named_parameters()}
    return {
        rename(names[id(param)])
        for group in wrapper.optimizer.param_groups
        if group['weight_decay'] == 0
        for param in group['params']
    }


def test_a_swapped_mmseg_vit_config_computes_and_trains_as_stock(
    monkeypatch, tmp_path
):
    """Issue 51 item 2: mmseg's DeiT-S UperNet config's backbone dict with
    ``type`` swapped (shrunk), on the stock module's weights: the same
    outputs and parameters (no patch-embedding bias, as mmseg's); its
    paramwise_cfg's key ``'norm'`` matches our LayerNorms and none of
    mmseg's, which the build logs with the key that trains as stock."""
    import mmseg
    from mmengine.config import Config
    from mmseg.registry import MODELS

    from hetdpt_mm.models.vit import stock_args as vit_args
    from hetdpt_mm.models.vit.state_dict import openmmlab_name

    stock_config = Config.fromfile(
        Path(mmseg.__file__).parent
        / '.mim/configs/vit/vit_deit-s16_upernet_8xb2-80k_ade20k-512x512.py'
    )
    backbone = dict(
        stock_config.model.backbone,
        embed_dims=64,
        num_layers=4,
        num_heads=2,
        img_size=32,
        patch_size=8,
        out_indices=(1, 3),
    )
    stock = randomized_stock(
        MODELS.get('VisionTransformer'),
        **{k: v for k, v in backbone.items() if k != 'type'},
    )
    torch.save(dict(state_dict=stock.state_dict()), tmp_path / 'vit.pth')
    logged = []
    monkeypatch.setattr(
        vit_backbone, 'print_log', lambda message, **_: logged.append(message)
    )
    monkeypatch.setattr(vit_backbone, '_NORM_NAMES_NOTED', set())
    with DefaultScope.overwrite_default_scope('mmseg'):
        for _ in range(2):  # once per process (issue 60 item 8)
            ours = MODELS.build(
                dict(
                    backbone,
                    type='HetDPTViT',
                    init_cfg=dict(
                        type='Pretrained',
                        checkpoint=str(tmp_path / 'vit.pth'),
                    ),
                )
            )
    ours.init_weights()
    assert_same_outputs(stock, ours.eval(), STOCK_INPUT_SHAPE)
    assert {openmmlab_name(name) for name, _ in ours.named_parameters()} == {
        name for name, _ in stock.named_parameters()
    }
    assert logged == [vit_args.MMSEG_NORM_NAMES.format('HetDPTViT')]

    paramwise_cfg = stock_config.optim_wrapper.paramwise_cfg
    stock_no_decay = no_decay_names(stock, paramwise_cfg)
    assert stock_no_decay == {'pos_embed', 'cls_token'}
    layer_norms = {
        name for name, param in ours.named_parameters() if 'norm' in name
    }
    assert no_decay_names(ours, paramwise_cfg, openmmlab_name) == (
        stock_no_decay | {openmmlab_name(name) for name in layer_norms}
    )
    custom_keys = dict(paramwise_cfg.custom_keys)  # as the line says
    custom_keys['patch_embed.norm'] = custom_keys.pop('norm')
    fixed = dict(custom_keys=custom_keys)
    assert no_decay_names(ours, fixed, openmmlab_name) == stock_no_decay
    assert no_decay_names(stock, fixed) == stock_no_decay


def stock_config(toolbox, path: str):
    from importlib import import_module

    from mmengine.config import Config

    root = Path(import_module(toolbox).__file__).parent / '.mim/configs'
    return Config.fromfile(root / path)


def test_a_swapped_distilled_deit_config_is_refused_or_computes_as_stock(
    tmp_path,
):
    """Issue 60 item 5: mmpretrain's distilled DeiT config (shrunk) with
    ``type='HetDPTViT'``: its DeiTClsHead takes two tokens, which only
    ``distilled=True`` gives; the classifier is refused when it is built,
    naming that, and with it the classifier computes as the stock one."""
    from mmpretrain.models.backbones import DistilledVisionTransformer
    from mmpretrain.registry import MODELS

    model = stock_config(
        'mmpretrain', 'deit/deit-tiny-distilled_4xb256_in1k.py'
    ).model
    model.backbone.update(MMPRETRAIN_TINY)
    model.head.in_channels = MMPRETRAIN_TINY['arch']['embed_dims']
    stock = randomized_stock(DistilledVisionTransformer, **MMPRETRAIN_TINY)
    torch.save(dict(state_dict=stock.state_dict()), tmp_path / 'deit.pth')
    model.backbone.update(
        type='HetDPTViT',
        init_cfg=dict(
            type='Pretrained', checkpoint=str(tmp_path / 'deit.pth')
        ),
    )
    with (
        DefaultScope.overwrite_default_scope('mmpretrain'),
        pytest.raises(ValueError, match='distilled=True'),
    ):
        MODELS.build(model)
    model.backbone.distilled = True
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        ours = MODELS.build(model)
    ours.backbone.init_weights()
    assert_same_outputs(stock, ours.backbone.eval(), STOCK_INPUT_SHAPE)
    with torch.no_grad():
        assert ours.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 1000)


@pytest.mark.parametrize('family', ['HetDPTViT', 'HetDPTLayerScaleViT'])
def test_mmsegs_mae_swap_gets_one_hint_that_builds(family):
    """Issue 60 item 6: mmseg's MAE UperNet config (shrunk) with ``type``
    swapped: ``init_values`` (mmseg's BEiT / MAE, with a relative position
    bias in every attention) gets one hint, and what it names builds."""
    from mmseg.registry import MODELS

    backbone = dict(
        stock_config(
            'mmseg', 'mae/mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py'
        ).model.backbone,
        type=family,
        img_size=(32, 32),
        embed_dims=32,
        num_layers=4,
        num_heads=2,
        out_indices=[1, 3],
    )
    with DefaultScope.overwrite_default_scope('mmseg'):
        with pytest.raises(TypeError) as error:
            MODELS.build(backbone)
        hint = str(error.value)
        assert 'relative position bias' in hint
        assert "type='HetDPTViT' with mmseg's VisionTransformer" in hint
        backbone.pop('init_values')
        ours = MODELS.build(dict(backbone, type='HetDPTViT'))
    features = ours(torch.randn(2, 3, 32, 32))
    assert [f.shape for f in features] == [(2, 32, 2, 2)] * 2
