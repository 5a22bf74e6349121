"""tools/merge_ckpt.py and hetdpt_mm.merge: merging a checkpoint's HetDPTViT
backbone (mmseg-style, authors' stage-2, gated, already merged, with an
EMA) and the catalogue of bad inputs."""

import hashlib
import json
import os
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import (
    DENSE_CONFIG,
    MIXED_SPEC,
    REPO,
    build_model,
    load_tool,
    randomize_,
    small_config,
    timm_state_dict,
)
from mmengine.config import Config
from mmengine.hooks import EMAHook
from mmengine.model import ExponentialMovingAverage
from safetensors.torch import load_file

import hetdpt_mm  # noqa: F401  registers modules
from hetdpt_demo.data import make_classification
from hetdpt_mm.checkpoint.record import (
    EXTRA_STATE_KEY,
    HetDPTRecord,
    encode_record,
)
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.errors import CheckpointError
from hetdpt_mm.fileio import atomic_path
from hetdpt_mm.merge import merge_checkpoint
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.spec import META_KEY, PruneSpec

TOOL = REPO / 'tools' / 'merge_ckpt.py'
ARCH = dict(embed_dims=48, num_layers=4, num_heads=3)
SPEC = dict(attn_removed=[0, 2], act_removed=[2, 3])
#: What mmseg's UperNet reads from a ViT backbone.
FEATMAP = dict(out_type='featmap', out_indices=[1, 3], final_norm=False)


@pytest.fixture(scope='module')
def tool():
    """tools/merge_ckpt.py as a module, to run main() in-process."""
    return load_tool('merge_ckpt')


def tiny_backbone(spec=SPEC, **kwargs) -> HetDPTViT:
    kwargs = dict(dict(arch=ARCH, img_size=32, patch_size=4), **kwargs)
    return randomize_(HetDPTViT(prune_spec=spec, **kwargs), seed=3).eval()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_tool(tool, capsys, *args):
    code = tool.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def mmseg_checkpoint(backbone: HetDPTViT) -> dict:
    """An mmseg-style training checkpoint: backbone under 'backbone.', heads,
    an int64 buffer, optimizer state, meta from HetDPTMetaHook."""
    generator = torch.Generator().manual_seed(5)
    state = OrderedDict()
    state['decode_head.conv_seg.weight'] = torch.randn(
        4, 16, 1, 1, generator=generator
    )
    state.update(
        ('backbone.' + k, v) for k, v in backbone.state_dict().items()
    )
    state['decode_head.bn.running_mean'] = torch.randn(16, generator=generator)
    state['decode_head.bn.num_batches_tracked'] = torch.tensor(123)
    state['auxiliary_head.conv.weight'] = torch.randn(
        8, 48, 3, 3, generator=generator
    ).half()
    meta = dict(epoch=3, iter=300, dataset_meta=dict(classes=('a', 'b')))
    meta[META_KEY] = dict(backbone.record().to_dict(), prefix='backbone.')
    return dict(
        state_dict=state, meta=meta, optimizer=dict(state={}, param_groups=[])
    )


def test_mmseg_checkpoint_only_the_backbone_changes(tool, tmp_path, capsys):
    backbone = tiny_backbone(**FEATMAP)
    source = tmp_path / 'upernet.pth'
    torch.save(mmseg_checkpoint(backbone), source)
    out = tmp_path / 'upernet_merged.pth'
    code, stdout, _ = run_tool(tool, capsys, source, out)
    assert code == 0
    assert (
        'pruned form, PruneSpec(depth=4, attn_removed=[0, 2], '
        'act_removed=[2, 3])' in stdout
    )
    before = load_checkpoint_file(source)
    merged = load_checkpoint_file(out)
    assert set(merged) == {'state_dict', 'meta'}  # optimizer state dropped
    others = [k for k in before['state_dict'] if not k.startswith('backbone.')]
    assert [
        k for k in merged['state_dict'] if not k.startswith('backbone.')
    ] == others
    for key in others:
        old, new = before['state_dict'][key], merged['state_dict'][key]
        assert old.dtype == new.dtype and torch.equal(old, new), key
    assert merged['meta']['epoch'] == 3
    assert merged['meta']['dataset_meta'] == dict(classes=('a', 'b'))
    assert merged['meta'][META_KEY]['form'] == 'merged'

    # The merged backbone rebuilds from the file alone and computes the same.
    rebuilt = HetDPTViT(
        arch=ARCH,
        img_size=32,
        patch_size=4,
        **FEATMAP,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(out), prefix='backbone.'
        ),
    )
    rebuilt.init_weights()
    assert rebuilt.form == 'merged'
    assert rebuilt.prune_spec == PruneSpec(4, **SPEC)
    x = torch.randn(2, 3, 40, 56)  # not the training size
    with torch.no_grad():
        for got, want in zip(rebuilt.eval()(x), backbone(x)):
            assert (got - want).abs().max() <= 1e-5


def test_authors_stage2_checkpoint_with_spec(tool, tmp_path, capsys):
    """DeiT-B distilled, the paper's spec, timm layout with both heads:
    75,526,352 tensors before merging, 54,867,152 after (docs/method.md)."""
    backbone = HetDPTViT('deit-base', distilled=True, prune_spec=MIXED_SPEC)
    state = timm_state_dict(backbone)
    state['head.weight'] = torch.randn(1000, 768)
    state['head.bias'] = torch.randn(1000)
    state['head_dist.weight'] = torch.randn(1000, 768)
    state['head_dist.bias'] = torch.randn(1000)
    source = tmp_path / 'hetdpt_deit_base_stage2.pth'
    torch.save(dict(model=state), source)
    del backbone

    out = tmp_path / 'merged.pth'
    code, _, err = run_tool(tool, capsys, source, out)
    assert code == 2 and 'removed GELUs are unknown' in err
    assert not out.exists()
    code, stdout, _ = run_tool(
        tool, capsys, source, out, '--spec', json.dumps(MIXED_SPEC)
    )
    assert code == 0
    assert 'all tensors:         75,526,352 -> 54,867,152' in stdout
    merged = load_checkpoint_file(out)
    assert (
        sum(
            v.numel()
            for k, v in merged['state_dict'].items()
            if not k.endswith('_extra_state')
        )
        == 54_867_152
    )
    # Written in mmpretrain's classifier layout (issue 51 item 1), heads
    # passed through under DeiTClsHead's names.
    for key in ('head.weight', 'head_dist.bias'):
        assert torch.equal(
            merged['state_dict']['head.layers.' + key], state[key]
        )
    record = merged['meta'][META_KEY]
    assert record['prefix'] == 'backbone.' and record['form'] == 'merged'
    assert record['arch']['arch']['num_heads'] == 12  # the DeiT-B preset
    assert record['arch']['distilled'] is True
    assert record['spec'] == PruneSpec(12, **MIXED_SPEC).to_dict()


def test_gated_checkpoint_spec_from_the_gates_and_merged_input(
    tool, tmp_path, capsys
):
    gated = tiny_backbone(spec=None, gated=True)
    gated.set_spec(SPEC)
    source = tmp_path / 'gated.pth'
    torch.save(
        dict(
            state_dict={
                'backbone.' + k: v for k, v in gated.state_dict().items()
            }
        ),
        source,
    )
    first = tmp_path / 'merged.pth'
    assert (
        run_tool(tool, capsys, source, first, '--arch', json.dumps(ARCH))[0]
        == 0
    )
    record = load_checkpoint_file(first)['meta'][META_KEY]
    assert record['spec'] == PruneSpec(4, **SPEC).to_dict()

    # Merging a merged checkpoint writes it unchanged.
    second = tmp_path / 'merged_again.pth'
    code, stdout, _ = run_tool(tool, capsys, first, second)
    assert code == 0 and 'already merged: written unchanged' in stdout
    before, after = load_checkpoint_file(first), load_checkpoint_file(second)
    assert before['meta'] == after['meta']
    assert before['state_dict'].keys() == after['state_dict'].keys()
    for key, value in before['state_dict'].items():
        assert torch.equal(value, after['state_dict'][key]), key


def test_a_record_that_contradicts_the_tensors_is_refused(
    tool, tmp_path, capsys
):
    """One check, in read_backbone_checkpoint, for the merge and the
    backbone alike: a merged file whose meta names another spec."""
    merged = tiny_backbone().to_merged()
    lying = PruneSpec(4, attn_removed=[1], act_removed=[3])
    record = merged.record()
    meta = dict(record.to_dict(), spec=lying.to_dict(), prefix='backbone.')
    state = {'backbone.' + k: v for k, v in timm_state_dict(merged).items()}
    source = tmp_path / 'lying.pth'
    torch.save(dict(state_dict=state, meta={META_KEY: meta}), source)
    code, _, err = run_tool(tool, capsys, source, tmp_path / 'out.pth')
    assert code == 2 and 'does not match the tensors' in err, err
    with pytest.raises(CheckpointError, match='does not match the tensors'):
        HetDPTViT(
            arch=ARCH,
            img_size=32,
            patch_size=4,
            init_cfg=dict(type='Pretrained', checkpoint=str(source)),
        )
    # The record in the state dict and the meta must agree too.
    state['backbone._extra_state'] = encode_record(record.to_dict(False))
    torch.save(dict(state_dict=state, meta={META_KEY: meta}), source)
    code, _, err = run_tool(tool, capsys, source, tmp_path / 'out.pth')
    assert code == 2 and 'meta["hetdpt"] says' in err, err


def test_merge_checkpoint_keeps_the_gated_function():
    gated = tiny_backbone(spec=None, gated=True)
    gated.set_spec(SPEC)
    checkpoint = dict(
        state_dict={'backbone.' + k: v for k, v in gated.state_dict().items()},
        meta={META_KEY: dict(gated.record().to_dict(), prefix='backbone.')},
    )
    merged, summary = merge_checkpoint(checkpoint)
    assert summary.form_in == 'gated' and summary.dropped == {
        'gate tensors': 16
    }
    model = HetDPTViT(
        arch=ARCH, img_size=32, patch_size=4, prune_spec=SPEC, merged=True
    ).eval()
    model.load_state_dict(
        {k[len('backbone.') :]: v for k, v in merged['state_dict'].items()}
    )
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        assert (model(x)[0] - gated(x)[0]).abs().max() <= 1e-5


def test_a_gated_run_that_removed_nothing_merges():
    """The demo's no-removal baseline: its merge hook merges a gated
    checkpoint whose spec stayed dense (a dense file without a spec does
    not merge)."""
    gated = tiny_backbone(spec=None, gated=True)
    checkpoint = dict(
        state_dict={'backbone.' + k: v for k, v in gated.state_dict().items()},
        meta={META_KEY: dict(gated.record().to_dict(), prefix='backbone.')},
    )
    merged, summary = merge_checkpoint(checkpoint)
    assert summary.form_in == 'gated' and summary.spec.is_dense
    dense = tiny_backbone(spec=None)
    with pytest.raises(ValueError, match='dense: give --spec'):
        merge_checkpoint(dict(state_dict=dense.state_dict()))


@pytest.mark.parametrize('form', ['merged', 'pruned'])
def test_spec_applied_to_dense_weights_with_heads(
    tool, tmp_path, capsys, form
):
    """An official-layout dense file plus a spec gives the network of that
    spec (issue 18 item 4): the same function as the dense weights loaded
    into a backbone of that spec, heads passed through unchanged."""
    dense = tiny_backbone(spec=None, distilled=True)
    state = timm_state_dict(dense)
    state['head.weight'] = torch.randn(10, 48)
    state['head_dist.weight'] = torch.randn(10, 48)
    source = tmp_path / 'deit_dense.pth'
    torch.save(dict(model=state), source)
    out = tmp_path / 'deit_spec.pth'
    code, stdout, err = run_tool(
        tool,
        capsys,
        source,
        out,
        '--spec',
        json.dumps(SPEC),
        '--form',
        form,
        '--arch',
        json.dumps(ARCH),
    )
    assert code == 0, err
    assert (
        'spec applied: PruneSpec(depth=4, attn_removed=[0, 2], '
        f'act_removed=[2, 3]) ({form} form)' in stdout
    )
    # Both backbone counts leave the classifier heads out (issue 51 item 5).
    heads = {'head.weight', 'head_dist.weight'}
    before = sum(v.numel() for k, v in state.items() if k not in heads)
    assert f'backbone parameters: {before:,} -> ' in stdout
    converted = load_checkpoint_file(out)
    after = sum(
        v.numel()
        for k, v in converted['state_dict'].items()
        if k.startswith('backbone.') and not k.endswith(EXTRA_STATE_KEY)
    )
    assert f'backbone parameters: {before:,} -> {after:,}' in stdout
    assert converted['meta'][META_KEY]['form'] == form
    for key in ('head.weight', 'head_dist.weight'):
        assert torch.equal(
            converted['state_dict']['head.layers.' + key], state[key]
        )
    assert ('backbone.blocks.2.mlp.fc.weight' in converted['state_dict']) == (
        form == 'merged'
    )
    assert 'blocks.0.attn.qkv.weight' not in converted['state_dict']
    assert 'backbone.blocks.0.attn.qkv.weight' not in converted['state_dict']

    rebuilt = HetDPTViT(
        arch=ARCH,
        img_size=32,
        patch_size=4,
        distilled=True,
        init_cfg=dict(type='Pretrained', checkpoint=str(out)),
    )
    rebuilt.init_weights()
    assert (rebuilt.form, rebuilt.prune_spec) == (form, PruneSpec(4, **SPEC))
    cut = HetDPTViT(
        arch=ARCH,
        img_size=32,
        patch_size=4,
        distilled=True,
        prune_spec=SPEC,
        init_cfg=dict(type='Pretrained', checkpoint=str(source)),
    )
    cut.init_weights()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        for got, want in zip(rebuilt.eval()(x)[0], cut.eval()(x)[0]):
            assert (got - want).abs().max() <= 1e-5


# ------------------------------------------------------ bad inputs (CLI)
def authors_tiny(tmp_path) -> Path:
    path = tmp_path / 'stage2.pth'
    torch.save(dict(model=timm_state_dict(tiny_backbone())), path)
    return path


BAD_SPECS = [
    (
        '{"attn_removed": [0, 2], "act_removed": [9]}',
        'act_removed index 9 is out of range for depth 4',
    ),
    ('{"attn_removed": [0, 2, 2]}', r'attn_removed has duplicated indices'),
    ('{"attn_removed": [0, -2]}', 'attn_removed index -2 is out of range'),
    ('{"attn_removed": [0, 2.0]}', 'attn_removed must hold integers'),
    ('{"attn_removed": [1]}', 'lacks layers'),
    ('{"attn_removed": [0, 2], "act_removed": [1], "depth": 6}', 'depth 6'),
    ('{"attn_removed": [0, 2]', 'not valid JSON'),
    ('[0, 2]', '--spec must be a JSON object, got [0, 2]'),
    ('absent.json', '--spec file absent.json does not exist'),
]


@pytest.mark.parametrize('spec, message', BAD_SPECS)
def test_bad_spec_is_rejected(tool, tmp_path, capsys, spec, message):
    source = authors_tiny(tmp_path)
    before = digest(source)
    out = tmp_path / 'out.pth'
    code, _, err = run_tool(
        tool, capsys, source, out, '--spec', spec, '--arch', json.dumps(ARCH)
    )
    assert code == 2
    assert err.startswith('error: ') and message in err, err
    assert not out.exists() and digest(source) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ['stage2.pth']


def test_bad_input_files_are_rejected(tool, tmp_path, capsys):
    valid = authors_tiny(tmp_path)
    random_bytes = tmp_path / 'random.pth'
    random_bytes.write_bytes(bytes(range(256)) * 64)
    truncated = tmp_path / 'truncated.pth'
    truncated.write_bytes(valid.read_bytes()[:5000])
    resnet = tmp_path / 'resnet.pth'
    torch.save(
        dict(
            state_dict={
                'backbone.conv1.weight': torch.zeros(8, 3, 7, 7),
                'head.fc.weight': torch.zeros(10, 8),
            }
        ),
        resnet,
    )
    dense = tmp_path / 'dense.pth'
    torch.save(dict(model=timm_state_dict(tiny_backbone(spec=None))), dense)
    spec = ['--spec', json.dumps(SPEC), '--arch', json.dumps(ARCH)]
    cases = [
        (tmp_path / 'absent.pth', spec, 'does not exist'),
        (random_bytes, spec, 'is not a PyTorch checkpoint'),
        (truncated, spec, 'truncated or corrupt'),
        (resnet, spec, 'no backbone of'),
        (dense, [], 'dense: give --spec'),
        (
            valid,
            ['--spec', '{"attn_removed": [0]}', '--arch', json.dumps(ARCH)],
            'lacks layers',
        ),
        (valid, spec[:2], 'give --arch'),
    ]
    inputs = sorted(p.name for p in tmp_path.iterdir())
    for source, args, message in cases:
        out = tmp_path / 'out.pth'
        code, _, err = run_tool(tool, capsys, source, out, *args)
        assert code == 2 and err.startswith('error: '), (source, err)
        assert message in err, (source, err)
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == inputs


def test_output_is_never_the_input_and_kept_without_force(
    tool, tmp_path, capsys
):
    source = authors_tiny(tmp_path)
    before = digest(source)
    spec = ['--spec', json.dumps(SPEC), '--arch', json.dumps(ARCH)]
    code, _, err = run_tool(tool, capsys, source, source, *spec, '--force')
    assert code == 2 and 'is the same file as input' in err
    assert digest(source) == before

    out = tmp_path / 'out.pth'
    out.write_bytes(b'keep me')
    code, _, err = run_tool(tool, capsys, source, out, *spec)
    assert code == 2 and 'already exists; pass --force' in err
    assert out.read_bytes() == b'keep me'
    assert run_tool(tool, capsys, source, out, *spec, '--force')[0] == 0
    assert load_checkpoint_file(out)['meta'][META_KEY]['form'] == 'merged'
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        'out.pth',
        'stage2.pth',
    ]


def test_a_full_disk_is_named(tool, tmp_path, capsys, monkeypatch):
    """torch.save on a full disk raises "unexpected pos 64 vs 0"; the tool
    says what happened and leaves nothing behind."""
    import collections
    import shutil

    source = authors_tiny(tmp_path)
    spec = ['--spec', json.dumps(SPEC), '--arch', json.dumps(ARCH)]

    def save_on_full_disk(obj, path):
        Path(path).write_bytes(b'PK')
        raise RuntimeError(
            '[enforce fail at inline_container.cc:672] . '
            'unexpected pos 64 vs 0'
        )

    usage = collections.namedtuple('usage', 'total used free')
    monkeypatch.setattr(torch, 'save', save_on_full_disk)
    monkeypatch.setattr(shutil, 'disk_usage', lambda path: usage(1, 1, 0))
    code, _, err = run_tool(tool, capsys, source, tmp_path / 'out.pth', *spec)
    assert code == 2 and 'No space left' in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['stage2.pth']


def test_command_line_error_has_no_traceback(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            str(tmp_path / 'absent.pth'),
            str(tmp_path / 'out.pth'),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith('error: checkpoint ')
    assert 'Traceback' not in result.stderr
    assert not (tmp_path / 'out.pth').exists()


# ------------------------------------------------ an EMA-trained model
EMA_SPEC = dict(attn_removed=[1, 4], act_removed=[2, 4])


@pytest.fixture(scope='module')
def ema_run(tmp_path_factory):
    """Two epochs of the demo classifier, pruned to :data:`EMA_SPEC`, with
    MMEngine's EMAHook (its checkpoints hold the averaged weights in
    ``state_dict``, the trained ones in ``ema_state_dict``) and
    MergeCheckpointHook."""
    root = tmp_path_factory.mktemp('ema_run')
    make_classification(root / 'cls')
    config = small_config(
        root / 'ema.py',
        DENSE_CONFIG,
        root / 'cls',
        model=f'dict(backbone=dict(prune_spec={EMA_SPEC!r}))',
        custom_hooks="[dict(type='EMAHook', momentum=0.2), "
        "dict(type='MergeCheckpointHook')]",
    )
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert (
            load_tool('train').main([config, '--work-dir', str(root / 'work')])
            == 0
        )
    finally:
        torch.set_num_threads(previous)
    return root, Path(config)


def test_ema_weights_are_merged_as_the_model(ema_run, tool, tmp_path, capsys):
    root, config = ema_run
    source = root / 'work' / 'epoch_2.pth'
    before = load_checkpoint_file(source)
    assert {'ema_state_dict', 'optimizer', 'message_hub'} <= set(before)
    out = tmp_path / 'merged.pth'
    code, stdout, err = run_tool(tool, capsys, source, out)
    assert code == 0, err
    assert 'EMA weights (ema_state_dict): merged the same way' in stdout
    assert (
        'dropped training state: message_hub, optimizer, '
        'param_schedulers (it refers to the unmerged parameters' in stdout
    )
    merged = load_checkpoint_file(out)
    assert set(merged) == {'state_dict', 'ema_state_dict', 'meta'}
    ema = merged['ema_state_dict']
    assert torch.equal(ema['steps'], before['ema_state_dict']['steps'])

    # The merged EMA model is the EMA's weights merged on their own.
    alone, _ = merge_checkpoint(
        dict(
            state_dict={
                k[len('module.') :]: v
                for k, v in before['ema_state_dict'].items()
                if k.startswith('module.')
            },
            meta=before['meta'],
        )
    )
    module = {
        k[len('module.') :]: v
        for k, v in ema.items()
        if k.startswith('module.')
    }
    assert list(module) == list(alone['state_dict'])
    x = torch.randn(2, 3, 32, 32)
    outputs = []
    for weights in (module, alone['state_dict'], merged['state_dict']):
        backbone = HetDPTViT.from_record(
            HetDPTRecord.from_dict(merged['meta'][META_KEY])
        ).eval()
        backbone.load_state_dict(
            {
                k[len('backbone.') :]: v
                for k, v in weights.items()
                if k.startswith('backbone.')
            }
        )
        with torch.no_grad():
            outputs.append(backbone(x)[0])
    assert (outputs[0] - outputs[1]).abs().max() <= 1e-6
    assert (outputs[0] - outputs[2]).abs().max() > 1e-4  # not the same

    # EMAHook loads it strictly: resuming (ema_state_dict) and testing.
    cfg = Config.fromfile(config)
    cfg.model.backbone.pop('prune_spec')
    cfg.model.backbone.init_cfg = dict(
        type='Pretrained', checkpoint=str(out), prefix='backbone.'
    )
    model = build_model(cfg)
    model.init_weights()
    assert model.backbone.form == 'merged'
    hook = EMAHook(strict_load=True)
    runner = SimpleNamespace(model=model, _resume=True)
    hook.before_run(runner)
    assert isinstance(hook.ema_model, ExponentialMovingAverage)
    hook.after_load_checkpoint(
        runner,
        dict(state_dict=dict(merged['state_dict']), ema_state_dict=dict(ema)),
    )
    averaged = timm_state_dict(hook.ema_model.module)
    assert averaged.keys() == timm_state_dict(model).keys()
    for key, value in averaged.items():
        assert torch.equal(merged['state_dict'][key], value), key
    strict = tmp_path / 'strict_ema.py'
    strict.write_text(
        f'_base_ = [{str(config)!r}]\n'
        "custom_hooks = [dict(type='EMAHook', "
        'strict_load=True)]\n'
    )
    assert (
        load_tool('test').main(
            [str(strict), str(out), '--work-dir', str(tmp_path / 'test')]
        )
        == 0
    )


def test_merge_hook_writes_the_ema_layout_of_the_checkpoints(ema_run):
    """The hook's file after training is the last checkpoint merged."""
    root, _ = ema_run
    written = load_checkpoint_file(root / 'work' / 'ema_merged.pth')
    merged, _ = merge_checkpoint(
        load_checkpoint_file(root / 'work' / 'epoch_2.pth')
    )
    for entry in ('state_dict', 'ema_state_dict'):
        assert list(written[entry]) == list(merged[entry])
        for key, value in merged[entry].items():
            assert torch.equal(written[entry][key], value), (entry, key)


def folder_state(folder: Path) -> dict:
    """Every entry of ``folder``: a link's target, a file's bytes."""
    return {
        path.name: os.readlink(path)
        if path.is_symlink()
        else path.read_bytes()
        for path in folder.iterdir()
    }


def test_a_link_or_a_folder_is_never_written_as_an_output(
    tool, tmp_path, capsys
):
    """Issue 59 item 3: ``--force`` replaced a link (whose target it had
    checked), and ``newdir/`` was written as the file ``newdir``."""
    source = tmp_path / 'upernet.pth'
    torch.save(mmseg_checkpoint(tiny_backbone()), source)
    (tmp_path / 'real.pth').write_bytes(b'old')
    link = tmp_path / 'latest.pth'
    link.symlink_to('real.pth')
    before = folder_state(tmp_path)
    for out, word in ((link, 'symbolic link'), (f'{tmp_path}/new/', 'folder')):
        code, _, err = run_tool(tool, capsys, source, out, '--force')
        assert code == 2 and word in err, err
    assert folder_state(tmp_path) == before
    with (
        pytest.raises(OSError, match='symbolic link'),
        atomic_path(link) as tmp,
    ):  # hooks' and MMEngine's saves
        tmp.write_bytes(b'new')
    assert folder_state(tmp_path) == before


def test_safetensors_out_is_safetensors_and_converts_back(
    tool, tmp_path, capsys
):
    """Issue 59 item 4: OUT.safetensors held a torch zip, and a merged
    .safetensors input was copied byte for byte to OUT.pth; neither
    loaded."""
    backbone = tiny_backbone(**FEATMAP)
    source = tmp_path / 'upernet.pth'
    torch.save(mmseg_checkpoint(backbone), source)
    out = tmp_path / 'merged.safetensors'
    assert run_tool(tool, capsys, source, out)[0] == 0
    tensors = load_file(out)
    assert f'backbone.{EXTRA_STATE_KEY}' in tensors  # the record
    rebuilt = HetDPTViT(
        arch=ARCH,
        img_size=32,
        patch_size=4,
        **FEATMAP,
        init_cfg=dict(
            type='Pretrained', checkpoint=str(out), prefix='backbone.'
        ),
    )
    rebuilt.init_weights()
    assert rebuilt.form == 'merged'
    assert rebuilt.prune_spec == PruneSpec(4, **SPEC)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        for got, want in zip(rebuilt.eval()(x), backbone(x)):
            assert (got - want).abs().max() <= 1e-5
    again = tmp_path / 'again.pth'
    code, stdout, _ = run_tool(tool, capsys, out, again)
    assert code == 0 and 'already merged' in stdout
    loaded = torch.load(again, weights_only=True)
    assert loaded.keys() == tensors.keys()
    assert all(torch.equal(loaded[key], tensors[key]) for key in tensors)
