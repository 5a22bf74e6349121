"""The end-to-end demo (tools/demo.py): the --quick variant runs every
stage as a user would and writes its report; bad options and saved states
are refused before anything is written or deleted; its jobs die with it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, load_tool
from mmengine.config import Config

from hetdpt_demo.settings import (
    CONFIGS,
    STATE_FILE,
    STATE_VERSION,
    DemoOptions,
)
from hetdpt_demo.stages import STAGE_OUTPUTS, STAGES, Demo


def run_demo(*args, timeout=900):
    result = subprocess.run(
        [sys.executable, str(REPO / 'tools' / 'demo.py'), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.fixture(scope='module')
def quick_run(tmp_path_factory):
    """One ``--quick`` run into a temporary work dir and data root."""
    root = tmp_path_factory.mktemp('demo')
    work, data = root / 'demo', root / 'data'
    code, output = run_demo(
        '--quick', '--threads', 1, '--work-dir', work, '--data-root', data
    )
    assert code == 0, output[-6000:]
    return work, data


def snapshot(path):
    """Every file and folder under ``path`` with its content."""
    return {
        str(p.relative_to(path)): p.read_bytes() if p.is_file() else None
        for p in sorted(path.rglob('*'))
    }


def test_quick_demo_reports_every_claim(quick_run):
    work, _ = quick_run
    summary = json.loads((work / 'summary.json').read_text())
    results, verdicts = summary['results'], summary['verdicts']
    report = (work / 'report.md').read_text()
    for heading in (
        '## Summary',
        '## The budget of 2',
        '## MAP',
        '## Fig. 8',
        '## Commands',
    ):
        assert heading in report
    # MAP's pick, each type alone and no removal, one seed each.
    splits = {tuple(s['counts']): s for s in results['splits']}
    assert {(2, 0), (0, 2), (0, 0)} <= set(splits)
    assert 'MAP' in splits[tuple(results['map']['pick'])]['names']
    assert all(len(s['accuracy']) == 1 for s in splits.values())
    assert 'trained_to_end' in verdicts['splits']
    # Fig. 8: both models without and with each method.
    points = {(p['model'], p['method']) for p in results['fig8']}
    assert points == {
        (model, method)
        for model in ('dense', 'hetdpt')
        for method in ('none', 'tome', 'gtp')
    }
    assert set(verdicts['fig8']['methods']) == {'tome', 'gtp'}
    for name in ('splits.png', 'fig8.png', 'map/map_fit.png'):
        assert (work / name).stat().st_size > 0
    # The merged model is the gated one's function.
    assert results['main']['merged'] == results['main']['gated']
    state = json.loads((work / STATE_FILE).read_text())
    assert state['finished'] == list(STAGES)
    assert len(summary['run']['commands']) == len(state['commands']) > 10


def test_resume_runs_only_the_report_again(quick_run):
    work, data = quick_run
    before = json.loads((work / 'summary.json').read_text())['results']
    code, output = run_demo(
        '--quick',
        '--threads',
        1,
        '--work-dir',
        work,
        '--data-root',
        data,
        '--resume',
    )
    assert code == 0, output[-3000:]
    assert output.count('done in an earlier run, skipped') == 7
    after = json.loads((work / 'summary.json').read_text())['results']
    assert after == before


def test_the_configs_set_the_hooks_the_demo_addresses():
    """The demo sets ``custom_hooks.0.*``: the first hook must be the one
    it means, and every config the same backbone."""
    hooks = dict(map='MAPCollectHook', prune='HetDPTPruneHook')
    for name, path in CONFIGS.items():
        cfg = Config.fromfile(REPO / path)
        assert cfg.model.backbone.arch['num_layers'] == 8
        assert cfg.model.backbone.arch['embed_dims'] == 48
        if name in hooks:
            assert cfg.custom_hooks[0]['type'] == hooks[name]


@pytest.mark.parametrize(
    'args, message',
    [
        (['--budget', '100'], '--budget 100'),
        (['--budget', '8'], '--budget 8'),
        (['--seeds', '1', '1'], '--seeds'),
        (['--seeds', '-1'], '--seeds'),
        (['--jobs', '0'], '--jobs'),
        (['--data-root', 'data root'], 'data root'),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    tmp_path, capsys, args, message
):
    work = tmp_path / 'work'
    code = load_tool('demo').main(['--work-dir', str(work), *args])
    assert code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def write_state(work, finished, **settings):
    options = DemoOptions(REPO, work, work.parent / 'data', quick=True)
    state = dict(
        version=STATE_VERSION,
        settings=dict(options.state_settings(), **settings),
        finished=finished,
        seconds={name: [1.0, 2.0] for name in finished},
        commands=['python tools/train.py ...'],
    )
    work.mkdir(parents=True, exist_ok=True)
    (work / STATE_FILE).write_text(json.dumps(state))
    for name in finished:
        if name in STAGE_OUTPUTS:
            (work / STAGE_OUTPUTS[name]).parent.mkdir(
                parents=True, exist_ok=True
            )
            (work / STAGE_OUTPUTS[name]).write_text('')
    return state


@pytest.mark.parametrize(
    'text, problem',
    [
        ('garbage', 'not valid JSON'),
        ('[1, 2]', 'not an object with the keys'),
        ('{"version": 9, "version": 9}', 'given more than once'),
    ],
)
def test_a_bad_state_deletes_nothing(tmp_path, capsys, text, problem):
    """A work dir whose state is not a demo state is not the demo's: its
    folders named like the demo's outputs stay, with or without --resume."""
    work = tmp_path / 'work'
    (work / 'dense').mkdir(parents=True)
    (work / 'dense' / 'mine.py').write_text('mine')
    (work / STATE_FILE).write_text(text)
    before = snapshot(tmp_path)
    for resume in ([], ['--resume']):
        code = load_tool('demo').main(
            ['--quick', '--work-dir', str(work), *resume]
        )
        assert code == 2 and problem in capsys.readouterr().err
        assert snapshot(tmp_path) == before


def test_a_state_of_finished_stages_without_outputs_is_refused(
    tmp_path, capsys
):
    work = tmp_path / 'work'
    write_state(work, list(STAGES))
    (work / STAGE_OUTPUTS['fig8']).unlink()
    before = snapshot(tmp_path)
    args = ['--quick', '--work-dir', str(work), '--resume']
    args += ['--data-root', str(tmp_path / 'data')]
    assert load_tool('demo').main(args) == 2
    assert 'fig8/bench-none.json' in capsys.readouterr().err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    'change, kept',
    [
        (dict(), ['dense', 'map', 'fit', 'prune']),
        (dict(budget=1), ['dense', 'map']),
        (dict(seeds=[0, 1]), ['dense', 'map', 'fit']),
    ],
)
def test_resume_redoes_the_stages_a_changed_setting_reaches(
    tmp_path, change, kept
):
    """A resumed run with a corrected --budget (or seeds) keeps what came
    before the first stage that reads it."""
    work = tmp_path / 'work'
    write_state(work, ['data', 'dense', 'map', 'fit', 'prune'])
    options = DemoOptions(
        REPO,
        work,
        tmp_path / 'data',
        quick=True,
        resume=True,
        budget=change.get('budget'),
        seeds=tuple(change.get('seeds', ())) or None,
    )
    demo = Demo(options)
    demo.prepare()
    assert demo.finished == kept


def test_resume_with_another_mode_is_refused(tmp_path, capsys):
    work = tmp_path / 'work'
    write_state(work, ['data', 'dense'], quick=False)
    before = snapshot(tmp_path)
    args = ['--quick', '--work-dir', str(work), '--resume']
    assert load_tool('demo').main(args) == 2
    assert 'used other settings' in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_a_new_run_replaces_only_the_demos_outputs(tmp_path):
    work = tmp_path / 'work'
    write_state(work, ['data', 'dense'])
    (work / 'notes.txt').write_text('mine')
    Demo(DemoOptions(REPO, work, tmp_path / 'data', quick=True)).prepare()
    assert sorted(p.name for p in work.iterdir()) == ['notes.txt']


def test_jobs_die_with_the_demo(tmp_path):
    """SIGKILL of the demo (as a timeout sends) ends its running jobs."""
    pid_file = tmp_path / 'child.pid'
    child = (
        'import os, time; '
        f'open({str(pid_file)!r}, "w").write(str(os.getpid())); '
        'time.sleep(120)'
    )
    parent = (
        'from pathlib import Path; from hetdpt_demo.jobs import Jobs; '
        f'Jobs(Path({str(REPO)!r}), Path({str(tmp_path)!r}), 1, 1, print)'
        f'.run([[("sleep", ["-c", {child!r}])]])'
    )
    demo = subprocess.Popen(
        [sys.executable, '-c', parent],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    deadline = time.monotonic() + 60
    while not pid_file.is_file() or not pid_file.read_text():
        assert time.monotonic() < deadline and demo.poll() is None
        time.sleep(0.1)
    job = int(pid_file.read_text())
    demo.send_signal(signal.SIGKILL)
    demo.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f'/proc/{job}') and time.monotonic() < deadline:
        time.sleep(0.1)
    status = Path(f'/proc/{job}/stat')
    assert not status.exists() or ' Z ' in status.read_text()


def test_the_default_data_root_gives_jobs_no_empty_cfg_options(
    tmp_path, monkeypatch
):
    """`make demo` (the data in data/demo, no option) passed a bare
    --cfg-options, which tools/train.py refuses."""
    from hetdpt_demo.stages import Demo

    monkeypatch.chdir(REPO)
    tool = load_tool('demo')
    work = ['--work-dir', str(tmp_path / 'work')]
    default = Demo(tool.parse_args(work))
    assert default.options_for('dense') == []
    assert default.options_for('dense', 'a=1') == ['--cfg-options', 'a=1']
    moved = Demo(tool.parse_args(work + ['--data-root', str(tmp_path)]))
    assert moved.options_for('dense')[0] == '--cfg-options'
