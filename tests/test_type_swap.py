"""A stock config with only the backbone ``type`` changed to ours computes
and trains as the stock module, or says at build time what differs
(issue 51 items 2, 3 and 6)."""

import pytest
import torch
from helpers import MMPRETRAIN_TINY, STOCK_INPUT_SHAPE, randomized_stock

from hetdpt_mm.models import HetDPTSwin


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

    with pytest.raises((TypeError, ValueError)) as error:
        MODELS.build(dict(type='HetDPTViT', **stock))
    assert str(error.value).startswith(message), error.value


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
    ours = MODELS.build(dict(type='HetDPTDeiT3', **args, init_cfg=init_cfg))
    assert logged == [deit3_args.FFN_NORM_DIFFERENCE]
    ours.init_weights()
    image = torch.randn(STOCK_INPUT_SHAPE)
    with torch.no_grad():
        assert not torch.allclose(ours.eval()(image)[0], stock(image)[0])
