"""Issue 16's pipeline for the Swin family, on the demo data: a small gated
Swin classifier (configs/demo/swin-demo_digits_prune.py) is pruned by
HetDPTPruneHook through the Runner, merged by tools/merge_ckpt.py (and by
MergeCheckpointHook, which must agree), and Mask R-CNN and UperNet
(configs/demo/mask-rcnn_hetdpt-swin_demo.py, built on the full Mask R-CNN
Swin-T config, and configs/demo/upernet_hetdpt-swin_demo.py) start from the
merged checkpoint through their ``init_cfg`` and train one iteration."""

import os
from pathlib import Path

import pytest
import torch
from helpers import load_tool
from mmengine.config import Config

from hetdpt_demo.data import (
    make_classification,
    make_detection,
    make_segmentation,
)
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.runner import build_runner

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / 'configs/demo'
PRUNE_CONFIG = DEMO / 'swin-demo_digits_prune.py'
#: Where the dense-prediction configs look for the merged classifier.
MERGED = Path(
    'work_dirs/swin-demo_digits_prune/swin-demo_digits_prune_merged.pth'
)


@pytest.fixture(scope='module')
def pruned_and_merged(tmp_path_factory, one_thread):
    """A working directory with the demo data and the prune config run for
    one epoch of four iterations, its three removals after iterations 1, 2
    and 3; yields the root and the epoch checkpoint."""
    root = tmp_path_factory.mktemp('swin_transfer')
    cwd = os.getcwd()
    os.chdir(root)
    try:
        make_classification('data/demo/cls')
        make_detection('data/demo/coco', num_train=4, num_val=2)
        make_segmentation('data/demo/ade', num_train=4, num_val=2)
        (root / 'tests/data').mkdir(parents=True)
        (root / 'tests/data/map_points_paper.csv').write_bytes(
            (ROOT / 'tests/data/map_points_paper.csv').read_bytes()
        )
        cfg = Config.fromfile(PRUNE_CONFIG)
        cfg.work_dir = str(MERGED.parent)
        cfg.train_dataloader.batch_size = 4
        cfg.train_dataloader.dataset.indices = 16
        cfg.train_cfg.update(max_epochs=1, val_interval=10)
        cfg.param_scheduler = None  # its cosine phase starts at epoch 1
        cfg.custom_hooks[0].update(by_epoch=False, stages=1)
        build_runner(cfg).train()
        yield root, MERGED.parent / 'epoch_1.pth'
    finally:
        os.chdir(cwd)


def test_prune_run_removes_its_budget_and_the_tool_merges_it(
    pruned_and_merged,
):
    root, checkpoint = pruned_and_merged
    pruned = read_backbone_checkpoint(checkpoint).record
    assert pruned.family == 'swin' and pruned.form == 'gated'
    assert pruned.spec.depth == 8
    assert pruned.spec.num_removed == 3  # the config's budget, split by MAP
    merged_by_tool = root / 'merged_by_tool.pth'
    assert (
        load_tool('merge_ckpt').main([str(checkpoint), str(merged_by_tool)])
        == 0
    )
    by_tool = load_checkpoint_file(str(merged_by_tool))['state_dict']
    by_hook = load_checkpoint_file(str(MERGED))['state_dict']
    record = read_backbone_checkpoint(merged_by_tool).record
    assert record.form == 'merged' and record.spec == pruned.spec
    assert by_tool.keys() == by_hook.keys()
    for key, value in by_hook.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(by_tool[key], value), key


def one_iteration(name: str, work_dir: str):
    """The demo config ``name`` set to train one iteration of two images
    into ``work_dir``, from the merged classifier it names."""
    cfg = Config.fromfile(DEMO / name)
    assert cfg.model.backbone.init_cfg.checkpoint == str(MERGED)
    cfg.work_dir = work_dir
    cfg.train_dataloader.batch_size = 2
    cfg.train_dataloader.dataset.indices = 2
    if cfg.train_cfg.get('max_iters'):
        cfg.train_cfg.update(max_iters=1, val_interval=10)
    else:
        cfg.train_cfg.update(max_epochs=1, val_interval=10)
    cfg.default_hooks.checkpoint.interval = 1
    return cfg


@pytest.mark.parametrize(
    'name, losses',
    [
        (
            'mask-rcnn_hetdpt-swin_demo.py',
            ('loss_rpn_cls', 'loss_cls', 'loss_bbox', 'loss_mask'),
        ),
        ('upernet_hetdpt-swin_demo.py', ('decode.loss_ce', 'aux.loss_ce')),
    ],
)
def test_dense_prediction_starts_from_the_merged_swin(
    pruned_and_merged, name, losses
):
    root, checkpoint = pruned_and_merged
    spec = read_backbone_checkpoint(MERGED).record.spec
    runner = build_runner(one_iteration(name, f'work_dirs/{name}'))
    runner.train()
    backbone = runner.model.backbone
    assert backbone.form == 'merged' and backbone.prune_spec == spec
    scalars = runner.message_hub.log_scalars
    for key in ('loss',) + losses:
        assert torch.isfinite(
            torch.tensor(scalars[f'train/{key}'].current())
        ), key
    # One step of a warming-up AdamW moves the weights by about 1e-6: they
    # are the merged classifier's.
    merged = load_checkpoint_file(str(MERGED))['state_dict']
    for key, value in backbone.state_dict().items():
        if (
            isinstance(value, torch.Tensor)
            and key != '_extra_state'
            and f'backbone.{key}' in merged
        ):
            torch.testing.assert_close(
                value, merged[f'backbone.{key}'], atol=1e-4, rtol=0, msg=key
            )
    assert (
        sum(f'backbone.{key}' in merged for key in backbone.state_dict()) > 40
    )
