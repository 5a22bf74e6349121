"""Where user input enters the tools: one strict JSON parser (a key given
twice, nesting depth), one error wrapper (any exception is an ``error:``
line with status 2), options given 0 taken as values, links never
replaced without ``--force`` (docs/advanced/reliability.md, *One door*)."""

import json
import os

import pytest
import torch
from helpers import REPO, load_tool

from hetdpt_mm.cli import run_reporting_errors
from hetdpt_mm.fileio import MAX_JSON_DEPTH, loads_json
from hetdpt_mm.models.token_merge import MAX_R, TokenMerge
from hetdpt_mm.pruning import load_points

TINY_ARCH = '{"embed_dims": 48, "num_layers": 4, "num_heads": 3}'
DIGITS_CONFIG = str(REPO / 'configs/demo/vit-demo_digits.py')
#: 200,000 brackets: Python's parser recursed into a RecursionError.
DEEP = '[' * 100000 + ']' * 100000
DEPTH_ERROR = (
    f'JSON nested deeper than {MAX_JSON_DEPTH} levels; no input here '
    'nests more than a few'
)


@pytest.fixture(scope='module')
def tools():
    return {
        name: load_tool(name)
        for name in ('merge_ckpt', 'prune_width', 'benchmark', 'fit_map')
        + ('export', 'test')
    }


def run_tool(tools, capsys, name, *args):
    code = tools[name].main([str(a) for a in args])
    return code, capsys.readouterr().err


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / 'in.pth'
    torch.save({'state_dict': {'x': torch.zeros(2)}}, path)
    return path


def test_a_key_given_twice_is_refused(tmp_path, capsys, tools):
    """fit_map took the last of two "accuracy" keys and fitted zeros."""
    with pytest.raises(ValueError) as error:
        loads_json('{"accuracy": 71.2, "accuracy": 0}', 'points')
    assert str(error.value) == (
        'points: key "accuracy" given more than once in one object; give '
        'each key once'
    )
    points = tmp_path / 'points.json'
    for text in (
        '[{"a": 1, "t": 1, "accuracy": 71.2, "accuracy": 0}]',
        '{"points": [{"a": 1, "t": 1, "accuracy": 71.2}], "points": []}',
    ):
        points.write_text(text)
        code, err = run_tool(tools, capsys, 'fit_map', points, '--depth', 12)
        assert code == 2 and err.startswith(f'error: {points}: key "'), err
        assert 'given more than once' in err


def test_a_points_csv_with_accuracy_and_acc_is_refused(tmp_path):
    points = tmp_path / 'points.csv'
    points.write_text('a,t,accuracy,acc\n1,1,81.8,0.5\n0.5,0.5,70,0.4\n')
    with pytest.raises(ValueError) as error:
        load_points(points)
    assert str(error.value) == (
        f"{points}: columns 'accuracy' and 'acc' both give the accuracy; "
        'keep one'
    )


def test_deep_json_is_an_error_at_every_door(
    tools, tmp_path, capsys, checkpoint
):
    deep = tmp_path / 'deep.json'
    deep.write_text(DEEP)
    out = tmp_path / 'out.pth'
    assert run_tool(
        tools, capsys, 'merge_ckpt', checkpoint, out, '--spec', DEEP
    ) == (2, f'error: --spec: {DEPTH_ERROR}\n')
    assert run_tool(
        tools, capsys, 'merge_ckpt', checkpoint, out, '--spec', deep
    ) == (2, f'error: --spec file {deep}: {DEPTH_ERROR}\n')
    assert run_tool(
        tools, capsys, 'benchmark', 'backbone', '--spec', DEEP
    ) == (2, f'error: --spec: prune spec: {DEPTH_ERROR}\n')
    assert run_tool(
        tools,
        capsys,
        'prune_width',
        checkpoint,
        out,
        '--ratio',
        0.5,
        '--importance',
        'magnitude',
        '--arch',
        DEEP,
    ) == (2, f'error: arch: {DEPTH_ERROR}\n')
    points = tmp_path / 'points.csv'
    points.write_text('a,t,accuracy\n1,1,81.8\n0.5,0.5,70\n')
    assert run_tool(
        tools, capsys, 'fit_map', points, '--depth', 12, '--cost', deep
    ) == (2, f'error: measured cost file {deep}: {DEPTH_ERROR}\n')
    assert run_tool(tools, capsys, 'fit_map', deep, '--depth', 12) == (
        2,
        f'error: {deep}: {DEPTH_ERROR}\n',
    )
    assert not out.exists()
    # Depth counts brackets, not brackets inside strings.
    assert loads_json(json.dumps({'name': '[' * 1000}), 'x') == {
        'name': '[' * 1000
    }


@pytest.mark.parametrize('option', ['--repeats', '--batch-size'])
def test_options_given_0_are_values(tools, tmp_path, capsys, option):
    """0 was "unset": 5 repeats ran while the JSON's command said 0."""
    out = tmp_path / 'bench.json'
    code, err = run_tool(
        tools,
        capsys,
        'benchmark',
        'backbone',
        '--arch',
        TINY_ARCH,
        '--spec',
        '{"attn_removed": [0], "act_removed": [2]}',
        '--iters',
        1,
        option,
        0,
        '--json',
        out,
    )
    assert (code, err) == (2, f'error: {option} must be >= 1\n')
    assert not out.exists()


def test_a_huge_token_merge_r_is_refused():
    """r=10**400 with a schedule was an OverflowError traceback."""
    with pytest.raises(ValueError) as error:
        TokenMerge.coerce(dict(r=10**400, schedule='decreasing'))
    assert str(error.value).startswith(
        f'token_merge r must be an integer from 0 to {MAX_R} or a list of '
        'them, got 1000000000'
    )
    assert TokenMerge.coerce(dict(r=MAX_R, schedule='decreasing')).per_block(
        12
    )


def test_any_exception_is_an_error_line(capsys, monkeypatch):
    """The one wrapper of every tool: an exception no check anticipated
    is an ``error:`` line too, with its type; its traceback on request."""

    def overflow():
        raise OverflowError('int too large to convert to float')

    assert run_reporting_errors(overflow) == 2
    assert capsys.readouterr().err == (
        'error: OverflowError: int too large to convert to float\n'
    )
    monkeypatch.setenv('HETDPT_TRACEBACK', '1')
    assert run_reporting_errors(overflow) == 2
    err = capsys.readouterr().err
    assert err.startswith('Traceback') and err.endswith(
        'error: OverflowError: int too large to convert to float\n'
    )


def test_tools_give_only_fixes_that_help(tools, tmp_path, capsys):
    """tools/test.py said "pass --non-strict" where it cannot help, and
    "does not exist" for /dev/zero; merge_ckpt said "checkpoint" for the
    file it read."""
    work = ['--work-dir', tmp_path / 'work']
    assert run_tool(
        tools, capsys, 'test', DIGITS_CONFIG, '/dev/zero', *work
    ) == (
        2,
        'error: checkpoint /dev/zero is not a regular file '
        '(a character device)\n',
    )
    truncated = tmp_path / 'truncated.pth'
    torch.save({'state_dict': {'x': torch.zeros(1000)}}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:500])

    class Payload:
        def __reduce__(self):
            return (os.getpid, ())

    unsafe = tmp_path / 'unsafe.pth'
    torch.save({'state_dict': {}, 'meta': Payload()}, unsafe)
    for path in (truncated, unsafe):
        code, err = run_tool(tools, capsys, 'test', DIGITS_CONFIG, path, *work)
        assert code == 2 and err.startswith('error: ') and str(path) in err
        assert '--non-strict' not in err, err
    damaged = tmp_path / 'damaged.pth'
    torch.save(
        {
            'state_dict': {'backbone.x': torch.zeros(2)},
            'meta': {'hetdpt': {'forn': 1}},
        },
        damaged,
    )
    code, err = run_tool(
        tools, capsys, 'merge_ckpt', damaged, tmp_path / 'out.pth'
    )
    assert code == 2 and err.startswith(f'error: {damaged}: '), err


def test_a_dangling_link_is_not_replaced_without_force(
    tools, tmp_path, capsys, checkpoint
):
    link = tmp_path / 'dangling.onnx'
    link.symlink_to(tmp_path / 'missing.onnx')
    config = tmp_path / 'config.py'
    config.write_text('model = dict()\n')
    assert run_tool(
        tools, capsys, 'export', 'backbone', config, checkpoint, '--out', link
    ) == (
        2,
        f'error: output {link} already exists; pass --force to replace it\n',
    )
    assert link.is_symlink() and os.readlink(link) == str(
        tmp_path / 'missing.onnx'
    )
