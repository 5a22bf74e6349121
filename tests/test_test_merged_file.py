"""The documented test of a pruning run (docs/user_guides/pruning.md's quick
start, docs/user_guides/transfer.md step 2): ``tools/test.py <prune config>
<run>_merged.pth`` and mmpretrain's own ``tools/test.py``, although the prune
config builds ``gated=True`` and, for DeiT-B, a distillation teacher the merged
file leaves out. A configured structure rebuilds only as its run's merged
result; any other structure stays an error naming both."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mmpretrain
import pytest
import torch
from helpers import (
    REPO,
    build_model,
    fake_runner,
    load_tool,
    randomize_,
    write_tiny_config,
    write_tiny_deit_inputs,
)
from mmengine.config import Config

from hetdpt_demo.data import make_classification
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.hooks import HetDPTPruneHook
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import HetDPTViT

PRUNE_CONFIG = REPO / 'configs/demo/vit-demo_digits_prune.py'
DEIT_CONFIG = REPO / 'configs/hetdpt/deit-b_prune-10l_in1k.py'
MMPRETRAIN_TEST = Path(mmpretrain.__file__).parent / '.mim/tools/test.py'
#: What the run's gates closed (the demo's final spec in
#: docs/user_guides/pruning.md).
FOUND = dict(attn_removed=[1, 2], act_removed=[0, 1, 2])
TOP1 = re.compile(r'accuracy/top1: ([0-9.]+)')


def save_run(model, work_dir: Path, name: str) -> Path:
    """What a pruning run leaves: its last gated checkpoint (``epoch_1``)
    and the merged file MergeCheckpointHook writes."""
    model.backbone.set_spec(FOUND)
    work_dir.mkdir(parents=True)
    checkpoint = dict(state_dict=model.state_dict(), meta={})
    torch.save(checkpoint, work_dir / 'epoch_1.pth')
    merged, _ = merge_checkpoint(checkpoint)
    torch.save(merged, work_dir / f'{name}_merged.pth')
    return work_dir / f'{name}_merged.pth'


def our_test(config, checkpoint: str, metrics: Path) -> float:
    assert (
        load_tool('test').main(
            [str(config), checkpoint, '--out-metrics', str(metrics)]
        )
        == 0
    )
    return json.loads(metrics.read_text())['accuracy/top1']


def mmpretrain_test(config, checkpoint: str, cwd: Path) -> float:
    result = subprocess.run(
        [
            sys.executable,
            str(MMPRETRAIN_TEST),
            str(config),
            checkpoint,
            '--work-dir',
            str(cwd / 'mmpretrain_test'),
        ],
        cwd=cwd,
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
    assert 'rebuilding as vit merged' in output
    return float(TOP1.findall(output)[-1])


def test_the_quick_start_tests_the_merged_file(
    tmp_path, monkeypatch, one_thread
):
    """docs/user_guides/pruning.md as written, from a folder holding
    data/demo and the run's work_dirs: the merged file tests as the last
    gated checkpoint does, under our tools/test.py and mmpretrain's."""
    make_classification(tmp_path / 'data/demo/cls')
    monkeypatch.chdir(tmp_path)
    work = Path('work_dirs/vit-demo_digits_prune')
    save_run(
        randomize_(build_model(Config.fromfile(PRUNE_CONFIG))),
        tmp_path / work,
        'vit-demo_digits_prune',
    )
    merged = str(work / 'vit-demo_digits_prune_merged.pth')
    gated = our_test(
        PRUNE_CONFIG, str(work / 'epoch_1.pth'), tmp_path / 'gated.json'
    )
    assert our_test(PRUNE_CONFIG, merged, tmp_path / 'merged.json') == gated
    assert mmpretrain_test(PRUNE_CONFIG, merged, tmp_path) == pytest.approx(
        gated, abs=1e-3
    )  # as logged, 4 decimals


def test_the_deit_b_prune_config_tests_without_its_teacher(
    tmp_path, monkeypatch, one_thread
):
    """docs/user_guides/transfer.md step 2 (tiny): the distillation config
    tests its merged file, which holds no teacher, with the teacher's and
    the start's files absent (downloads only training needs)."""
    files = write_tiny_deit_inputs(tmp_path)
    config = write_tiny_config(
        DEIT_CONFIG, tmp_path, files['distilled'], teacher=files['dense']
    )
    cfg = Config.fromfile(config)
    cfg.test_dataloader, cfg.test_evaluator = (
        cfg.val_dataloader,
        cfg.val_evaluator,
    )
    cfg.dump(config)
    model = build_model(cfg)
    model.init_weights()
    monkeypatch.chdir(tmp_path)
    work = Path('work_dirs/deit-b_prune-10l_in1k')
    save_run(model, tmp_path / work, 'deit-b_prune-10l_in1k')
    for path in files.values():
        path.unlink()
    merged = str(work / 'deit-b_prune-10l_in1k_merged.pth')
    ours = our_test(config, merged, tmp_path / 'merged.json')
    assert mmpretrain_test(config, merged, tmp_path) == pytest.approx(
        ours, abs=1e-3
    )


def test_a_loaded_file_without_the_whole_teacher_is_named(tmp_path):
    """In training (the teacher built by init_weights) a file without any
    teacher keeps the model's, and a file with part of one is an error."""
    files = write_tiny_deit_inputs(tmp_path)
    model = build_model(
        Config.fromfile(
            write_tiny_config(
                DEIT_CONFIG,
                tmp_path,
                files['distilled'],
                teacher=files['dense'],
            )
        )
    )
    model.init_weights()
    state = model.state_dict()
    without_teacher = {
        k: v for k, v in state.items() if not k.startswith('teacher.')
    }
    model.load_state_dict(without_teacher)
    assert model.teacher_ready
    partial = {
        k: v
        for k, v in state.items()
        if k != 'teacher.head.layers.head.weight'
    }
    with pytest.raises(
        RuntimeError,
        match=r'Missing key.*teacher\.head\.'
        r'layers\.head\.weight',
    ):
        model.load_state_dict(partial)


# ----------------------------------- a given structure stays the user's
DEMO_ARCH = dict(
    arch=dict(embed_dims=96, num_layers=6, num_heads=3),
    img_size=32,
    patch_size=4,
)


def merged_state(**semantics) -> dict:
    gated = randomize_(HetDPTViT(**DEMO_ARCH, gated=True, **semantics))
    gated.set_spec(FOUND)
    return gated.to_merged().state_dict()


@pytest.mark.parametrize(
    'configured',
    [
        dict(gated=True),
        dict(gated=True, prune_spec=dict(attn_removed=[1])),
        dict(prune_spec=FOUND),
    ],
)
def test_a_configured_structure_rebuilds_as_its_merged_result(configured):
    backbone = HetDPTViT(**DEMO_ARCH, **configured)
    backbone.load_state_dict(merged_state())
    assert backbone.form == 'merged'
    assert (
        backbone.prune_spec
        == HetDPTViT(**DEMO_ARCH, prune_spec=FOUND).prune_spec
    )


@pytest.mark.parametrize(
    'configured, semantics',
    [
        # gates closed that the file keeps
        (dict(gated=True, prune_spec=dict(attn_removed=[3])), {}),
        (dict(prune_spec=dict(attn_removed=[1])), {}),  # another spec
        (
            dict(gated=True),
            dict(residual_gelu='act_removed'),
        ),  # other semantics
        (dict(merged=True), {}),  # a merged network of another spec
    ],
)
def test_a_file_that_is_not_the_configured_runs_result_is_an_error(
    configured, semantics
):
    backbone = HetDPTViT(**DEMO_ARCH, **configured)
    with pytest.raises(
        CheckpointError,
        match='is a vit merged .*, the config vit',
    ):
        backbone.load_state_dict(merged_state(**semantics))


def test_training_a_prune_config_from_a_merged_file_is_refused():
    """``load_from`` a merged file into a prune config: the backbone takes
    the file's structure, which has no gates, and the prune hook stops the
    run before its first step (it never trains the merged network as if it
    were searching)."""
    model = build_model(Config.fromfile(PRUNE_CONFIG))
    state = merged_state()
    heads = {
        k: v
        for k, v in model.state_dict().items()
        if not k.startswith('backbone.')
    }
    model.load_state_dict(
        {**heads, **{f'backbone.{k}': v for k, v in state.items()}}
    )
    assert model.backbone.form == 'merged'
    hook = HetDPTPruneHook(counts=dict(attn=1, act=1), stages=1)
    with pytest.raises(ValueError, match='gated=True'):
        hook.before_train(fake_runner(model))
