"""Sharded training (FSDP) of a prune run: MMEngine's FlexibleRunner with
FSDPStrategy on 2 gloo ranks on the CPU, a tiny gated LayerScale ViT
(docs/user_guides/dinov2.md, "Sharding")."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO
from mmengine.config import Config
from mmpretrain.registry import MODELS
from test_prune_hook import PRUNE_CONFIG, free_port

import hetdpt_mm  # noqa: F401  registers modules
from hetdpt_demo.data import make_classification
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.hooks.prune_hook import STATE_KEY
from hetdpt_mm.spec import META_KEY, PruneSpec

DIM, DEPTH = 48, 4


def write_config(path: Path, data_root: Path) -> Path:
    path.write_text(f"""
_base_ = [{str(PRUNE_CONFIG)!r}]
data_root = {str(data_root)!r}
model = dict(
    backbone=dict(_delete_=True, type='HetDPTLayerScaleViT',
                  arch=dict(embed_dims={DIM}, num_layers={DEPTH},
                            num_heads=3),
                  patch_size=4, img_size=32, gated=True),
    head=dict(in_channels={DIM}))
train_dataloader = dict(batch_size=16, dataset=dict(
    data_root=data_root, indices=128))
val_dataloader = dict(dataset=dict(data_root=data_root, indices=32))
test_dataloader = val_dataloader
custom_hooks = [
    dict(type='HetDPTPruneHook', counts=dict(attn=1, act=2),
         schedule='epoch', prune_epoch=1),
    dict(type='MergeCheckpointHook'),
]
train_cfg = dict(max_epochs=2, val_interval=2)
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=1, max_keep_ckpts=5))
randomness = dict(seed=0, deterministic=True)
runner_type = 'FlexibleRunner'
# Nested FSDP units, as in the DINOv2-g config: every linear layer of the
# blocks is one (a closed attention then skips whole units).
strategy = dict(
    type='HetDPTFSDPStrategy', state_dict_cfg='full',
    model_wrapper=dict(
        type='HetDPTFullyShardedDataParallel',
        auto_wrap_policy=dict(
            type='torch.distributed.fsdp.wrap.size_based_auto_wrap_policy',
            min_num_params=5000)))
""")
    return path


#: Each rank runs tools/train.py once per argument list (JSON), in one
#: process group: starting 2 interpreters costs most of the time.
DRIVER = """
import importlib.util, json, sys
import hetdpt_mm.apis.train as train_api
spec = importlib.util.spec_from_file_location('train_tool', sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
runs = json.loads(sys.argv[2])
release = train_api.release_distributed
train_api.release_distributed = lambda: None  # one process group for all runs
for index, args in enumerate(runs):
    if index == len(runs) - 1:
        train_api.release_distributed = release
    assert train.main(args + ['--launcher', 'pytorch']) == 0
"""


def dist_train(tmp_path: Path, *runs) -> None:
    """tools/train.py with each argument list in turn, in 2 processes (gloo
    on CPU) as tools/dist_train.sh starts them."""
    driver = tmp_path / 'driver.py'
    driver.write_text(DRIVER)
    env = dict(
        os.environ,
        OMP_NUM_THREADS='1',
        PYTHONPATH=os.pathsep.join(
            [str(REPO)] + os.environ.get('PYTHONPATH', '').split(os.pathsep)
        ),
    )
    result = subprocess.run(
        [
            sys.executable,
            '-m',
            'torch.distributed.run',
            '--nnodes=1',
            '--nproc_per_node=2',
            '--master_addr=127.0.0.1',
            f'--master_port={free_port()}',
            str(driver),
            str(REPO / 'tools' / 'train.py'),
            json.dumps([list(map(str, run)) for run in runs]),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        result.stdout[-3000:] + result.stderr[-3000:]
    )


def test_fsdp_prune_run_on_two_ranks(tmp_path):
    """FSDP on 2 ranks: the three removals of the epoch schedule are taken
    from the whole (gathered) scores, identically on both ranks; the
    checkpoints and the merged checkpoint are whole (gathered to rank 0)
    and the merged network computes what the gated one does; resumed after
    epoch 1, the run ends with the same weights."""
    data = tmp_path / 'data' / 'cls'
    make_classification(data)
    config = write_config(tmp_path / 'prune_fsdp.py', data)
    # Another name: another experiment (logger) than the first run's.
    resume_config = write_config(tmp_path / 'prune_fsdp_resume.py', data)
    work, resumed = tmp_path / 'work', tmp_path / 'resumed'
    # The second run resumes from the first's epoch-1 checkpoint.
    dist_train(
        tmp_path,
        [config, '--work-dir', work],
        [
            resume_config,
            '--work-dir',
            resumed,
            '--resume',
            work / 'epoch_1.pth',
        ],
    )

    log = next(work.glob('*/*.log')).read_text()
    assert 'HetDPTFullyShardedDataParallel' in log
    assert 'on 2 rank(s)' in log
    last = load_checkpoint_file(work / 'epoch_2.pth')
    decisions = last['meta'][STATE_KEY]['decisions']
    # 128 images over 2 ranks, batch 16: 4 iterations per epoch per rank.
    assert [d['iter'] for d in decisions] == [2, 3, 4]
    for decision in decisions:
        assert decision['rank_choices'] == [decision['index']] * 2
    spec = PruneSpec.from_dict(last['meta'][META_KEY]['spec'])
    assert (spec.n_attn, spec.n_act) == (1, 2)
    # Whole weights (no empty shards) under the plain model's keys.
    cfg = Config.fromfile(str(config))
    gated = MODELS.build(cfg.model)
    expected = gated.state_dict()
    assert set(last['state_dict']) == set(expected)
    for key, value in expected.items():
        if key.endswith('_extra_state'):  # the record: spec differs
            continue
        assert last['state_dict'][key].shape == value.shape, key
    gated.load_state_dict(last['state_dict'])
    assert gated.backbone.prune_spec == spec

    merged_ckpt = load_checkpoint_file(work / 'prune_fsdp_merged.pth')
    record = merged_ckpt['meta'][META_KEY]
    assert record['form'] == 'merged'
    assert PruneSpec.from_dict(record['spec']) == spec
    merged_cfg = cfg.model.copy()
    merged_cfg['backbone'] = dict(
        cfg.model.backbone, gated=False, merged=True, prune_spec=spec.to_dict()
    )
    merged = MODELS.build(merged_cfg)
    merged.load_state_dict(merged_ckpt['state_dict'])
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(
            merged.eval()(x, mode='tensor'),
            gated.eval()(x, mode='tensor'),
            atol=1e-5,
            rtol=1e-5,
        )

    again = load_checkpoint_file(resumed / 'epoch_2.pth')
    assert again['meta'][STATE_KEY]['decisions'] == decisions
    for key, value in last['state_dict'].items():
        assert torch.equal(again['state_dict'][key], value), key


def test_gradient_clipping_by_norm_under_fsdp_is_ddp_s(tmp_path):
    """``clip_grad=dict(max_norm=...)`` clips by the norm of the whole
    gradient under FSDP, as under DDP: SGD (whose step scales with the
    gradient, unlike AdamW's) with a norm far below the gradient's ends both
    2-rank runs with the same weights.  (MMEngine's own clipping, by the
    norm of each rank's shards, leaves them apart.)"""
    data = tmp_path / 'data' / 'cls'
    make_classification(data)
    clipped = """
custom_hooks = []
train_cfg = dict(max_epochs=1, val_interval=2)
param_scheduler = None
optim_wrapper = dict(_delete_=True, optimizer=dict(type='SGD', lr=0.5),
                     clip_grad=dict(max_norm=0.05))
"""
    fsdp = write_config(tmp_path / 'clip_fsdp.py', data)
    fsdp.write_text(fsdp.read_text() + clipped)
    ddp = write_config(tmp_path / 'clip_ddp.py', data)
    ddp.write_text(
        ddp.read_text()
        .replace("runner_type = 'FlexibleRunner'", "runner_type = 'Runner'")
        .split('# Nested FSDP units')[0]
        + clipped
    )
    dist_train(
        tmp_path,
        [fsdp, '--work-dir', tmp_path / 'fsdp'],
        [ddp, '--work-dir', tmp_path / 'ddp'],
    )
    log = next((tmp_path / 'fsdp').glob('*/*.log')).read_text()
    assert 'HetDPTFullyShardedDataParallel' in log and 'grad_norm' in log
    ours = load_checkpoint_file(tmp_path / 'fsdp/epoch_1.pth')['state_dict']
    want = load_checkpoint_file(tmp_path / 'ddp/epoch_1.pth')['state_dict']
    start = MODELS.build(Config.fromfile(str(fsdp)).model).state_dict()
    assert ours.keys() == want.keys()
    moved = 0
    for key, value in want.items():
        if key.endswith('_extra_state'):
            continue
        torch.testing.assert_close(
            ours[key], value, atol=1e-6, rtol=1e-5, msg=key
        )
        moved += not torch.equal(value, start[key])
    assert moved > len(want) // 2


def test_clipping_arguments_fsdp_cannot_take_are_refused():
    from hetdpt_mm.sharding import HetDPTFSDPStrategy

    HetDPTFSDPStrategy._check_clip_arguments(dict(max_norm=1.0, norm_type=2))
    with pytest.raises(
        ValueError,
        match=r"\['error_if_nonfinite'\].*"
        'max_norm and norm_type only',
    ):
        HetDPTFSDPStrategy._check_clip_arguments(
            dict(max_norm=1.0, error_if_nonfinite=True)
        )
