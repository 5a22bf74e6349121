"""A training run keeps its work dir to itself: a second run into a live
work dir, and a fresh run into one holding an earlier run's checkpoints,
are refused before anything of theirs is written (tools/train.py)."""

import os
import re
import signal
import subprocess
import sys

import pytest
from helpers import DENSE_CONFIG, REPO, load_tool, small_config
from mmengine.config import Config

from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.errors import UsageError
from hetdpt_mm.work_dir import (
    TRAIN_LOCK_NAME,
    claim_work_dir,
    run_checkpoints,
    work_dir_lock,
)

#: Holds the training lock of the work dir argv[1] until killed.
HOLDER = """
import sys, time
from hetdpt_mm.work_dir import work_dir_lock
with work_dir_lock(sys.argv[1]):
    print('locked', flush=True)
    time.sleep(600)
"""


def train(capsys, *argv):
    code = load_tool('train').main([str(arg) for arg in argv])
    return code, capsys.readouterr().err


def test_a_live_work_dir_is_refused_until_its_run_ends(tmp_path, capsys):
    work = tmp_path / 'work'
    config = small_config(tmp_path / 'dense.py', DENSE_CONFIG, tmp_path)
    holder = subprocess.Popen(
        [sys.executable, '-c', HOLDER, str(work)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == 'locked\n'
        lock = (work / TRAIN_LOCK_NAME).read_text()
        assert re.fullmatch(
            rf'pid {holder.pid}, since '
            r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n',
            lock,
        )
        assert train(capsys, config, '--work-dir', work) == (
            2,
            f'error: work dir {work} is in use by another training run '
            f'({lock.strip()}); wait for it to end or choose another '
            '--work-dir\n',
        )
        assert [path.name for path in work.iterdir()] == [TRAIN_LOCK_NAME]
        assert (work / TRAIN_LOCK_NAME).read_text() == lock
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up: the OS unlocks
        holder.wait(timeout=60)
    with work_dir_lock(work):
        assert (
            (work / TRAIN_LOCK_NAME)
            .read_text()
            .startswith(f'pid {os.getpid()}, since ')
        )
    assert not (work / TRAIN_LOCK_NAME).exists()


def test_a_lock_file_removed_as_it_is_locked_is_made_anew(
    tmp_path, monkeypatch
):
    """A run that ends removes its lock file; one that opened the file
    just before locks it anew, not the removed file."""
    import fcntl

    flock, calls = fcntl.flock, []

    def removed_first(file, operation):
        if not calls:
            (tmp_path / TRAIN_LOCK_NAME).unlink()
        calls.append(operation)
        flock(file, operation)

    monkeypatch.setattr(fcntl, 'flock', removed_first)
    with work_dir_lock(tmp_path):
        assert (tmp_path / TRAIN_LOCK_NAME).read_text().startswith('pid ')
    assert len(calls) == 4 and not (tmp_path / TRAIN_LOCK_NAME).exists()


def test_only_rank_0_of_a_job_takes_the_lock(tmp_path, monkeypatch):
    cfg = Config(dict(work_dir=str(tmp_path), launcher='pytorch'))
    with work_dir_lock(tmp_path):  # rank 0 of the job trains
        monkeypatch.setenv('RANK', '1')
        with claim_work_dir(cfg, resume=False, overwrite=False):
            pass
        monkeypatch.setenv('RANK', '0')  # rank 0 of another job
        with (
            pytest.raises(
                UsageError, match='is in use by another training run'
            ),
            claim_work_dir(cfg, resume=False, overwrite=False),
        ):
            pass


def test_a_fresh_run_into_a_finished_work_dir_is_refused(tmp_path, capsys):
    work = tmp_path / 'work'
    (work / '20240101_120000').mkdir(parents=True)  # logs do not count
    outputs = {
        'epoch_2.pth': b'2',
        'epoch_10.pth': b'10',
        'epoch_1.pth': b'1',
        'last_checkpoint': b'epoch_10.pth',
        'dense_merged.pth': b'm',
    }
    for name, data in outputs.items():
        (work / name).write_bytes(data)
    assert [path.name for path in run_checkpoints(work)] == [
        'dense_merged.pth',
        'epoch_1.pth',
        'epoch_2.pth',
        'epoch_10.pth',
        'last_checkpoint',
    ]
    config = small_config(tmp_path / 'dense.py', DENSE_CONFIG, tmp_path)
    assert train(capsys, config, '--work-dir', work) == (
        2,
        f'error: work dir {work} already holds checkpoints of a run '
        '(dense_merged.pth, epoch_1.pth, epoch_2.pth, ... (5 in all)); pass '
        '--resume to continue it, --overwrite to start over, or choose '
        'another --work-dir\n',
    )
    assert train(
        capsys, config, '--work-dir', work, '--resume', '--overwrite'
    ) == (
        2,
        'error: argument --overwrite: not allowed with argument --resume\n',
    )
    assert {
        path.name: path.read_bytes()
        for path in work.iterdir()
        if path.is_file() and path.name != TRAIN_LOCK_NAME
    } == outputs


def test_overwrite_starts_the_run_over(tmp_path, capsys):
    from hetdpt_demo.data import make_classification

    make_classification(tmp_path / 'cls')
    work = tmp_path / 'work'
    work.mkdir()
    for name in ('epoch_1.pth', 'epoch_3.pth', 'dense_merged.pth'):
        (work / name).write_bytes(b'earlier run')
    (work / 'last_checkpoint').write_text(str(work / 'epoch_3.pth'))
    config = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, tmp_path / 'cls'
    )
    assert train(capsys, config, '--work-dir', work, '--overwrite')[0] == 0
    assert not (work / TRAIN_LOCK_NAME).exists()  # a finished run's
    # Nothing of the earlier run is left for a later --resume to pick up.
    assert [path.name for path in run_checkpoints(work)] == [
        'epoch_1.pth',
        'epoch_2.pth',
        'last_checkpoint',
    ]
    assert (work / 'last_checkpoint').read_text() == str(work / 'epoch_2.pth')
    assert load_checkpoint_file(work / 'epoch_1.pth')['meta']['epoch'] == 1


def test_a_test_run_writes_nothing_over_the_training_run(tmp_path, capsys):
    """tools/test.py into a training run's work dir replaced the run's
    config dump with its own (the demo's DETR dump then named the HetDPT+
    classifier as the detector's init_cfg): a test run's dump goes into its
    own log folder, beside the run's files."""
    from hetdpt_demo.data import make_classification

    make_classification(tmp_path / 'cls')
    work = tmp_path / 'work'
    config = small_config(
        tmp_path / 'dense.py', DENSE_CONFIG, tmp_path / 'cls'
    )
    code, err = train(capsys, config, '--work-dir', work)
    assert code == 0, err
    before = {
        path: path.read_bytes() for path in work.rglob('*') if path.is_file()
    }
    assert 'batch_size=7' not in (work / 'dense.py').read_text()
    code = load_tool('test').main(
        [
            config,
            str(work / 'epoch_2.pth'),
            '--work-dir',
            str(work),
            '--cfg-options',
            'test_dataloader.batch_size=7',
        ]
    )
    assert code == 0, capsys.readouterr().err
    after = {
        path: path.read_bytes() for path in work.rglob('*') if path.is_file()
    }
    assert {path: after[path] for path in before} == before
    (dump,) = [
        path for path in set(after) - set(before) if path.name == 'dense.py'
    ]
    assert dump.parent.parent == work and 'batch_size=7' in dump.read_text()
    for name in ('dense.py', 'last_checkpoint'):
        code = load_tool('test').main(
            [
                config,
                str(work / 'epoch_2.pth'),
                '--work-dir',
                str(tmp_path / 'test'),
                '--out-metrics',
                str(work / name),
            ]
        )
        assert (code, capsys.readouterr().err) == (
            2,
            f'error: output {work / name} is a file of the training run in '
            f'{work}; choose another path\n',
        )
    assert (work / 'dense.py').read_bytes() == before[work / 'dense.py']


PRUNE_CONFIG = REPO / 'configs/demo/vit-demo_digits_prune.py'
POINTS = REPO / 'tests/data/map_points_paper.csv'


def folder_state(folder):
    """Every file under ``folder`` with its bytes."""
    return {
        path: path.read_bytes() for path in folder.rglob('*') if path.is_file()
    }


def hooks_config(path, load_from, hooks):
    path.write_text(
        f'_base_ = [{str(PRUNE_CONFIG)!r}]\n'
        f'load_from = {str(load_from)!r}\n'
        f'custom_hooks = {hooks!r}\n'
    )
    return path


@pytest.mark.parametrize('hook', ['spec_file', 'merge', 'map_collect'])
def test_hook_outputs_never_replace_the_runs_inputs(tmp_path, capsys, hook):
    """Issue 59 item 2: a HetDPTPruneHook's spec_file over its MAP points
    and a MergeCheckpointHook's file over load_from ran and replaced both;
    MAPCollectHook's out_file is built the same way."""
    points = tmp_path / 'points.csv'
    points.write_bytes(POINTS.read_bytes())
    start = tmp_path / 'start_merged.pth'
    start.write_bytes(b'weights')
    prune = dict(
        type='HetDPTPruneHook', map_points=str(points), budget=1, stages=[1]
    )
    hooks = dict(
        spec_file=[dict(prune, spec_file=str(points))],
        merge=[
            prune,
            dict(
                type='MergeCheckpointHook', out_dir=str(tmp_path), name='start'
            ),
        ],
        map_collect=[dict(type='MAPCollectHook', out_file=str(start))],
    )[hook]
    config = hooks_config(tmp_path / 'run.py', start, hooks)
    before = folder_state(tmp_path)
    code, err = train(capsys, config, '--work-dir', tmp_path / 'work')
    assert code == 2 and 'same file as input' in err, err
    assert folder_state(tmp_path) == before
    assert not (tmp_path / 'work').exists()


def test_two_prune_hooks_are_refused_before_the_run(tmp_path, capsys):
    """Issue 59 item 9: two HetDPTPruneHooks kept one schedule state, and
    --resume was refused as if the settings had changed."""
    prune = dict(
        type='HetDPTPruneHook', map_points=str(POINTS), budget=1, stages=[1]
    )
    config = hooks_config(
        tmp_path / 'run.py', POINTS, [prune, dict(prune, budget=2)]
    )
    before = folder_state(tmp_path)
    code, err = train(capsys, config, '--work-dir', tmp_path / 'work')
    assert code == 2 and 'second HetDPTPruneHook' in err, err
    assert folder_state(tmp_path) == before
