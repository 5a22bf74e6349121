"""One place decides a backbone's structure (hetdpt_mm/structure.py): every
door compares the settings no shape shows, and a stock OpenMMLab checkpoint
loads into a config with only the backbone ``type`` swapped wherever the
stock model's would, computing as the stock model (issue 58)."""

import json
import pickle
from pathlib import Path

import pytest
import torch
from helpers import (
    DENSE_CONFIG,
    REPO,
    assert_same_outputs,
    build_model,
    load_tool,
    randomize_,
    randomized_stock,
    timm_state_dict,
)
from mmengine.config import Config
from mmengine.registry import DefaultScope

from hetdpt_demo.data import (
    make_classification,
    make_detection,
    make_segmentation,
)
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.record import decode_record
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import FAMILIES, HetDPTSwin, HetDPTViT
from hetdpt_mm.runner import build_runner

KEY = '_extra_state'


def saved(path: Path, state, prefix: str = 'backbone.') -> str:
    torch.save(
        dict(state_dict={prefix + k: v for k, v in state.items()}), path
    )
    return str(path)


# ------------------- 1. init_cfg compares what no shape shows, as loading
@pytest.mark.parametrize(
    'family, saved_with, name',
    [
        ('vit', dict(norm_cfg=dict(type='LN', eps=0.5)), 'norm_cfg'),
        (
            'vit',
            dict(arch=dict(embed_dims=96, num_layers=6, num_heads=6)),
            'num_heads',
        ),
        ('vit', dict(patch_bias=False), 'patch_bias'),
        ('swin', dict(qk_scale=5.0), 'qk_scale'),
    ],
)
def test_init_cfg_refuses_another_setting(family, saved_with, name, tmp_path):
    cls = FAMILIES[family]
    path = saved(
        tmp_path / 'other.pth',
        cls(**{**cls.SMALL_ARGS, **saved_with}).state_dict(),
    )
    backbone = cls(
        **cls.SMALL_ARGS,
        init_cfg=dict(type='Pretrained', checkpoint=path, prefix='backbone.'),
    )
    with pytest.raises(CheckpointError, match=name):
        backbone.init_weights()


# --------- 2. a type swap without norm_cfg computes as mmseg's ViT (1e-5)
def test_an_mmseg_swap_without_norm_cfg_computes_as_stock():
    """mmseg's DPT / SAN backbone dicts set no ``norm_cfg``: mmcv's
    LayerNorm eps 1e-5, which the swap follows."""
    from mmseg.registry import MODELS

    args = dict(
        img_size=32,
        patch_size=8,
        embed_dims=48,
        num_layers=4,
        num_heads=3,
        out_indices=(3,),
        final_norm=False,
        with_cls_token=True,
    )
    stock = randomized_stock(MODELS.get('VisionTransformer'), **args)
    with DefaultScope.overwrite_default_scope('mmseg'):
        ours = MODELS.build(dict(type='HetDPTViT', **args))
    ours.load_state_dict(stock.state_dict())
    assert ours.norm_eps == 1e-5
    assert_same_outputs(stock, ours.eval(), (2, 3, 32, 32))


# ------------- 3. stock checkpoints into a swapped config, at every door
def stock_and_swapped(toolbox: str, root: Path):
    """A demo config of ``toolbox`` with a stock backbone, and the same
    with its ``type`` swapped to ours, on a few images under ``root``."""
    if toolbox == 'mmpretrain':
        base, data = DENSE_CONFIG, root / 'cls'
        make_classification(data)
        backbone = dict(
            type='VisionTransformer',
            arch=dict(
                embed_dims=96,
                num_layers=6,
                num_heads=3,
                feedforward_channels=384,
            ),
            img_size=32,
            patch_size=4,
        )
        swapped = 'HetDPTViT'
    elif toolbox == 'mmseg':
        base, data = REPO / 'configs/demo/upernet_hetdpt_demo.py', root / 'ade'
        make_segmentation(data, num_train=4, num_val=4)
        backbone = dict(
            type='VisionTransformer',
            img_size=(64, 64),
            patch_size=4,
            embed_dims=96,
            num_layers=6,
            num_heads=3,
            out_indices=(1, 2, 4, 5),
            final_norm=False,
            norm_cfg=dict(type='LN', eps=1e-6),
        )
        swapped = 'HetDPTViT'
    else:
        base = REPO / 'configs/demo/mask-rcnn_hetdpt-swin_demo.py'
        data = root / 'coco'
        make_detection(data, num_train=4, num_val=4)
        backbone = dict(
            type='SwinTransformer',
            embed_dims=32,
            depths=[2, 2, 2, 2],
            num_heads=[1, 2, 4, 8],
            window_size=4,
            drop_path_rate=0.0,
        )
        swapped = 'HetDPTSwin'
    configs = []
    for kind in (backbone['type'], swapped):
        path = root / f'{toolbox}_{kind}.py'
        path.write_text(
            f'_base_ = [{str(base)!r}]\n'
            f'data_root = {str(data) + "/"!r}\n'
            f'model = dict(backbone=dict(_delete_=True, '
            f'**{dict(backbone, type=kind)!r}))\n'
            'train_dataloader = dict(dataset=dict(data_root=data_root))\n'
            'val_dataloader = dict(batch_size=2, '
            'dataset=dict(data_root=data_root, indices=4))\n'
            'test_dataloader = val_dataloader\n'
            + (
                'val_evaluator = dict(ann_file=data_root + '
                "'annotations/instances_val2017.json')\n"
                'test_evaluator = val_evaluator\n'
                if toolbox == 'mmdet'
                else ''
            )
        )
        configs.append(path)
    return configs


@pytest.mark.parametrize('toolbox', ['mmpretrain', 'mmseg', 'mmdet'])
def test_a_stock_checkpoint_tests_and_loads_in_the_swapped_config(
    toolbox, tmp_path, one_thread
):
    stock_config, swapped_config = stock_and_swapped(toolbox, tmp_path)
    stock = randomize_(build_model(Config.fromfile(stock_config))).eval()
    checkpoint = tmp_path / 'stock.pth'
    torch.save(dict(state_dict=stock.state_dict()), checkpoint)

    cfg = Config.fromfile(swapped_config)
    cfg.work_dir, cfg.load_from = str(tmp_path / 'load_from'), str(checkpoint)
    runner = build_runner(cfg)
    runner.load_or_resume()
    shape = (1, 3, 32, 32) if toolbox == 'mmpretrain' else (1, 3, 64, 64)
    assert_same_outputs(stock.backbone, runner.model.backbone.eval(), shape)

    results = []
    for config in (stock_config, swapped_config):
        out = tmp_path / f'{config.stem}.json'
        args = [str(config), str(checkpoint), '--out-metrics', str(out)]
        args += ['--work-dir', str(tmp_path / config.stem)]
        if toolbox == 'mmpretrain':
            args += ['--out', str(tmp_path / f'{config.stem}.pkl')]
        assert load_tool('test').main(args) == 0
        results.append(json.loads(out.read_text()))
    assert results[0] == results[1]
    if toolbox == 'mmpretrain':
        scores = [
            torch.stack(
                [p['pred_score'] for p in pickle.loads(path.read_bytes())]
            )
            for path in sorted(tmp_path.glob('*.pkl'))
        ]
        torch.testing.assert_close(*scores, atol=1e-5, rtol=0)


# ------------------------------------------------ 4. the silent defects
def test_a_null_setting_is_not_the_default(tmp_path):
    """A record saying ``"patch_bias": null`` is not what any network
    records: refused, never a patch bias left random."""
    state = HetDPTViT(**HetDPTViT.SMALL_ARGS, patch_bias=False).state_dict()
    record = decode_record(state[KEY])
    record['arch']['patch_bias'] = None
    from hetdpt_mm.checkpoint.record import encode_record

    state[KEY] = encode_record(record)
    with pytest.raises(CheckpointError, match='patch_bias'):
        HetDPTViT(**HetDPTViT.SMALL_ARGS).load_state_dict(state, strict=False)


def test_a_bare_vit_without_patch_bias_merges(tmp_path):
    """timm's CLIP-style ViT (``pre_norm``, no patch bias)."""
    import timm

    model = timm.create_model(
        'vit_tiny_patch16_224',
        img_size=32,
        patch_size=8,
        depth=2,
        pre_norm=True,
        num_classes=4,
    )
    merged, _ = merge_checkpoint(
        model.state_dict(),
        spec=dict(act_removed=[1]),
        arch=dict(embed_dims=192, num_layers=2, num_heads=3),
    )
    record = read_backbone_checkpoint(merged).record
    assert record.arch['patch_bias'] is False and record.arch['pre_norm']


def test_a_timm_swin_whose_every_window_shrank_keeps_the_default_window():
    import timm

    model = timm.create_model(
        'swin_tiny_patch4_window7_224',
        img_size=16,
        depths=(2, 2),
        num_heads=(1, 2),
        embed_dim=32,
        num_classes=0,
    )
    record = read_backbone_checkpoint(model.state_dict()).record
    merged, _ = merge_checkpoint(
        model.state_dict(), spec=dict(attn_removed=[1])
    )
    assert record.family == 'swin'
    assert read_backbone_checkpoint(merged).record.arch['window_size'] == 7


@pytest.mark.parametrize('rows', [16, 10])
def test_a_corrupt_swin_bias_table_is_refused(rows):
    state = timm_state_dict(HetDPTSwin(**HetDPTSwin.SMALL_ARGS))
    key = next(k for k in state if k.endswith('relative_position_bias_table'))
    state[key] = torch.zeros(rows, state[key].shape[1])
    with pytest.raises(CheckpointError, match='rows'):
        merge_checkpoint(state, spec=dict(attn_removed=[1]))


def test_bool_weights_are_refused():
    state = timm_state_dict(HetDPTViT(**HetDPTViT.SMALL_ARGS))
    state['blocks.0.mlp.fc1.weight'] = state['blocks.0.mlp.fc1.weight'] > 0
    with pytest.raises(CheckpointError, match='torch.bool'):
        merge_checkpoint(state, spec=dict(act_removed=[0]), arch='deit-tiny')


def test_an_unreadable_safetensors_file_is_a_checkpoint_error(tmp_path):
    path = tmp_path / 'bad.safetensors'
    path.write_bytes(b'\x10' + bytes(7) + b'{"a":1}garbage')
    with pytest.raises(CheckpointError, match='bad.safetensors'):
        read_backbone_checkpoint(str(path))


def test_merge_writes_one_layout_for_every_input():
    """A head-less bare backbone lands under ``backbone.`` as a
    classifier's does, so ``prefix='backbone.'`` loads either."""
    state = timm_state_dict(HetDPTViT(**HetDPTViT.SMALL_ARGS))
    merged, _ = merge_checkpoint(
        state, spec=dict(act_removed=[0]), arch=HetDPTViT.SMALL_ARGS['arch']
    )
    keys = [k for k in merged['state_dict'] if not k.endswith(KEY)]
    assert keys and all(k.startswith('backbone.') for k in keys)


# ----------------- a test replaces the init_cfg weights: nothing downloaded
@pytest.mark.parametrize(
    'weights',
    [
        "init_cfg=dict(type='Pretrained', checkpoint=URL)",
        'pretrained=URL',
    ],
)
def test_testing_a_checkpoint_downloads_no_init_cfg(
    weights, tmp_path, one_thread
):
    """A stock config keeps its backbone's ``init_cfg`` / ``pretrained``
    URL; ``tools/test.py CONFIG CKPT`` tests offline (port 9 refuses any
    connection)."""
    data = tmp_path / 'cls'
    make_classification(data)
    config = tmp_path / 'offline.py'
    config.write_text(
        f'_base_ = [{str(DENSE_CONFIG)!r}]\n'
        "URL = 'http://127.0.0.1:9/deit_tiny_patch16_224-a1311bcf.pth'\n"
        f'data_root = {str(data)!r}\n'
        f'model = dict(backbone=dict({weights}))\n'
        'val_dataloader = dict(dataset=dict(data_root=data_root, '
        'indices=4))\n'
        'test_dataloader = val_dataloader\n'
    )
    cfg = Config.fromfile(DENSE_CONFIG)
    checkpoint = tmp_path / 'model.pth'
    torch.save(dict(state_dict=build_model(cfg).state_dict()), checkpoint)
    args = [str(config), str(checkpoint), '--work-dir', str(tmp_path / 'w')]
    assert load_tool('test').main(args) == 0
