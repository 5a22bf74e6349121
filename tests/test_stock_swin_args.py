"""Stock Swin dicts carry over (issue 33): HetDPTSwin takes the constructor
arguments of mmdet's, mmseg's and mmpretrain's ``SwinTransformer``, built
from each toolbox's registry with that toolbox's defaults, and computes what
the stock module computes on the stock module's weights; the few stock
choices it does not build are refused naming the alternative; a stock mmdet
Swin config with only the backbone's ``type`` changed trains under mmdet's
own tools/train.py."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from helpers import randomize_
from mmengine.config import ConfigDict
from mmengine.registry import DefaultScope

from hetdpt_demo.data import make_detection
from hetdpt_mm.models import HetDPTSwin
from hetdpt_mm.models.swin.state_dict import (
    canonical_layout,
    unfold_to_official_order,
)

ROOT = Path(__file__).resolve().parents[1]
#: mmdet's / mmseg's Swin, tiny: four stages (8 blocks), windows of 3.
DET_BASE = dict(
    embed_dims=8,
    depths=(2, 2, 2, 2),
    num_heads=(1, 2, 2, 4),
    window_size=3,
    drop_path_rate=0.0,
)
#: Not a multiple of the patch or the windows; the last maps are smaller
#: than a window (maps 10x14, 5x7, 3x4, 2x2): mmdet / mmseg pad them.
DET_SIZE = (40, 56)
#: Each of mmdet's / mmseg's arguments at a value other than its default.
DET_CASES = [
    dict(pretrain_img_size=64),
    dict(in_channels=1),
    dict(embed_dims=16),
    dict(patch_size=2, strides=(2, 2, 2, 2)),
    dict(window_size=4),
    dict(mlp_ratio=2),
    dict(depths=(1, 2, 3, 1)),
    dict(num_heads=(2, 2, 4, 4)),
    dict(strides=(4, 2, 2, 2)),
    dict(out_indices=(1, 3)),
    dict(qkv_bias=False),
    dict(qk_scale=0.25),
    dict(patch_norm=False),
    dict(drop_rate=0.3),
    dict(attn_drop_rate=0.3),
    dict(drop_path_rate=0.3),
    dict(use_abs_pos_embed=False),
    dict(act_cfg=dict(type='GELU')),
    dict(norm_cfg=dict(type='LN')),
    dict(with_cp=True),
    dict(frozen_stages=2),
]
#: mmpretrain's Swin, tiny (its arch dict takes exactly these keys).
CLS_ARCH = dict(embed_dims=8, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4])
CLS_BASE = dict(arch=CLS_ARCH, window_size=3, drop_path_rate=0.0)
#: Maps 24x36, 12x18, 6x9, 3x5: mmpretrain's windows fit every map (its
#: unpadded windows shrink to smaller maps, which its bias tables refuse).
CLS_SIZE = (96, 144)
CLS_CASES = [
    dict(arch='t'),
    dict(arch=dict(CLS_ARCH, embed_dims=16)),
    dict(img_size=64),
    dict(patch_size=2),
    dict(in_channels=1),
    dict(window_size=2),
    dict(drop_rate=0.3),
    dict(drop_path_rate=0.3),
    dict(out_indices=(0, 2)),
    dict(out_after_downsample=True, out_indices=(0, 1, 2, 3)),
    dict(use_abs_pos_embed=False),
    dict(interpolate_mode='bilinear'),
    dict(with_cp=True),
    *(dict(frozen_stages=n) for n in (-1, 0, 1, 2, 3)),
    dict(frozen_stages=2, out_indices=(1, 3)),
    dict(frozen_stages=1, out_after_downsample=True),
    dict(norm_eval=True),
    dict(pad_small_map=True),
    dict(norm_cfg=dict(type='LN')),
    dict(stage_cfgs=dict(block_cfgs=dict(window_size=2))),
    dict(stage_cfgs=[dict(block_cfgs=dict(ffn_ratio=2.0))] * 4),
    dict(patch_cfg=dict(kernel_size=2, stride=2)),
]


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    pass


def stock_swin(toolbox: str, args: dict) -> nn.Module:
    """The stock Swin with random weights: large for the tiny widths (so
    that 1e-5 says something), realistic for a full-width preset."""
    module = importlib.import_module(f'{toolbox}.models.backbones')
    std = 0.02 if isinstance(args.get('arch'), str) else 0.2
    return randomize_(module.SwinTransformer(**args), std=std)


def build_ours(toolbox: str, args: dict) -> HetDPTSwin:
    registry = importlib.import_module(f'{toolbox}.registry').MODELS
    with DefaultScope.overwrite_default_scope(toolbox):
        backbone = registry.build(dict(type='HetDPTSwin', **args))
    backbone.init_weights()
    return backbone


def images(size, channels: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(2, channels, *size, generator=generator)


def set_mode(module: nn.Module, train: bool) -> None:
    # The stock train() returns nothing.
    module.train(train)


def drop_rates(module: nn.Module) -> dict:
    """Dropout and stochastic-depth rates inside the stages."""
    return dict(
        dropout=sorted(
            {m.p for m in module.stages.modules() if isinstance(m, nn.Dropout)}
        ),
        drop_path=sorted(
            round(m.drop_prob, 6)
            for m in module.stages.modules()
            if getattr(m, 'drop_prob', 0) > 0
        ),
        after_embedding=module.drop_after_pos.p,
    )


def frozen_names(module: nn.Module, stock: bool) -> set:
    """Parameters without gradients, named as HetDPTSwin names them."""
    frozen = {
        name: param
        for name, param in module.named_parameters()
        if not param.requires_grad
    }
    return set(canonical_layout(frozen) if stock and frozen else frozen)


def assert_same_as_stock(toolbox, stock_args, own_args, size, tmp_path):
    """Ours, built with the stock arguments from ``toolbox``'s registry and
    initialised from the stock module's weights, computes the same."""
    stock = stock_swin(toolbox, stock_args)
    path = tmp_path / 'stock.pth'
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in stock.state_dict().items()
            }
        ),
        path,
    )
    ours = build_ours(
        toolbox,
        dict(own_args, init_cfg=dict(type='Pretrained', checkpoint=str(path))),
    )
    # Dropout rates compared as modules; outputs in eval mode, and in
    # training mode (stochastic depth off) where gradient checkpointing
    # and frozen stages apply.
    assert drop_rates(ours) == drop_rates(stock)
    train = (
        own_args.get('drop_path_rate', 0) == 0
        and own_args.get('drop_rate', 0) == 0
        and own_args.get('attn_drop_rate', 0) == 0
    )
    x = images(size, own_args.get('in_channels', 3))
    for mode in (False, True) if train else (False,):
        set_mode(stock, mode)
        set_mode(ours, mode)
        with torch.no_grad():
            expected, got = stock(x), ours(x)
        assert len(got) == len(expected)
        for mine, theirs in zip(got, expected):
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
    assert frozen_names(ours, False) == frozen_names(stock, True)
    return ours


@pytest.mark.parametrize('toolbox', ['mmdet', 'mmseg'])
@pytest.mark.parametrize('case', DET_CASES, ids=lambda case: next(iter(case)))
def test_mmdet_and_mmseg_arguments_compute_as_stock(toolbox, case, tmp_path):
    args = dict(DET_BASE, **case)
    assert_same_as_stock(toolbox, args, args, DET_SIZE, tmp_path)


@pytest.mark.parametrize('case', CLS_CASES, ids=lambda case: next(iter(case)))
def test_mmpretrain_arguments_compute_as_stock(case, tmp_path):
    args = dict(CLS_BASE, **case)
    assert_same_as_stock('mmpretrain', args, args, CLS_SIZE, tmp_path)


def official_layout(state: dict) -> dict:
    """An OpenMMLab Swin's tensors as the official release names them (the
    layout mmdet's ``convert_weights=True`` converts)."""
    out = {}
    for key, value in state.items():
        if '.downsample.' in key:
            value = unfold_to_official_order(value)
        for old, new in (
            ('stages.', 'layers.'),
            ('attn.w_msa.', 'attn.'),
            ('ffn.layers.0.0.', 'mlp.fc1.'),
            ('ffn.layers.1.', 'mlp.fc2.'),
            ('patch_embed.projection.', 'patch_embed.proj.'),
        ):
            key = key.replace(old, new)
        out[key] = value
    return out


# mmseg for pretrained: mmdet's Swin drops it (its BaseModule.__init__
# resets the init_cfg built from it), although it warns to use init_cfg.
@pytest.mark.parametrize(
    'toolbox, loading',
    [
        ('mmdet', 'init_cfg'),
        ('mmseg', 'pretrained'),
        ('mmdet', 'convert_weights'),
    ],
)
def test_pretrained_weights_load_as_stock(toolbox, loading, tmp_path):
    reference = stock_swin(toolbox, DET_BASE)
    state = reference.state_dict()
    path = tmp_path / 'weights.pth'
    if loading == 'convert_weights':
        torch.save(dict(model=official_layout(state)), path)
        args = dict(
            DET_BASE,
            convert_weights=True,
            init_cfg=dict(type='Pretrained', checkpoint=str(path)),
        )
    else:
        torch.save(
            dict(state_dict={f'backbone.{k}': v for k, v in state.items()}),
            path,
        )
        args = dict(
            DET_BASE,
            **{
                loading: str(path)
                if loading == 'pretrained'
                else dict(type='Pretrained', checkpoint=str(path))
            },
        )
    # mmdet's Swin reads its init_cfg as attributes.
    stock = importlib.import_module(
        f'{toolbox}.models.backbones'
    ).SwinTransformer(
        **dict(
            args,
            init_cfg=args.get('init_cfg') and ConfigDict(args['init_cfg']),
        )
    )
    stock.init_weights()
    ours = build_ours(toolbox, args)
    for module in (stock, ours, reference):
        set_mode(module, False)
    x = images(DET_SIZE, 3)
    with torch.no_grad():
        for mine, theirs, original in zip(ours(x), stock(x), reference(x)):
            torch.testing.assert_close(theirs, original, atol=1e-5, rtol=0)
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_each_registry_gives_its_toolboxs_defaults():
    small = dict(arch=CLS_ARCH, window_size=3)
    direct = HetDPTSwin(**small)
    detector = build_ours('mmdet', small)
    classifier = build_ours('mmpretrain', dict(small, frozen_stages=1))
    assert (direct.pad_small_map, direct.out_indices) == (False, [0, 1, 2, 3])
    assert (
        build_ours('mmseg', small).pad_small_map
        and detector.pad_small_map
        and detector.out_indices == [0, 1, 2, 3]
    )
    assert not classifier.pad_small_map and classifier.out_indices == [3]
    # mmpretrain's frozen_stages=1: the stem and stages 0 and 1.
    assert classifier.frozen_stages == direct.frozen_stages + 3 == 2
    # mmpretrain's own Swin indexes a fifth stage for frozen_stages=4.
    with pytest.raises(ValueError, match='frozen_stages must be in -1..3'):
        build_ours('mmpretrain', dict(small, frozen_stages=4))
    # Stated arguments win over the toolbox's defaults.
    assert not build_ours(
        'mmdet', dict(small, pad_small_map=False)
    ).pad_small_map


@pytest.mark.parametrize(
    'args, message',
    [
        (dict(use_abs_pos_embed=True), 'use_abs_pos_embed=False'),
        (dict(act_cfg=dict(type='ReLU')), "dict\\(type='GELU'\\) only"),
        (dict(norm_cfg=dict(type='BN')), "dict\\(type='LN'\\) only"),
        (dict(strides=(4, 2, 2, 1)), 'strides=\\(patch_size, 2, 2, ...\\)'),
        (
            dict(
                stage_cfgs=[
                    dict(block_cfgs=dict(window_size=w)) for w in (3, 3, 2, 2)
                ]
            ),
            'the same value everywhere',
        ),
        (
            dict(stage_cfgs=dict(block_cfgs=dict(attn_cfgs=dict(qk_scale=2)))),
            'window_size and ffn_ratio',
        ),
        (
            dict(stage_cfgs=dict(downsample_cfg=dict(kernel_size=3))),
            'stock patch merging',
        ),
        (dict(patch_cfg=dict(kernel_size=4, stride=2)), 'pass patch_size'),
        (dict(patch_cfg=dict(padding='adaptive')), 'stock patch embedding'),
    ],
)
def test_stock_choices_that_cannot_apply_name_the_alternative(args, message):
    with pytest.raises(ValueError, match=message):
        HetDPTSwin(**DET_BASE, **args)


def test_stock_structure_records_rebuild(tmp_path):
    """Arguments that change the function or the tensors travel in the
    record, and plain weights give them back where their shapes tell."""
    ours = HetDPTSwin(**DET_BASE, qk_scale=0.25, out_after_downsample=True)
    rebuilt = HetDPTSwin.from_record(ours.record())
    assert rebuilt.build_args() == ours.build_args()
    assert rebuilt.stages[0].blocks[0].attn.scale == 0.25
    from_tensors = HetDPTSwin.codec.build_args_from_tensors(
        {
            k: v
            for k, v in ours.state_dict().items()
            if not k.endswith('_extra_state')
        }
    )
    assert from_tensors['out_after_downsample']
    assert from_tensors['qk_scale'] is None


# ------------------------------------------- a stock config, mmdet's tool
STOCK_CONFIG = 'swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py'
#: The stock config shrunk: a small Swin, narrow FPN and head, the tests'
#: own shapes at their size, one step; the weights: an official-layout
#: file, which its convert_weights=True reads.
SHRUNK = """
model = dict(
    backbone=dict(embed_dims=16, num_heads=[1, 2, 2, 4], depths=[2, 2, 2, 2],
                  init_cfg=dict(checkpoint={checkpoint!r})),
    neck=dict(in_channels=[32, 64, 128], out_channels=32),
    bbox_head=dict(num_classes=3, in_channels=32, feat_channels=32,
                   stacked_convs=1))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs')]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root={data_root!r}, indices=2,
                 metainfo=dict(classes=('rectangle', 'ellipse', 'triangle')),
                 pipeline=train_pipeline))
val_dataloader = None
val_cfg = None
val_evaluator = None
test_dataloader = None
test_cfg = None
test_evaluator = None
train_cfg = dict(max_epochs=1)
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=1))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
"""


def test_stock_mmdet_swin_config_trains_with_only_the_type_changed(tmp_path):
    import mmdet

    wheel = Path(mmdet.__file__).parent / '.mim'
    make_detection(tmp_path / 'coco', num_train=2, num_val=1, size=(64, 64))
    stock = importlib.import_module('mmdet.models.backbones').SwinTransformer(
        embed_dims=16, num_heads=[1, 2, 2, 4], depths=[2, 2, 2, 2]
    )
    checkpoint = tmp_path / 'swin_official.pth'
    torch.save(
        dict(model=official_layout(randomize_(stock).state_dict())), checkpoint
    )
    shrunk = tmp_path / 'shrunk.py'
    shrunk.write_text(
        f'_base_ = [{str(wheel / "configs" / STOCK_CONFIG)!r}]'
        + SHRUNK.format(
            checkpoint=str(checkpoint), data_root=f'{tmp_path / "coco"}/'
        )
    )
    # The user's change: the backbone's type (and the import naming it).
    config = tmp_path / 'hetdpt.py'
    config.write_text(
        f'_base_ = [{str(shrunk)!r}]\n'
        "custom_imports = dict(imports=['hetdpt_mm'], "
        'allow_failed_imports=False)\n'
        "model = dict(backbone=dict(type='HetDPTSwin'))\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            str(wheel / 'tools/train.py'),
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
                filter(None, [str(ROOT), os.environ.get('PYTHONPATH')])
            ),
        ),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    loaded = re.findall(r'HetDPTSwin: loaded (\d+)/(\d+) backbone', output)
    assert loaded and all(a == b for a, b in loaded), output[-4000:]
    assert 'Epoch(train) [1][1/1]' in output, output[-4000:]
    assert (tmp_path / 'work/epoch_1.pth').exists()
    saved = torch.load(
        tmp_path / 'work/epoch_1.pth', map_location='cpu', weights_only=False
    )['state_dict']
    assert 'backbone.stages.0.blocks.0.attn.qkv.weight' in saved
    assert 'backbone.norm0.weight' not in saved  # out_indices=(1, 2, 3)
