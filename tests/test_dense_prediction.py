"""DETR and UperNet with the HetDPT backbone (issue 6).

* The full configs (DeiT-B backbone in the merged form, the configs' own
  necks, heads, losses and optimizers) run one training iteration and one
  inference on a small synthetic batch.
* End to end on the demo COCO / ADE20K sets: tools/train.py fine-tunes from a
  pruned classification checkpoint, tools/merge_ckpt.py merges the result and
  tools/test.py reproduces the validation metrics of the training run.
* The docs/user_guides/transfer.md recipe swaps the backbone of stock mmdet
  and mmseg configs.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import (
    MIXED_SPEC,
    build_model,
    detection_batch,
    randomize_,
    segmentation_batch,
    with_masks,
)
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DefaultScope

from hetdpt_demo.data import make_detection, make_segmentation
from hetdpt_mm import META_KEY, PruneSpec
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.models.fused_attention import FusedMultiheadAttention

torch.set_num_threads(2)

ROOT = Path(__file__).resolve().parents[1]
#: A spec of the 6-block demo ViT with blocks of all four kinds.
DEMO_SPEC = dict(attn_removed=[0, 3, 4], act_removed=[2, 4, 5])
LOADED = re.compile(r'HetDPTViT: loaded (\d+)/(\d+) backbone tensors')


def full_config(name: str) -> Config:
    """A full-size config whose backbone has the merged HetDPT structure a
    checkpoint's meta would give it (random weights: no download)."""
    cfg = Config.fromfile(ROOT / 'configs' / name)
    cfg.model.backbone.update(
        init_cfg=None, prune_spec=MIXED_SPEC, merged=True
    )
    return cfg


def lr_and_decay(optim_wrapper, param):
    for group in optim_wrapper.optimizer.param_groups:
        if any(p is param for p in group['params']):
            return group['lr'], group['weight_decay']
    raise KeyError('parameter not in the optimizer')


# ------------------------------------------------------------ full configs
def test_detr_full_config_trains_and_predicts():
    cfg = full_config('detr_hetdpt_deit_b.py')
    model = build_model(cfg)
    backbone = model.backbone
    assert backbone.form == 'merged'
    assert backbone.prune_spec == PruneSpec(12, **MIXED_SPEC)
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    base_lr = cfg.optim_wrapper.optimizer.lr
    # mmdet's DETR recipe: the backbone learns at a tenth of the rate.
    assert lr_and_decay(optim_wrapper, backbone.pos_embed)[0] == pytest.approx(
        0.1 * base_lr
    )
    assert lr_and_decay(optim_wrapper, model.bbox_head.fc_cls.weight)[
        0
    ] == pytest.approx(base_lr)

    shapes = [(64, 96), (80, 64)]
    data = detection_batch(shapes, num_classes=80)
    merged_fc = backbone.blocks[7].mlp.fc.weight  # an activation-free FFN
    before = merged_fc.detach().clone()
    model.train()
    log_vars = model.train_step(data, optim_wrapper)
    for key in (
        'loss',
        'loss_cls',
        'loss_bbox',
        'loss_iou',
        'd0.loss_cls',
        'd4.loss_iou',
    ):
        assert torch.isfinite(log_vars[key]), key
    assert log_vars['loss'] > 0
    assert not torch.equal(merged_fc, before)

    model.eval()
    with torch.no_grad():
        results = model.test_step(data)
    assert len(results) == 2
    for result, (h, w) in zip(results, shapes):
        pred = result.pred_instances
        assert pred.bboxes.shape == (100, 4)  # one per query
        assert pred.scores.shape == pred.labels.shape == (100,)
        assert int(pred.labels.min()) >= 0 and int(pred.labels.max()) < 80
        assert (pred.bboxes >= 0).all()
        assert (pred.bboxes[:, 0::2] <= w).all()
        assert (pred.bboxes[:, 1::2] <= h).all()


def test_fused_attention_detr_is_mmdet_detr_with_fused_attention():
    cfg = full_config('detr_hetdpt_deit_b.py')
    assert cfg.model.type == 'FusedAttentionDETR'
    fused = build_model(cfg)
    assert type(fused).__name__ == 'FusedAttentionDETR'
    # 6 encoder self-, 6 decoder self- and 6 decoder cross-attentions.
    assert (
        sum(isinstance(m, FusedMultiheadAttention) for m in fused.modules())
        == 18
    )
    cfg = full_config('detr_hetdpt_deit_b.py')  # building consumed cfg
    cfg.model.type = 'DETR'
    stock = build_model(cfg)
    assert not any(
        isinstance(m, FusedMultiheadAttention) for m in stock.modules()
    )
    assert fused.state_dict().keys() == stock.state_dict().keys()
    stock.load_state_dict(fused.state_dict())

    # Two sizes: the smaller image is padded, so the key padding mask counts.
    data = detection_batch([(64, 96), (80, 64)], num_classes=80)
    fused.eval(), stock.eval()
    with torch.no_grad():
        losses = [
            model.loss(*model.data_preprocessor(data, True).values())
            for model in (fused, stock)
        ]
        results = [model.test_step(data) for model in (fused, stock)]
    for key, value in losses[1].items():
        torch.testing.assert_close(
            losses[0][key], value, atol=1e-5, rtol=1e-4, msg=key
        )
    for got, want in zip(*results):
        got, want = got.pred_instances, want.pred_instances
        torch.testing.assert_close(
            got.scores, want.scores, atol=1e-5, rtol=1e-4
        )
        torch.testing.assert_close(
            got.bboxes, want.bboxes, atol=1e-3, rtol=1e-4
        )


def test_upernet_full_config_trains_and_predicts():
    cfg = full_config('upernet_hetdpt_deit_b_ade20k.py')
    # 64x64 instead of 512x512 crops: the same network, seconds on a CPU.
    cfg.model.data_preprocessor.size = (64, 64)
    model = build_model(cfg)
    backbone = model.backbone
    assert backbone.form == 'merged'
    assert backbone.out_indices == [2, 5, 8, 11]
    optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    # mmseg's recipe names pos_embed, cls_token and norm: our names match.
    for param in (
        backbone.pos_embed,
        backbone.cls_token,
        backbone.blocks[0].norm1.weight,
    ):
        assert lr_and_decay(optim_wrapper, param)[1] == 0
    assert lr_and_decay(optim_wrapper, backbone.blocks[1].attn.qkv.weight)[
        1
    ] == pytest.approx(0.01)

    data = segmentation_batch([(64, 64), (64, 64)], num_classes=150)
    model.train()
    log_vars = model.train_step(data, optim_wrapper)
    for key in ('loss', 'decode.loss_ce', 'aux.loss_ce'):
        assert torch.isfinite(log_vars[key]), key
    # Random weights over 150 classes: cross-entropy near log(150).
    assert 3 < log_vars['decode.loss_ce'].item() < 8

    model.eval()
    shapes = [(48, 80), (48, 80)]  # inference: any size, no padding
    with torch.no_grad():
        results = model.test_step(segmentation_batch(shapes, 150))
    for result, shape in zip(results, shapes):
        assert result.seg_logits.data.shape == (150, *shape)
        assert result.pred_sem_seg.data.shape == (1, *shape)


# -------------------------------------------------------------- end to end
@pytest.fixture(scope='module')
def workspace(tmp_path_factory):
    """A directory laid out like the repository's working tree: the demo
    COCO and ADE20K sets under data/demo, and a pruned (not merged) demo
    classifier checkpoint with random weights."""
    root = tmp_path_factory.mktemp('transfer')
    make_detection(root / 'data/demo/coco', num_train=8, num_val=8)
    make_segmentation(root / 'data/demo/ade', num_train=8, num_val=8)
    cfg = Config.fromfile(ROOT / 'configs/demo/vit-demo_digits.py')
    cfg.model.backbone.prune_spec = DEMO_SPEC
    classifier = randomize_(build_model(cfg))
    torch.save(
        dict(
            state_dict=classifier.state_dict(),
            meta={META_KEY: classifier.backbone.record().to_dict()},
        ),
        root / 'pruned_cls.pth',
    )
    return root


def run_tool(cwd: Path, tool: str, *args) -> str:
    # One thread: the demo models are small, and on shared cores a second
    # OpenMP thread mostly spins waiting for the first.
    result = subprocess.run(
        [sys.executable, str(ROOT / 'tools' / tool), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS='1'),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def assert_every_backbone_tensor_loaded(output: str) -> None:
    loaded = LOADED.findall(output)
    assert loaded, output[-4000:]
    for count, total in loaded:
        assert count == total
    assert 'missing in checkpoint' not in output


def validation_metrics(work_dir: Path, key: str) -> dict:
    """The last validation metrics the training run logged."""
    lines = [
        json.loads(line)
        for path in work_dir.glob('*/vis_data/*.json')
        if path.name != 'scalars.json'
        for line in path.read_text().splitlines()
    ]
    return [line for line in lines if key in line][-1]


def check_structure(checkpoint: Path, form: str) -> None:
    record = read_backbone_checkpoint(checkpoint).record
    assert record.form == form
    assert record.spec == PruneSpec(6, **DEMO_SPEC)


def train_merge_test(
    workspace, config, name, train_options, metric_key, saved, test_options=()
):
    work_dir = workspace / name
    output = run_tool(
        workspace,
        'train.py',
        ROOT / 'configs/demo' / config,
        '--work-dir',
        work_dir,
        '--cfg-options',
        f'model.backbone.init_cfg.checkpoint={workspace / "pruned_cls.pth"}',
        *train_options,
    )
    assert_every_backbone_tensor_loaded(output)
    trained = validation_metrics(work_dir, metric_key)
    checkpoint = work_dir / saved
    check_structure(checkpoint, 'pruned')

    merged = workspace / f'{name}_merged.pth'
    run_tool(workspace, 'merge_ckpt.py', checkpoint, merged)
    check_structure(merged, 'merged')
    metrics_file = workspace / f'{name}_metrics.json'
    run_tool(
        workspace,
        'test.py',
        ROOT / 'configs/demo' / config,
        merged,
        '--work-dir',
        workspace / f'{name}_test',
        '--out-metrics',
        metrics_file,
        *test_options,
    )
    tested = json.loads(metrics_file.read_text())
    assert tested.keys() <= trained.keys()
    for key, value in tested.items():
        assert value == pytest.approx(trained[key], abs=1e-6), key
    return tested


def test_detr_demo_train_merge_test(workspace):
    metrics = train_merge_test(
        workspace,
        'detr_hetdpt_demo.py',
        'detr',
        [
            'train_cfg.max_epochs=1',
            'train_cfg.val_interval=1',
            'train_dataloader.batch_size=4',
        ],
        'coco/bbox_mAP',
        'epoch_1.pth',
    )
    assert {'coco/bbox_mAP', 'coco/bbox_mAP_50'} <= metrics.keys()


def first_losses(work_dir: Path) -> list:
    return [
        line['loss']
        for path in work_dir.glob('*/vis_data/scalars.json')
        for line in map(json.loads, path.read_text().splitlines())
        if 'loss' in line
    ]


def test_mmdet_tools_train_matches_ours(workspace):
    """`mim train mmdet CONFIG` runs mmdet's own tools/train.py (shipped in
    its wheel under .mim/tools): the config alone makes it build and save
    the same network as ours, with the record in its checkpoints."""
    import mmdet

    mmdet_train = Path(mmdet.__file__).parent / '.mim/tools/train.py'
    options = [
        '--cfg-options',
        f'model.backbone.init_cfg.checkpoint={workspace / "pruned_cls.pth"}',
        'train_cfg.max_epochs=1',
        'train_cfg.val_interval=2',
        'train_dataloader.batch_size=4',
        'default_hooks.logger.interval=1',
    ]
    config = ROOT / 'configs/demo/detr_hetdpt_demo.py'
    ours = run_tool(
        workspace,
        'train.py',
        config,
        '--work-dir',
        workspace / 'ours',
        *options,
    )
    result = subprocess.run(
        [
            sys.executable,
            str(mmdet_train),
            str(config),
            '--work-dir',
            str(workspace / 'mmdet'),
            *options,
        ],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, OMP_NUM_THREADS='1'),
    )
    theirs = result.stdout + result.stderr
    assert result.returncode == 0, theirs[-4000:]
    assert LOADED.findall(ours) == LOADED.findall(theirs) != []
    losses = first_losses(workspace / 'ours')
    assert len(losses) == 2
    assert first_losses(workspace / 'mmdet') == pytest.approx(losses, rel=1e-6)
    # The record travels in the state dict (no meta hook in mmdet's
    # runner), and loading the file rebuilds the structure.
    checkpoint = workspace / 'mmdet/epoch_1.pth'
    saved = torch.load(checkpoint, map_location='cpu', weights_only=False)
    assert 'backbone._extra_state' in saved['state_dict']
    assert read_backbone_checkpoint(checkpoint).record.origin == 'extra_state'
    check_structure(checkpoint, 'pruned')
    cfg = Config.fromfile(config)
    cfg.model.backbone.init_cfg = None
    model = build_model(cfg)
    model.load_state_dict(saved['state_dict'])
    assert model.backbone.form == 'pruned'
    assert model.backbone.prune_spec == PruneSpec(6, **DEMO_SPEC)


def test_upernet_demo_train_merge_test(workspace):
    metrics = train_merge_test(
        workspace,
        'upernet_hetdpt_demo.py',
        'upernet',
        [
            'train_cfg.max_iters=2',
            'train_cfg.val_interval=2',
            'train_dataloader.batch_size=4',
        ],
        'mIoU',
        'iter_2.pth',
        # mmseg's --out: a directory of predicted masks.
        ['--out', workspace / 'upernet_masks'],
    )
    assert 0 < metrics['mIoU'] <= 100
    assert len(list((workspace / 'upernet_masks').glob('*.png'))) == 8


# ------------------------------------------------------------------ recipes
def doc_recipes():
    """The config code blocks of docs/user_guides/transfer.md's "Any mmdet /
    mmseg config", by their stock base."""
    text = (ROOT / 'docs/user_guides/transfer.md').read_text()
    section = text.split('## Any mmdet / mmseg config')[1].split('\n## ')[0]
    blocks = re.findall(r'```python\n(.*?)```', section, re.S)
    return {
        re.search(r"_base_ = '(.*?)'", block).group(1): block
        for block in blocks
    }


RECIPES = doc_recipes()
#: The strides each stock detector expects of its neck's outputs.
DETECTOR_STRIDES = {
    'mmdet::detr/detr_r50_8xb2-150e_coco.py': [16],
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py': [4, 8, 16, 32, 64],
    'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py': [8, 16, 32, 64, 128],
    'mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py': [8, 16, 32, 64],
    'mmdet::rtmdet/rtmdet_tiny_8xb32-300e_coco.py': [8, 16, 32],
}


def test_every_doc_recipe_is_tested():
    assert RECIPES.keys() == DETECTOR_STRIDES.keys() | {
        'mmseg::segmenter/segmenter_vit-s_mask_8xb1-160k_ade20k-512x512.py',
        'mmseg::fcn/fcn_r50-d8_4xb4-80k_ade20k-512x512.py',
    }


def as_deit_tiny(recipe: str, checkpoint) -> str:
    """A recipe with DeiT-Ti (the test checkpoint) for its DeiT-B/S."""
    for arch, width in (('deit-base', 768), ('deit-small', 384)):
        recipe = recipe.replace(f"'{arch}'", "'deit-tiny'")
        recipe = re.sub(rf'\b{width}\b', '192', recipe)
    recipe = recipe.replace('distilled=True', 'distilled=False')
    return re.sub(
        r"checkpoint='[^']*'", f'checkpoint={str(checkpoint)!r}', recipe
    )


@pytest.fixture(scope='module')
def merged_tiny_checkpoint(tmp_path_factory):
    backbone = randomize_(
        HetDPTViT('deit-tiny', prune_spec=MIXED_SPEC, merged=True)
    )
    path = tmp_path_factory.mktemp('recipe') / 'hetdpt_deit-t_merged.pth'
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in backbone.state_dict().items()
            },
            meta={META_KEY: backbone.record().to_dict()},
        ),
        path,
    )
    return path


def recipe_config(recipe, checkpoint, tmp_path):
    config = tmp_path / 'recipe.py'
    config.write_text(as_deit_tiny(recipe, checkpoint))
    return Config.fromfile(config)


def train_one_step(cfg, data):
    """Build the config's model and take one step of its optimizer; the
    model comes back in eval mode with its loss values."""
    if 'size' in cfg.model.data_preprocessor:  # mmseg pads to its crop
        cfg.model.data_preprocessor.size = (64, 64)
    model = build_model(cfg)
    model.init_weights()
    assert model.backbone.form == 'merged'
    assert model.backbone.prune_spec == PruneSpec(12, **MIXED_SPEC)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        optim_wrapper = build_optim_wrapper(model, cfg.optim_wrapper)
    weight = model.backbone.blocks[1].attn.qkv.weight
    before = weight.detach().clone()
    model.train()
    log_vars = model.train_step(data, optim_wrapper)
    assert torch.isfinite(log_vars['loss']) and log_vars['loss'] > 0
    assert not torch.equal(weight, before)
    return model.eval(), log_vars


def check_detector(cfg, strides, size=64):
    shapes = [(size, size)] * 2
    data = detection_batch(shapes, 80)
    if cfg.model.get('roi_head', {}).get('mask_head'):
        data = with_masks(data)
    model, _ = train_one_step(cfg, data)
    with torch.no_grad():
        inputs = model.data_preprocessor(data)['inputs']
        feats = model.extract_feat(inputs)
        results = model.test_step(detection_batch(shapes, 80))
    assert [f.shape[-2] for f in feats] == [-(-size // s) for s in strides]
    assert all(r.pred_instances.bboxes.shape[1] == 4 for r in results)


def check_segmentor(cfg):
    model, log_vars = train_one_step(
        cfg, segmentation_batch([(64, 64), (64, 64)], 150)
    )
    assert torch.isfinite(log_vars['decode.loss_ce'])
    with torch.no_grad():
        results = model.test_step(segmentation_batch([(64, 64)], 150))
    assert results[0].pred_sem_seg.data.shape == (1, 64, 64)


@pytest.mark.parametrize('base', sorted(RECIPES))
def test_doc_recipe_trains_one_step(base, merged_tiny_checkpoint, tmp_path):
    cfg = recipe_config(RECIPES[base], merged_tiny_checkpoint, tmp_path)
    if 'detr' in base or 'dino' in base:
        # The backbone and neck are the recipe's; a CPU-sized transformer.
        cfg.model.encoder.num_layers = cfg.model.decoder.num_layers = 1
    if 'dino' in base:  # its queries are picked among 85 tokens at 64x64
        cfg.model.num_queries = 50
    if base.startswith('mmdet::'):
        check_detector(cfg, DETECTOR_STRIDES[base])
    else:
        check_segmentor(cfg)


def test_mask_rcnn_config_trains_one_step():
    check_detector(
        full_config('mask-rcnn_hetdpt_deit_s_fpn_1x_coco.py'),
        DETECTOR_STRIDES['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'],
    )


def test_fcn_config_trains_one_step():
    check_segmentor(full_config('fcn_hetdpt_deit_s_ade20k.py'))
