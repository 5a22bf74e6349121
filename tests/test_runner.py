"""The run options shared by tools/train.py and tools/test.py, and atomic
outputs' file modes."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers import DENSE_CONFIG, REPO, load_tool, small_config
from mmengine.config import Config

from hetdpt_mm.fileio import atomic_write_text
from hetdpt_mm.runner import apply_resume, build_runner, experiment_name


def test_resume_with_nothing_to_resume_keeps_the_starting_weights(tmp_path):
    cfg = Config(dict(work_dir=str(tmp_path), load_from='start.pth'))
    apply_resume(cfg, 'auto')  # killed before the first save
    assert cfg.load_from == 'start.pth' and not cfg.get('resume')
    (tmp_path / 'epoch_1.pth').write_bytes(b'')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_1.pth'))
    apply_resume(cfg, 'auto')
    assert cfg.resume and cfg.load_from is None  # MMEngine finds epoch_1
    apply_resume(cfg, 'other.pth')
    assert cfg.resume and cfg.load_from == 'other.pth'


def test_outputs_get_ordinary_file_modes(tmp_path):
    previous = os.umask(0o022)
    try:
        new = tmp_path / 'new.json'
        atomic_write_text(new, '{}')
        assert new.stat().st_mode & 0o777 == 0o644
        kept = tmp_path / 'kept.json'
        kept.write_text('old')
        kept.chmod(0o640)
        atomic_write_text(kept, '{}')  # replacing keeps the mode
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(previous)


def test_test_tool_never_writes_over_its_inputs(tmp_path, capsys):
    checkpoint = tmp_path / 'model.pth'
    checkpoint.write_bytes(b'weights')
    link = tmp_path / 'link.json'
    link.symlink_to(checkpoint)
    config = REPO / 'configs/demo/vit-demo_digits.py'
    for option, out in (
        ('--out-metrics', checkpoint),
        ('--out', link),
        ('--out-metrics', config),
    ):
        code, err = run_tool(capsys, 'test', [config, checkpoint, option, out])
        assert code == 2 and re.match(
            r'^error: output .* is the same file as input', err
        ), err
    assert checkpoint.read_bytes() == b'weights'


def test_merge_tool_never_writes_over_its_spec(tmp_path, capsys):
    spec = tmp_path / 'spec.json'
    spec.write_text('{"attn_removed": [0]}')
    code = load_tool('merge_ckpt').main(
        [str(tmp_path / 'in.pth'), str(spec), '--spec', str(spec), '--force']
    )
    assert code == 2 and 'same file as input' in capsys.readouterr().err
    assert spec.read_text() == '{"attn_removed": [0]}'


# ------------------------------------------ tools/train.py, tools/test.py
PRUNE_CONFIG = REPO / 'configs/demo/vit-demo_digits_prune.py'


@pytest.fixture(scope='module')
def dense_run(tmp_path_factory):
    """Two epochs of the dense demo config on 16 images."""
    from hetdpt_demo.data import make_classification

    root = tmp_path_factory.mktemp('dense_run')
    make_classification(root / 'cls')
    config = small_config(root / 'dense.py', DENSE_CONFIG, root / 'cls')
    assert (
        load_tool('train').main([config, '--work-dir', str(root / 'work')])
        == 0
    )
    return root


def run_tool(capsys, tool, argv):
    code = load_tool(tool).main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(
    'case, message',
    [
        ('missing config', r'^error: config .*absent.py does not exist'),
        (
            'syntax error',
            r'^error: config .*broken.py: .*never closed',
        ),
        (
            'missing pretrained',
            r'^error: model.backbone.init_cfg.checkpoint: no file '
            r"'.*absent.pth'.*docs/user_guides/transfer.md",
        ),
        ('index out of range', 'error: attn_removed index 9 is out of range'),
        ('missing map points', 'error: MAP points file not found: absent.csv'),
        ('budget over 2 depth', 'error: budget 13'),
        ('unknown type', 'error: NoSuchHook is not in the .*hook registry'),
        (
            'truncated resume',
            r'error: cannot resume from .*truncated.pth: .*truncated or '
            'corrupt',
        ),
        (
            'resume another config',
            'error: cannot resume from .*epoch_1.pth: '
            'loaded state dict has a different number of parameter groups',
        ),
        (
            'resume without message hub',
            r'error: cannot resume from .*no_hub.pth: '
            r"no 'message_hub'",
        ),
        (
            'resume from a link to /dev/zero',
            r'error: cannot resume from '
            r'.*zero.pth: checkpoint .*zero.pth is a character device',
        ),
        (
            'load_from a FIFO',
            r'error: .*fifo.pth is a FIFO',
        ),
        (
            'config in its work dir',
            r'error: .*dense.py is an input of this run, '
            'and MMEngine writes the config it runs to',
        ),
        (
            'load_from in the work dir',
            r'error: .*epoch_1.pth is an input of this '
            'run, and the run saves files of that name into its work dir',
        ),
    ],
)
def test_train_reports_bad_input_as_errors(
    dense_run, tmp_path, capsys, case, message
):
    work = tmp_path / 'work'
    dense = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, dense_run / 'cls'
    )
    prune = small_config(
        tmp_path / 'prune.py', PRUNE_CONFIG, dense_run / 'cls'
    )
    epoch_1 = dense_run / 'work' / 'epoch_1.pth'
    argv = {
        'missing config': [tmp_path / 'absent.py'],
        'syntax error': [tmp_path / 'broken.py'],
        'missing pretrained': [
            dense,
            '--cfg-options',
            'model.backbone.init_cfg.type=Pretrained',
            f'model.backbone.init_cfg.checkpoint={tmp_path}/absent.pth',
        ],
        'index out of range': [
            dense,
            '--cfg-options',
            'model.backbone.prune_spec.attn_removed=[9]',
        ],
        'missing map points': [
            prune,
            '--cfg-options',
            'custom_hooks.0.map_points=absent.csv',
        ],
        'budget over 2 depth': [
            prune,
            '--cfg-options',
            'custom_hooks.0.budget=13',
        ],
        'unknown type': [
            prune,
            '--cfg-options',
            'custom_hooks.1.type=NoSuchHook',
        ],
        'truncated resume': [dense, '--resume', tmp_path / 'truncated.pth'],
        'resume another config': [prune, '--resume', epoch_1],
        'resume without message hub': [
            dense,
            '--resume',
            tmp_path / 'no_hub.pth',
        ],
        'resume from a link to /dev/zero': [
            dense,
            '--resume',
            tmp_path / 'zero.pth',
        ],
        'load_from a FIFO': [
            dense,
            '--cfg-options',
            f'load_from={tmp_path}/fifo.pth',
        ],
        'config in its work dir': [
            tmp_path / 'dense.py',
            '--work-dir',
            tmp_path,
        ],
        'load_from in the work dir': [
            dense,
            '--work-dir',
            epoch_1.parent,
            '--cfg-options',
            f'load_from={epoch_1}',
        ],
    }[case]
    (tmp_path / 'broken.py').write_text('x = (\n')
    (tmp_path / 'zero.pth').symlink_to('/dev/zero')
    os.mkfifo(tmp_path / 'fifo.pth')
    (tmp_path / 'truncated.pth').write_bytes(epoch_1.read_bytes()[:5000])
    checkpoint = torch.load(epoch_1, weights_only=False)
    del checkpoint['message_hub']
    torch.save(checkpoint, tmp_path / 'no_hub.pth')
    if '--work-dir' not in argv:
        argv += ['--work-dir', work]
    code, err = run_tool(capsys, 'train', argv)
    assert code == 2 and re.search(message, err), err
    # MMEngine's registry raised it: its traceback leads (issue 60 item 8)
    assert ('Traceback' in err) == (case == 'unknown type')
    assert not list(work.glob('*.pth'))


def test_resume_needs_no_starting_checkpoint(dense_run, tmp_path, capsys):
    """``--resume`` (the latest checkpoint of the work dir) takes the
    structure and weights from that checkpoint, as ``--resume PATH`` does:
    a config's ``init_cfg`` file that is gone does not matter."""
    work = tmp_path / 'work'
    shutil.copytree(dense_run / 'work', work)
    (work / 'last_checkpoint').write_text(str(work / 'epoch_2.pth'))
    config = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, dense_run / 'cls'
    )
    code, err = run_tool(
        capsys,
        'train',
        [
            config,
            '--work-dir',
            work,
            '--resume',
            '--cfg-options',
            'train_cfg.max_epochs=3',
            'model.backbone.init_cfg.type=Pretrained',
            f'model.backbone.init_cfg.checkpoint={tmp_path}/gone.pth',
        ],
    )
    assert code == 0, err
    assert (work / 'epoch_3.pth').is_file()


def test_test_loads_strictly_and_checks_options_first(
    dense_run, tmp_path, capsys
):
    import torchvision

    resnet = tmp_path / 'resnet18.pth'
    torch.save(torchvision.models.resnet18().state_dict(), resnet)
    config = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, dense_run / 'cls'
    )
    work = ['--work-dir', tmp_path / 'work']
    code, err = run_tool(capsys, 'test', [config, resnet] + work)
    assert code == 2 and re.search(
        r'error: .*resnet18.pth does not fit this config '
        r'\(unexpected key in source state_dict: conv1.weight, .*'
        r'\(122 in all\); missing keys in source state_dict: '
        r'backbone.cls_token, .*; pass --non-strict',
        err,
    ), err
    metrics = tmp_path / 'metrics.json'
    assert (
        run_tool(
            capsys,
            'test',
            [config, resnet, '--non-strict', '--out-metrics', metrics] + work,
        )[0]
        == 0
    )
    assert 'accuracy/top1' in metrics.read_text()
    epoch_2 = dense_run / 'work' / 'epoch_2.pth'
    for options, message in (
        (['--out', tmp_path / 'predictions'], 'give a .pkl file'),
        (['--tta'], '--tta needs tta_model and tta_pipeline'),
        (['--work-dir', tmp_path], 'MMEngine writes the config it runs'),
    ):
        code, err = run_tool(capsys, 'test', [config, epoch_2] + options)
        assert code == 2 and message in err, err
        assert 'Traceback' not in err


def test_train_validates_first_when_asked(dense_run, tmp_path, capsys):
    from hetdpt_demo.results import val_records

    config = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, dense_run / 'cls'
    )
    code, err = run_tool(
        capsys,
        'train',
        [
            config,
            '--work-dir',
            tmp_path / 'work',
            '--validate-first',
            '--no-validate',
        ],
    )
    assert code == 2 and 'error: --validate-first needs validation' in err
    # From the trained checkpoint: the first validation (before any step)
    # is of the loaded weights, the second of the trained ones.
    epoch_2 = dense_run / 'work' / 'epoch_2.pth'
    code, err = run_tool(
        capsys,
        'train',
        [
            config,
            '--work-dir',
            tmp_path / 'work',
            '--validate-first',
            '--cfg-options',
            f'load_from={epoch_2}',
        ],
    )
    assert code == 0, err
    records = val_records(tmp_path / 'work')
    metrics = tmp_path / 'metrics.json'
    assert (
        run_tool(
            capsys,
            'test',
            [
                config,
                epoch_2,
                '--work-dir',
                tmp_path / 'test',
                '--out-metrics',
                metrics,
            ],
        )[0]
        == 0
    )
    assert len(records) == 2
    assert records[0]['accuracy/top1'] == pytest.approx(
        json.loads(metrics.read_text())['accuracy/top1']
    )


# ------------------------------------------------------- atomic writes
def test_mmengine_checkpoint_saves_are_atomic(tmp_path, monkeypatch):
    from mmengine.fileio import get_file_backend
    from mmengine.runner.checkpoint import save_checkpoint

    from hetdpt_mm.fileio import AtomicLocalBackend

    assert isinstance(get_file_backend(str(tmp_path)), AtomicLocalBackend)
    target = tmp_path / 'epoch_1.pth'
    target.write_bytes(b'previous')

    def fail(self, data):
        self.open('wb').write(data[:10])
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(type(target), 'write_bytes', fail)
    with pytest.raises(OSError, match='No space left'):
        save_checkpoint({'state_dict': {}}, str(target))
    monkeypatch.undo()
    assert target.read_bytes() == b'previous'
    assert [p.name for p in tmp_path.iterdir()] == ['epoch_1.pth']


def test_temp_files_of_killed_writers_are_removed(tmp_path):
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, '-c', 'import os; print(os.getpid())'],
        capture_output=True,
        text=True,
    ).stdout.strip()
    stale = tmp_path / f'.out.json.{dead}.abcd1234.tmp'
    live = tmp_path / f'.out.json.{os.getpid()}.abcd1234.tmp'
    stale.write_text('half')
    live.write_text('being written')
    atomic_write_text(tmp_path / 'out.json', '{}')
    assert not stale.exists() and live.exists()


def test_exclusive_output_is_not_replaced_by_a_concurrent_writer(tmp_path):
    from hetdpt_mm.fileio import atomic_path

    out = tmp_path / 'merged.pth'
    with (
        pytest.raises(FileExistsError, match='created by another process'),
        atomic_path(out, exclusive=True) as tmp,
    ):
        tmp.write_text('mine')
        out.write_text('theirs')  # the other run finished first
    assert out.read_text() == 'theirs'
    assert [p.name for p in tmp_path.iterdir()] == ['merged.pth']


def test_sigterm_removes_the_partial_output(tmp_path):
    import subprocess
    import sys

    script = tmp_path / 'writer.py'
    script.write_text(f"""
import os, signal
from hetdpt_mm.cli import run_reporting_errors
from hetdpt_mm.fileio import atomic_path

def write():
    with atomic_path({str(tmp_path / 'out.pth')!r}) as tmp:
        tmp.write_bytes(b'x' * 1000)
        os.kill(os.getpid(), signal.SIGTERM)

run_reporting_errors(write)
""")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 128 + 15, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ['writer.py']


def test_later_runners_of_a_process_get_their_own_experiment_name(
    dense_run, tmp_path
):
    """MMEngine hands a new runner the logger and visualizer of an existing
    experiment name (config name and start second): a later run's
    vis_data went into an earlier run's work dir (a deleted one, in CI)."""
    config = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, dense_run / 'cls'
    )
    cfg = Config.fromfile(config)
    assert experiment_name(cfg, 1) is None  # MMEngine's default
    assert experiment_name(cfg, 2) == 'dense_2'
    cfg.experiment_name = 'mine'
    assert experiment_name(cfg, 2) is None  # the config's own
    visualizers = []
    for index in range(2):  # two runners of one config in one second
        cfg = Config.fromfile(config)
        cfg.work_dir = str(tmp_path / f'work{index}')
        visualizers.append(build_runner(cfg).visualizer)
    assert visualizers[0] is not visualizers[1]
    assert [
        Path(v._vis_backends['LocalVisBackend']._save_dir).parents[1]
        for v in visualizers
    ] == [tmp_path / 'work0', tmp_path / 'work1']


def test_a_missing_teacher_is_named_the_teacher(tmp_path, capsys):
    """Issue 60 item 4: the distillation teacher's file, absent, is named
    as the teacher's with the way to train without it, also for a run that
    loads weights (its teacher still starts from that file)."""
    from helpers import REPO, write_tiny_config, write_tiny_deit_inputs

    files = write_tiny_deit_inputs(tmp_path)
    config = write_tiny_config(
        REPO / 'configs/hetdpt/deit-b_prune-10l_in1k.py',
        tmp_path,
        files['distilled'],
        teacher=files['dense'],
    )
    files['dense'].unlink()
    for extra in ([], ['--cfg-options', f'load_from={files["distilled"]}']):
        code, err = run_tool(
            capsys, 'train', [config, '--work-dir', tmp_path / 'w', *extra]
        )
        assert code == 2 and "the distillation teacher's weights" in err
        assert 'model.teacher=None model.teacher_checkpoint=None' in err
