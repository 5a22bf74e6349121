"""A damaged record is refused, never taken for "no record": one decoding
(:func:`hetdpt_mm.checkpoint.record.decode_record`) decides for every path
that reads a checkpoint, before or after the network is built
(docs/advanced/reliability.md)."""

import re
from pathlib import Path

import pytest
import torch
from helpers import load_tool, randomize_
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope

from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.record import (
    EXTRA_STATE_KEY,
    decode_record,
    encode_record,
)
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.errors import CheckpointError, UsageError
from hetdpt_mm.registry import FAMILIES
from hetdpt_mm.runner import build_runner

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / 'configs/demo/vit-demo_digits.py'
KEY = 'backbone.' + EXTRA_STATE_KEY
#: A merged network whose removed GELUs no tensor shows.
SPEC = dict(attn_removed=[0], act_removed=[1, 2])


def merged_classifier():
    cfg = Config.fromfile(CONFIG)
    cfg.model.backbone.update(prune_spec=SPEC, merged=True)
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return randomize_(MODELS.build(cfg.model)).eval()


def forn(record: torch.Tensor) -> torch.Tensor:
    """One byte changed: ``"form"`` becomes ``"forn"``."""
    text = bytes(record.tolist()).replace(b'"form"', b'"forn"', 1)
    return torch.tensor(list(text), dtype=torch.uint8)


DAMAGES = {
    'forn': (forn, 'forn'),
    'int8': (lambda record: record.to(torch.int8), 'corrupt.*torch.int8'),
    '2-D': (lambda record: record[None], r'corrupt.*\(1, \d+\)'),
}


@pytest.fixture(scope='module', params=sorted(DAMAGES))
def damaged(request, tmp_path_factory):
    """A merged classifier's checkpoint with its record damaged, and the
    error every reader gives for it."""
    damage, message = DAMAGES[request.param]
    state = merged_classifier().state_dict()
    state[KEY] = damage(state[KEY])
    path = tmp_path_factory.mktemp(request.param) / 'damaged.pth'
    torch.save(dict(state_dict=state, meta=dict()), path)
    return path, f'{path}.*{message}'


def refused_by_tool(name, capsys, args, message, tmp_path, writes=True):
    """``writes=False``: the tool writes nothing where it refuses (a
    runner's tool keeps its log in the work dir)."""
    before = sorted(tmp_path.iterdir())
    assert load_tool(name).main([str(a) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: '), err
    assert re.search(message, err), err
    if writes:
        assert sorted(tmp_path.iterdir()) == before


def test_load_state_dict_refuses(damaged, one_thread):
    path, message = damaged
    with pytest.raises(CheckpointError, match=message):
        merged_classifier().load_state_dict(
            load_checkpoint_file(path)['state_dict']
        )


def test_runner_load_from_refuses(damaged, tmp_path, one_thread):
    path, message = damaged
    cfg = Config.fromfile(CONFIG)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.load_from = str(path)
    with pytest.raises(UsageError, match=message):
        build_runner(cfg).load_or_resume()


def test_init_cfg_pretrained_refuses(damaged, one_thread):
    path, message = damaged
    cfg = Config.fromfile(CONFIG)
    cfg.model.backbone.init_cfg = dict(
        type='Pretrained', checkpoint=str(path), prefix='backbone.'
    )
    with (
        DefaultScope.overwrite_default_scope(cfg.default_scope),
        pytest.raises(CheckpointError, match=message),
    ):
        MODELS.build(cfg.model).init_weights()


def test_merge_ckpt_refuses(damaged, capsys, tmp_path, one_thread):
    path, message = damaged
    refused_by_tool(
        'merge_ckpt', capsys, [path, tmp_path / 'out.pth'], message, tmp_path
    )


def test_prune_width_refuses(damaged, capsys, tmp_path, one_thread):
    path, message = damaged
    args = [path, tmp_path / 'plus.pth', '--ratio', '0.3']
    args += ['--importance', 'magnitude']
    refused_by_tool('prune_width', capsys, args, message, tmp_path)


def test_benchmark_checkpoint_refuses(damaged, capsys, tmp_path, one_thread):
    path, message = damaged
    args = ['backbone', '--checkpoint', path, '--json', tmp_path / 'b.json']
    refused_by_tool('benchmark', capsys, args, message, tmp_path)


def test_test_tool_refuses(damaged, capsys, tmp_path, one_thread):
    path, message = damaged
    args = [CONFIG, path, '--work-dir', tmp_path / 'test']
    refused_by_tool('test', capsys, args, message, tmp_path, writes=False)


# ------------------- every build argument the record carries is the config's
@pytest.mark.parametrize(
    'family, saved_with, name',
    [
        ('vit', dict(norm_cfg=dict(type='LN', eps=0.5)), 'norm_cfg'),
        ('swin', dict(qk_scale=5.0), 'qk_scale'),
    ],
)
def test_settings_no_shape_shows_are_compared(family, saved_with, name):
    """A file from ``HetDPTViT(norm_cfg=dict(type='LN', eps=0.5))`` into a
    default HetDPTViT (or a Swin's ``qk_scale``): same shapes, another
    network; refused naming the argument."""
    cls = FAMILIES[family]
    state = cls(**cls.SMALL_ARGS, **saved_with).state_dict()
    with pytest.raises(CheckpointError, match=name):
        cls(**cls.SMALL_ARGS).load_state_dict(state, strict=False)


@pytest.mark.parametrize(
    'arch, reason',
    [
        (dict(arch=dict(num_heads=5)), 'AssertionError: dim should be'),
        (dict(patch_size=0), 'ZeroDivisionError'),
        (dict(img_size=[2**31 - 1] * 2), 'RuntimeError: Storage size'),
    ],
)
def test_a_record_the_constructor_refuses_is_a_checkpoint_error(
    arch, reason, tmp_path, capsys
):
    """Records within the schema that do not build a network are named
    as the file's error, not a traceback from timm's layers."""
    state = merged_classifier().state_dict()
    record = decode_record(state[KEY])
    for name, value in arch.items():
        if isinstance(value, dict):
            record['arch'][name] = {**record['arch'][name], **value}
        else:
            record['arch'][name] = value
    state[KEY] = encode_record(record)
    path = tmp_path / 'unbuildable.pth'
    torch.save(dict(state_dict=state), path)
    with pytest.raises(CheckpointError, match=reason):
        read_backbone_checkpoint(str(path))
    out = tmp_path / 'merged.pth'
    assert load_tool('merge_ckpt').main([str(path), str(out)]) != 0
    err = capsys.readouterr().err
    assert err.startswith('error:') and reason in err
    assert 'Traceback' not in err
    assert not out.exists()


# ------------------------------------------- a HetDPT+ record's head split
def plus_classifier(num_heads, head_dims):
    """A merged HetDPT+ demo classifier (3 heads of 32, FFN 384) with the
    given head split of blocks 0 and 1."""
    cfg = Config.fromfile(CONFIG)
    widths = dict(
        embed_dims=96,
        num_heads=[*num_heads, 3, 3, 3, 3],
        head_dims=[*head_dims, 32, 32, 32, 32],
        ffn_hidden=[200, 300, 384, 384, 384, None],
    )
    spec = dict(act_removed=[5], widths=widths)
    cfg.model.backbone.update(prune_spec=spec, merged=True, init_cfg=None)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return randomize_(MODELS.build(cfg.model)).eval()


def test_a_head_split_that_lies_is_refused(tmp_path, capsys, one_thread):
    """Block 0: 2 x 26 said to be 4 x 13, block 1: 2 x 28 said to be 1 x 56:
    the same tensors, other attention; width pruning only removes heads and
    head dimensions, so more than the architecture's is a lie."""
    state = plus_classifier([2, 2], [26, 28]).state_dict()
    record = decode_record(state[KEY])
    record['spec']['widths'].update(
        num_heads=[4, 1, 3, 3, 3, 3], head_dims=[13, 56, 32, 32, 32, 32]
    )
    state[KEY] = encode_record(record)
    path = tmp_path / 'plus_lie.pth'
    torch.save(dict(state_dict=state, meta=dict()), path)
    message = f'{path}.*widths of blocks.*prune_width'
    with pytest.raises(CheckpointError, match=message):
        plus_classifier([2, 2], [26, 28]).load_state_dict(
            load_checkpoint_file(path)['state_dict']
        )
    args = [CONFIG, path, '--work-dir', tmp_path / 'test']
    refused_by_tool('test', capsys, args, message, tmp_path, writes=False)
