"""Special files as inputs and outputs, the outputs of multi-output tools
checked together and written all or nothing, and bad numbers that are
`error:` lines at once; one strict JSON parser (a key given twice, nesting
depth) and one error wrapper (any exception is an ``error:`` line with
status 2) where user input enters (docs/advanced/reliability.md, *Bad
inputs*)."""

import errno
import json
import os
import re
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import REPO, load_tool

from hetdpt_benchmark.options import parse_cfg_options
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.cli import run_reporting_errors
from hetdpt_mm.errors import CheckpointError, UsageError
from hetdpt_mm.fileio import MAX_JSON_DEPTH, atomic_path, loads_json
from hetdpt_mm.models.token_merge import MAX_R, TokenMerge
from hetdpt_mm.pruning import load_points
from hetdpt_mm.spec import PruneSpec

PAPER_POINTS = REPO / 'tests' / 'data' / 'map_points_paper.csv'
SPEC = json.dumps(dict(attn_removed=[0, 2], act_removed=[2, 3]))
TINY_ARCH = '{"embed_dims": 48, "num_layers": 4, "num_heads": 3}'
#: tools/benchmark.py on a tiny depth-pruned ViT.
TINY_BENCHMARK = ('benchmark', 'backbone', '--arch', TINY_ARCH, '--spec', SPEC)
DIGITS_CONFIG = str(REPO / 'configs/demo/vit-demo_digits.py')
#: 200,000 brackets: Python's parser recursed into a RecursionError.
DEEP = '[' * 100000 + ']' * 100000
DEPTH_ERROR = f'nested deeper than {MAX_JSON_DEPTH} levels'


@pytest.fixture(scope='module')
def tools():
    return {
        name: load_tool(name)
        for name in (
            'merge_ckpt',
            'prune_width',
            'benchmark',
            'fit_map',
            'export',
            'test',
        )
    }


def run_tool(tools, capsys, name, *args):
    code = tools[name].main([str(a) for a in args])
    return code, capsys.readouterr().err


class Fifo:
    """A FIFO in ``folder``.  A reader that opens it (the defect: open
    blocks until a writer comes) is recorded in ``opened`` and released
    with an end of file, so that a regression fails instead of hanging."""

    def __init__(self, folder: Path):
        self.path = folder / 'fifo.pth'
        os.mkfifo(self.path)
        self.opened = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._release, daemon=True)
        self._thread.start()

    def _release(self):
        while not self._done.wait(0.05):
            try:  # succeeds only while a reader has it open
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            self.opened += 1
            os.close(fd)

    def close(self):
        self._done.set()
        self._thread.join()


@pytest.fixture
def fifo(tmp_path):
    made = Fifo(tmp_path)
    yield made
    made.close()


def test_checkpoints_that_are_fifos_are_refused_unread(
    tools, tmp_path, capsys, fifo
):
    out = tmp_path / 'out.pth'
    message = f'error: checkpoint {fifo.path} is a FIFO'
    runs = [
        ('merge_ckpt', fifo.path, out),
        (
            'prune_width',
            fifo.path,
            out,
            '--ratio',
            '0.3',
            '--importance',
            'magnitude',
        ),
        ('benchmark', 'backbone', '--checkpoint', fifo.path),
    ]
    for name, *args in runs:
        code, err = run_tool(tools, capsys, name, *args)
        assert code == 2 and err.startswith(message), (name, err)
    with pytest.raises(OSError):
        load_checkpoint_file(fifo.path, mmap=True)
    assert fifo.opened == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ['fifo.pth']


def test_a_link_to_dev_zero_is_refused_before_reading(tmp_path, monkeypatch):
    """A memory-mapped load of /dev/zero took all memory (19 GB)."""
    link = tmp_path / 'zero.pth'
    link.symlink_to('/dev/zero')

    def unreachable(*args, **kwargs):
        raise AssertionError('the file was read')

    # zipfile.is_zipfile reads /dev/zero to its (missing) end.
    monkeypatch.setattr(zipfile, 'is_zipfile', unreachable)
    monkeypatch.setattr(torch, 'load', unreachable)
    with pytest.raises(OSError, match='a character device'):
        load_checkpoint_file(link, mmap=True)


def test_spec_points_and_cost_files_that_are_fifos_are_named(
    tools, tmp_path, capsys, fifo
):
    with pytest.raises(OSError, match='prune spec file .* FIFO'):
        PruneSpec.coerce(str(fifo.path))
    checkpoint = tmp_path / 'in.pth'
    checkpoint.write_bytes(b'never read')
    runs = {
        '--spec file': ('merge_ckpt', checkpoint, tmp_path / 'o.pth')
        + ('--spec', fifo.path),
        'MAP points file': ('fit_map', fifo.path, '--depth', '12'),
        'measured cost file': ('fit_map', PAPER_POINTS, '--depth', '12')
        + ('--cost', fifo.path, '--speedup', '1.5'),
    }
    for what, args in runs.items():
        code, err = run_tool(tools, capsys, *args)
        assert code == 2 and err.startswith(
            f'error: {what} {fifo.path} is a FIFO'
        ), err
    assert fifo.opened == 0


def test_outputs_that_are_not_regular_files_are_never_replaced(
    tools, tmp_path, capsys, fifo
):
    """Even with --force (as root, the system's /dev/null would have been
    replaced by a regular file)."""
    null = tmp_path / 'null'
    null.symlink_to('/dev/null')
    folder = tmp_path / 'folder'
    folder.mkdir()
    for out, kind in (
        (null, 'a character device'),
        (fifo.path, 'a FIFO'),
        (folder, 'a directory'),
    ):
        code, err = run_tool(
            tools,
            capsys,
            'fit_map',
            PAPER_POINTS,
            '--depth',
            '12',
            '--save-fit',
            out,
            '--force',
        )
        assert code == 2 and err.startswith(f'error: output {out} is {kind}')
    with (
        pytest.raises(OSError),
        atomic_path(null) as tmp,
    ):  # MMEngine's saves
        tmp.write_bytes(b'checkpoint')
    assert os.readlink(null) == '/dev/null' and fifo.path.is_fifo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        'fifo.pth',
        'folder',
        'null',
    ]


def test_aliased_outputs_of_one_run_are_refused_before_any_work(
    tools, tmp_path, capsys
):
    fit, link = tmp_path / 'fit.json', tmp_path / 'link.json'
    link.symlink_to(fit.name)
    assert run_tool(
        tools,
        capsys,
        'fit_map',
        PAPER_POINTS,
        '--depth',
        '12',
        '--budget',
        '8',
        '--save-fit',
        fit,
        '--save-allocation',
        link,
    ) == (2, f'error: outputs {fit} and {link} are the same file\n')
    md, hard = tmp_path / 'bench.md', tmp_path / 'bench.json'
    md.write_text('old')
    os.link(md, hard)
    assert run_tool(
        tools,
        capsys,
        *TINY_BENCHMARK,
        '--json',
        hard,
        '--md',
        md,
        '--force',
    ) == (2, f'error: outputs {hard} and {md} are the same file\n')
    assert md.read_text() == 'old'
    source = tmp_path / 'in.pth'
    source.write_bytes(b'never read')
    same = tmp_path / 'widths.png'
    assert run_tool(
        tools,
        capsys,
        'prune_width',
        source,
        tmp_path / 'o.pth',
        '--ratio',
        '0.3',
        '--importance',
        'magnitude',
        '--report',
        same,
        '--plot',
        same,
    ) == (2, f'error: outputs {same} and {same} are the same file\n')
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        'bench.json',
        'bench.md',
        'in.pth',
        'link.json',
    ]


def test_an_output_folder_that_cannot_take_it_is_found_first(
    tools, tmp_path, capsys
):
    """On main the fit was written, then the allocation failed."""
    fit = tmp_path / 'fit.json'
    blocker = tmp_path / 'file'
    blocker.write_text('')
    args = [
        PAPER_POINTS,
        '--depth',
        '12',
        '--budget',
        '8',
        '--save-fit',
        fit,
        '--save-allocation',
    ]
    allocation = blocker / 'allocation.json'
    assert run_tool(tools, capsys, 'fit_map', *args, allocation) == (
        2,
        f'error: output {allocation}: {blocker} is not a directory\n',
    )
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / 'locked'
        locked.mkdir(mode=0o500)
        allocation = locked / 'allocation.json'
        assert run_tool(tools, capsys, 'fit_map', *args, allocation) == (
            2,
            f'error: output {allocation}: {locked} is not writable\n',
        )
    assert not fit.exists()


def test_a_full_disk_leaves_none_of_the_outputs_and_names_the_file(
    tools, tmp_path, capsys, monkeypatch
):
    fit, allocation = tmp_path / 'fit.json', tmp_path / 'allocation.json'
    fit.write_text('old fit')
    written = []

    def write_text(path, text, *args, **kwargs):
        if written:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(path)
        return Path.write_bytes(path, text.encode())

    monkeypatch.setattr(Path, 'write_text', write_text)
    assert run_tool(
        tools,
        capsys,
        'fit_map',
        PAPER_POINTS,
        '--depth',
        '12',
        '--budget',
        '8',
        '--save-fit',
        fit,
        '--save-allocation',
        allocation,
        '--force',
    ) == (
        2,
        f'error: [Errno 28] No space left on device while writing '
        f'{allocation}\n',
    )
    monkeypatch.undo()
    assert fit.read_text() == 'old fit'
    assert sorted(p.name for p in tmp_path.iterdir()) == ['fit.json']


def test_zero_and_nan_targets_are_argument_errors(tools, tmp_path, capsys):
    absent = tmp_path / 'absent.pth'
    for value in ('0', 'nan', '-2G'):
        assert run_tool(
            tools,
            capsys,
            'prune_width',
            absent,
            'o.pth',
            f'--target-macs={value}',
        ) == (
            2,
            f"error: argument --target-macs: MACs target '{value}'"
            ': give e.g. 2.4G, 2400M\n',
        )
    assert run_tool(
        tools,
        capsys,
        'export',
        'detr',
        'absent.py',
        absent,
        '--out',
        tmp_path / 'o.onnx',
        '--tolerance',
        'nan',
    ) == (
        2,
        "error: argument --tolerance: must be a positive number, got 'nan'\n",
    )


def test_duplicate_indices_are_found_in_linear_time():
    """200,000 indices took 39 s (a count per index)."""
    start = time.perf_counter()
    with pytest.raises(ValueError) as error:
        PruneSpec(200_000, [*range(200_000), 7, 7])
    assert time.perf_counter() - start < 5
    assert str(error.value) == 'attn_removed has duplicated indices [7]'


def test_a_repeated_points_column_is_refused(tmp_path):
    """csv.DictReader used the last of the two silently."""
    points = tmp_path / 'points.csv'
    points.write_text('a,t,accuracy,Accuracy\n1,1,81.8,0.5\n')
    with pytest.raises(ValueError) as error:
        load_points(points)
    assert (
        str(error.value) == f'{points}: the header repeats column "accuracy"'
    )


def test_integers_too_long_for_python_are_named(tools, tmp_path, capsys):
    """Python's own message for over 4300 digits names neither the input
    nor the value."""
    digits = '1' * 5000
    spec = f'{{"attn_removed": [{digits}]}}'
    checkpoint = tmp_path / 'in.pth'
    checkpoint.write_bytes(b'never read')
    runs = {
        '--spec': ('merge_ckpt', checkpoint, tmp_path / 'o.pth'),
        '--spec: prune spec': ('benchmark', 'backbone', '--arch', TINY_ARCH),
    }
    for source, args in runs.items():
        code, err = run_tool(tools, capsys, *args, '--spec', spec)
        assert code == 2 and err.startswith(f'error: {source}: '), err
        assert '5000 digits' in err, err
    with pytest.raises(ValueError, match='prune spec: .*5000 digits'):
        PruneSpec.coerce(spec.replace('{', '{"depth": 12, ', 1))


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / 'in.pth'
    torch.save({'state_dict': {'x': torch.zeros(2)}}, path)
    return path


def test_a_key_given_twice_is_refused(tmp_path, capsys, tools):
    """fit_map took the last of two "accuracy" keys and fitted zeros."""
    with pytest.raises(ValueError, match='points: .*"accuracy" given more'):
        loads_json('{"accuracy": 71.2, "accuracy": 0}', 'points')
    points = tmp_path / 'points.json'
    for text in (
        '[{"a": 1, "t": 1, "accuracy": 71.2, "accuracy": 0}]',
        '{"points": [{"a": 1, "t": 1, "accuracy": 71.2}], "points": []}',
    ):
        points.write_text(text)
        code, err = run_tool(tools, capsys, 'fit_map', points, '--depth', 12)
        assert code == 2 and err.startswith(f'error: {points}: '), err
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
    points = tmp_path / 'points.csv'
    points.write_text('a,t,accuracy\n1,1,81.8\n0.5,0.5,70\n')
    width = ('prune_width', checkpoint, out, '--ratio', 0.5, '--importance')
    runs = {
        '--spec': ('merge_ckpt', checkpoint, out, '--spec', DEEP),
        f'--spec file {deep}': ('merge_ckpt', checkpoint, out, '--spec', deep),
        '--spec: prune spec': ('benchmark', 'backbone', '--spec', DEEP),
        'arch': width + ('magnitude', '--arch', DEEP),
        f'measured cost file {deep}': ('fit_map', points, '--depth', 12)
        + ('--cost', deep),
        f'{deep}': ('fit_map', deep, '--depth', 12),
    }
    for source, args in runs.items():
        code, err = run_tool(tools, capsys, *args)
        assert code == 2 and err.startswith(f'error: {source}: '), err
        assert DEPTH_ERROR in err, err
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
        *TINY_BENCHMARK,
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
    with pytest.raises(ValueError, match='token_merge r=1000'):
        TokenMerge.coerce(dict(r=10**400, schedule='decreasing'))
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
        'error: OverflowError: int too large to convert to float '
        '(HETDPT_TRACEBACK=1 shows where)\n'
    )
    monkeypatch.setenv('HETDPT_TRACEBACK', '1')
    assert run_reporting_errors(overflow) == 2
    err = capsys.readouterr().err
    assert err.startswith('Traceback') and err.endswith(
        'error: OverflowError: int too large to convert to float\n'
    )


def test_an_exception_raised_in_a_toolbox_shows_its_traceback(capsys):
    """Issue 60 item 8: a toolbox's own error (here MMEngine's registry)
    is the user's lead: its traceback comes before the error line; one of
    ours (a ValueError with its fix) stays a line."""
    from mmengine.registry import Registry

    def build_unknown():
        Registry('demo').build(dict(type='NoSuchModule'))

    assert run_reporting_errors(build_unknown) == 2
    err = capsys.readouterr().err
    assert err.startswith('Traceback') and 'mmengine/registry' in err
    assert err.splitlines()[-1].startswith('error: NoSuchModule')

    def ours():
        raise ValueError('bad spec; give --spec')

    assert run_reporting_errors(ours) == 2
    assert capsys.readouterr().err == 'error: bad spec; give --spec\n'

    def ours_through_a_registry():  # which re-raises it with its name
        from mmpretrain.registry import MODELS

        MODELS.build(dict(type='HetDPTViT', arch='deit-huge'))

    assert run_reporting_errors(ours_through_a_registry) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and err.count('\n') == 1, err


def test_tools_give_only_fixes_that_help(tools, tmp_path, capsys):
    """tools/test.py said "pass --non-strict" where it cannot help, and
    "does not exist" for /dev/zero; merge_ckpt said "checkpoint" for the
    file it read."""
    work = ['--work-dir', tmp_path / 'work']
    code, err = run_tool(
        tools, capsys, 'test', DIGITS_CONFIG, '/dev/zero', *work
    )
    assert code == 2 and 'checkpoint /dev/zero is a character device' in err
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


def test_a_dangling_link_is_never_replaced(
    tools, tmp_path, capsys, checkpoint
):
    link = tmp_path / 'dangling.onnx'
    link.symlink_to(tmp_path / 'missing.onnx')
    config = tmp_path / 'config.py'
    config.write_text('model = dict()\n')
    for force in ((), ('--force',)):
        code, err = run_tool(
            tools,
            capsys,
            'export',
            'backbone',
            config,
            checkpoint,
            '--out',
            link,
            *force,
        )
        assert code == 2 and f'{link} is a symbolic link' in err, err
    assert link.is_symlink() and os.readlink(link) == str(
        tmp_path / 'missing.onnx'
    )


def stride_zero_file(path: Path) -> Path:
    """A few KB whose ViT tensors claim gigabytes (width 32,768 on one
    element of storage)."""
    width = 32768
    state = {
        'pos_embed': torch.zeros(1).expand(1, 65, width),
        'patch_embed.proj.weight': torch.zeros(1).expand(width, 3, 4, 4),
        'blocks.0.mlp.fc1.weight': torch.zeros(1).expand(4 * width, width),
    }
    torch.save({'state_dict': state}, path)
    return path


def deflated_file(path: Path) -> Path:
    """torch.save's zip with its entries deflated: 8 MB of zeros in a few
    KB (a zip bomb on a small scale)."""
    plain = path.with_suffix('.plain')
    torch.save({'state_dict': {'x': torch.zeros(1 << 21)}}, plain)
    with (
        zipfile.ZipFile(plain) as source,
        zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as target,
    ):
        for entry in source.infolist():
            target.writestr(entry.filename, source.read(entry))
    plain.unlink()
    return path


@pytest.mark.parametrize(
    'make, claim',
    [
        (stride_zero_file, r'state_dict\.\S+ overlaps its storage'),
        (deflated_file, r'zip entries unpack to \d+'),
    ],
)
def test_what_a_file_claims_is_bounded_by_its_size(
    tools, tmp_path, capsys, make, claim
):
    """A stride-0 file made merge_ckpt / prune_width allocate 12.9 GB, a
    deflated one inflated 1000x before any check: both are refused when
    read, before any tensor is materialised."""
    path = make(tmp_path / 'claims.pth')
    assert path.stat().st_size < 64 << 10
    message = f'{path}: {claim}'
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint_file(path)
    for args in (
        ('merge_ckpt', path, tmp_path / 'merged.pth'),
        ('prune_width', path, tmp_path / 'plus.pth', '--ratio', '0.3')
        + ('--importance', 'magnitude'),
    ):
        code, err = run_tool(tools, capsys, *args)
        assert code == 2 and re.match(f'error: .*{message}', err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ['claims.pth']


@pytest.mark.parametrize(
    'value, word',
    [('NaN', 'finite'), ('[1, inf]', 'finite'), (DEEP, 'nests deeper')],
)
def test_benchmark_cfg_options_are_read_as_train_reads_them(
    tools, tmp_path, capsys, value, word
):
    """Issue 59 item 7: only ``{...}`` values went through the strict
    parser; ``alpha=NaN`` was taken and deep nesting was a RecursionError."""
    with pytest.raises(UsageError, match=word):
        parse_cfg_options([f'model.backbone.alpha={value}'], ['dense'])
    out = tmp_path / 'bench.json'
    config = REPO / 'configs/detr_deit_b_dense.py'
    code, err = run_tool(
        tools,
        capsys,
        'benchmark',
        'detr',
        '--config',
        f'dense={config}',
        '--cfg-options',
        f'model.backbone.alpha={value}',
        '--json',
        out,
    )
    assert code == 2 and word in err and 'Recursion' not in err, err
    assert list(tmp_path.iterdir()) == []
