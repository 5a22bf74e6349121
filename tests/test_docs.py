"""The docs (docs/, README.md, CHANGELOG.md): the Sphinx site builds in strict
mode, README's links resolve, pages stay short and tell no project history,
and every command block a guide marks runnable runs.

A guide marks a fenced block it asks users to run with an HTML comment on the
line before it, ``<!-- runnable -->`` or ``<!-- runnable: WORD ... -->``
(words split as the shell does):

* ``tiny`` appends :data:`TINY`'s arguments to every command line of those
  tools (``python tools/NAME.py ...``): a few images for training and
  testing, one small batch for the benchmark;
* ``OLD=>NEW`` replaces the text ``OLD`` of the block by ``NEW`` first (a
  shorter schedule's checkpoint name, a smaller input the model needs);
* any other word is appended after :data:`TINY`'s arguments (with ``tiny``):
  more ``--cfg-options`` for ``train.py`` and ``test.py``, more flags for
  the benchmark.

Blocks run with bash in one scratch directory (``configs``, ``tools`` and
``tests`` linked in; ``python`` is this interpreter, with the tools run by a
:mod:`warm_tools` server that has imported the package), in the site's page
order
(docs/index.md), so that a later guide uses what an earlier one made, as a
reader following them would.
"""

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_tools
from mmengine.config import Config
from myst_parser.mdit_to_docutils.base import default_slugify

import hetdpt_mm

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / 'docs'
#: Dated records of how figures were obtained; the guides do not depend on
#: them, and they may tell history.
NOTES = DOCS / 'notes'
PAGES = sorted(DOCS.rglob('*.md'))
GUIDES = [page for page in PAGES if NOTES not in page.parents]

#: What ``tiny`` appends to each tool's command lines.
TINY_DATA = (
    '--cfg-options train_dataloader.dataset.indices=32 '
    'val_dataloader.dataset.indices=32 '
    'test_dataloader.dataset.indices=32'
)
TINY = {
    'train': TINY_DATA,
    'test': TINY_DATA,
    'benchmark': '--batch-size 1 --img-size 32 --warmup 0 --repeats 2',
}
TOOL_LINE = re.compile(r'^python tools/(?P<tool>\w+)\.py ')
REPLACE = '=>'

MARKER = re.compile(
    r'^<!-- runnable(?:: (?P<words>[^\n]*?))? -->\n'
    r'```[a-z]*\n(?P<body>.*?)^```$',
    re.M | re.S,
)

#: Phrases of how the project was made (runs, sessions, the machine's load):
#: they belong in CHANGELOG.md or docs/notes/.
HISTORY = re.compile(
    r'\bsessions?\b|\bwe (?:tried|changed|dropped|kept)\b|'
    r'load average (?:of |at |about |below |was |\d)|\bpredates?\b|'
    r'other (?:agents|engineers)|while other jobs ran|tried and dropped|'
    r'no longer',
    re.I,
)

LINK = re.compile(r'\]\((?!https?://|mailto:)([^)\s]+)\)')


def test_docs_site_builds_strictly(tmp_path):
    """A broken link, a missing page, a moved heading anchor or a page left
    out of the toctree is an error."""
    result = subprocess.run(
        [
            sys.executable,
            '-m',
            'sphinx',
            '-W',
            '--keep-going',
            '-n',
            '-q',
            '-b',
            'dummy',
            '-d',
            str(tmp_path / 'doctrees'),
            str(DOCS),
            str(tmp_path / 'out'),
        ],
        capture_output=True,
        text=True,
    )
    assert (result.returncode, result.stderr) == (0, '')


def anchors(page: Path) -> set:
    """The heading anchors myst gives ``page`` (GitHub's slugs)."""
    text = re.sub(r'^```.*?^```', '', page.read_text(), flags=re.M | re.S)
    return {
        default_slugify(m.group(1).strip())
        for m in re.finditer(r'^#{1,6} (.+)$', text, re.M)
    }


@pytest.mark.parametrize('name', ['README.md', 'CHANGELOG.md'])
def test_top_level_links_resolve(name):
    """README and CHANGELOG are not part of the site: their relative links
    and the anchors they name are checked here."""
    broken = []
    for target in LINK.findall((ROOT / name).read_text()):
        path, _, anchor = target.partition('#')
        file = ROOT / path
        if not file.exists() or anchor and anchor not in anchors(file):
            broken.append(target)
    assert broken == []


def test_pages_are_short():
    lengths = {
        str(page.relative_to(ROOT)): len(page.read_text().splitlines())
        for page in PAGES
    }
    assert {page: n for page, n in lengths.items() if n > 400} == {}
    assert len((ROOT / 'README.md').read_text().splitlines()) <= 120


@pytest.mark.parametrize(
    'page',
    [ROOT / 'README.md', *GUIDES],
    ids=lambda page: str(page.relative_to(ROOT)),
)
def test_page_tells_no_project_history(page):
    lines = page.read_text().splitlines()
    assert [
        f'{n}: {line}'
        for n, line in enumerate(lines, 1)
        if HISTORY.search(line)
    ] == []


DOC_PATH = re.compile(r'\bdocs/[\w/.-]+\.md\b')
CHECKPOINT = re.compile(
    r'\bwork_dirs/(?P<config>[\w.-]+)/epoch_(?P<epoch>\d+)\.pth'
)


@pytest.mark.parametrize(
    'page',
    [ROOT / 'README.md', *GUIDES],
    ids=lambda page: str(page.relative_to(ROOT)),
)
def test_named_pages_and_checkpoints_exist(page):
    """A page named in the text exists, and an ``epoch_N.pth`` of a
    project config's work dir is one its schedule writes."""
    text = page.read_text()
    missing = [
        path for path in DOC_PATH.findall(text) if not (ROOT / path).exists()
    ]
    unwritten = []
    for match in CHECKPOINT.finditer(text):
        configs = list((ROOT / 'configs').rglob(f'{match["config"]}.py'))
        if not configs:
            continue  # a work dir the reader names
        max_epochs = Config.fromfile(configs[0]).train_cfg.max_epochs
        if int(match['epoch']) > max_epochs:
            unwritten.append(f'{match[0]} (max_epochs={max_epochs})')
    assert (missing, unwritten) == ([], [])


def test_version_is_the_changelog_newest():
    text = (ROOT / 'CHANGELOG.md').read_text()
    newest = re.search(
        r'^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$', text, re.M
    )
    assert newest and newest.group(1) == hetdpt_mm.__version__


def site_order(page: Path):
    """Where ``page`` stands in the site's toctrees (docs/index.md)."""
    entries = re.findall(r'^([\w/]+)$', (DOCS / 'index.md').read_text(), re.M)
    name = str(page.relative_to(DOCS).with_suffix(''))
    return entries.index(name) if name in entries else len(entries)


def runnable_blocks():
    """``(words, body)`` of every marked block, in the site's page order."""
    blocks = []
    for page in sorted(GUIDES, key=site_order):
        text = page.read_text()
        found = list(MARKER.finditer(text))
        assert len(found) == text.count('<!-- runnable'), (
            f'{page}: a runnable marker not right before a fenced block'
        )
        for number, match in enumerate(found, 1):
            name = f'{page.relative_to(DOCS)}#{number}'
            blocks.append(
                pytest.param(match['words'] or '', match['body'], id=name)
            )
    return blocks


def script_of(words: str, body: str) -> str:
    """The block as bash runs it: the marker's replacements made,
    continuation lines joined, and with ``tiny`` :data:`TINY` and the
    marker's other words appended to the tools' command lines (before a
    trailing comment)."""
    words = shlex.split(words)
    for old, new in (
        word.split(REPLACE, 1) for word in words if REPLACE in word
    ):
        assert old in body, f'{old!r} is not in the block'
        body = body.replace(old, new)
    extra = [word for word in words if word != 'tiny' and REPLACE not in word]
    assert 'tiny' in words or not extra, f'{extra} without tiny'
    lines = body.replace('\\\n', ' ').splitlines()
    if 'tiny' in words:
        for number, line in enumerate(lines):
            tool = TOOL_LINE.match(line)
            if tool and tool['tool'] in TINY:
                command, hash_, comment = line.partition(' #')
                added = ' '.join(
                    [TINY[tool['tool']], *map(shlex.quote, extra)]
                )
                lines[number] = f'{command.rstrip()} {added}{hash_}{comment}'
    return '\n'.join(lines)


@pytest.fixture(scope='module')
def scratch(tmp_path_factory):
    """The blocks' directory, with a ``python`` that runs the tools through
    a :mod:`warm_tools` server (the package imported once, not per
    command)."""
    root = tmp_path_factory.mktemp('runnable')
    for name in ('configs', 'tools', 'tests'):
        (root / name).symlink_to(ROOT / name)
    (root / 'bin').mkdir()
    python = root / 'bin' / 'python'
    python.write_text(
        f'#!/bin/sh\nexec {sys.executable} -S '
        f'{ROOT / "tests" / "warm_tools.py"} "$@"\n'
    )
    python.chmod(0o755)
    socket_path = root / 'warm.sock'
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    with open(root / 'warm.log', 'w') as log:
        server = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / 'tests' / 'warm_tools.py'),
                '--serve',
                str(socket_path),
            ],
            env=env,
            stdout=log,
            stderr=log,
        )
    try:
        while not socket_path.exists():
            assert server.poll() is None, (root / 'warm.log').read_text()
            time.sleep(0.2)
        yield root
    finally:
        server.terminate()
        server.wait()


def test_there_are_runnable_blocks():
    assert len(runnable_blocks()) >= 3


def test_tiny_mode_reaches_every_tool_line():
    script = script_of(
        'tiny',
        'python tools/train.py a.py \\\n    --x 1\n'
        '# python tools/test.py not a command\n'
        'python tools/benchmark.py backbone  # a comment\n',
    )
    assert script == (
        f'python tools/train.py a.py      --x 1 {TINY_DATA}\n'
        '# python tools/test.py not a command\n'
        f'python tools/benchmark.py backbone {TINY["benchmark"]}'
        ' # a comment'
    )


def test_marker_words_replace_and_append():
    script = script_of(
        "tiny 'epoch_12=>epoch_2' 'a.b=[1, 2]'",
        'python tools/test.py c.py epoch_12.pth\nls epoch_12\n',
    )
    assert script == (
        f'python tools/test.py c.py epoch_2.pth {TINY_DATA} '
        "'a.b=[1, 2]'\nls epoch_2"
    )


@pytest.mark.parametrize('words, body', runnable_blocks())
def test_runnable_block_runs(words, body, scratch):
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS='1',
        PATH=f'{scratch / "bin"}{os.pathsep}{os.environ["PATH"]}',
        **{warm_tools.SOCKET_VARIABLE: str(scratch / 'warm.sock')},
    )
    result = subprocess.run(
        ['bash', '-euo', 'pipefail', '-c', script_of(words, body)],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
    )
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
