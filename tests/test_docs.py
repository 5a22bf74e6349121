"""The docs (docs/, README.md, CHANGELOG.md): the Sphinx site builds in strict
mode, README's links resolve, pages stay short and tell no project history,
and every command block a guide marks runnable runs.

A guide marks a fenced block it asks users to run with an HTML comment on the
line before it: ``<!-- runnable -->`` runs the block as written;
``<!-- runnable: tiny -->`` appends :data:`TINY` to every ``tools/train.py``
and ``tools/test.py`` command, so that a training block runs on a few images.
Blocks run with bash in one scratch directory (``configs``, ``tools`` and
``tests`` linked in, ``python`` this interpreter), in page order.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from myst_parser.mdit_to_docutils.base import default_slugify

import hetdpt_mm

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / 'docs'
#: Dated records of how figures were obtained; the guides do not depend on
#: them, and they may tell history.
NOTES = DOCS / 'notes'
PAGES = sorted(DOCS.rglob('*.md'))
GUIDES = [page for page in PAGES if NOTES not in page.parents]

#: What ``<!-- runnable: tiny -->`` adds to the training and test tools.
TINY = ('--cfg-options train_dataloader.dataset.indices=32 '
        'val_dataloader.dataset.indices=32 '
        'test_dataloader.dataset.indices=32')
TINY_TOOLS = re.compile(r'^python tools/(train|test)\.py ')

MARKER = re.compile(r'^<!-- runnable(?:: (?P<mode>\S+))? -->\n'
                    r'```[a-z]*\n(?P<body>.*?)^```$', re.M | re.S)

#: Phrases of how the project was made (runs, sessions, the machine's load):
#: they belong in CHANGELOG.md or docs/notes/.
HISTORY = re.compile(
    r'\bsessions?\b|\bwe (?:tried|changed|dropped|kept)\b|'
    r'load average (?:of |at |about |below |was |\d)|\bpredates?\b|'
    r'other (?:agents|engineers)|while other jobs ran|tried and dropped|'
    r'no longer', re.I)

LINK = re.compile(r'\]\((?!https?://|mailto:)([^)\s]+)\)')


def test_docs_site_builds_strictly(tmp_path):
    """A broken link, a missing page, a moved heading anchor or a page left
    out of the toctree is an error."""
    result = subprocess.run(
        [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-n', '-q',
         '-b', 'dummy', '-d', str(tmp_path / 'doctrees'), str(DOCS),
         str(tmp_path / 'out')],
        capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, '')


def anchors(page: Path) -> set:
    """The heading anchors myst gives ``page`` (GitHub's slugs)."""
    text = re.sub(r'^```.*?^```', '', page.read_text(), flags=re.M | re.S)
    return {default_slugify(m.group(1).strip())
            for m in re.finditer(r'^#{1,6} (.+)$', text, re.M)}


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
    lengths = {str(page.relative_to(ROOT)): len(page.read_text().splitlines())
               for page in PAGES}
    assert {page: n for page, n in lengths.items() if n > 400} == {}
    assert len((ROOT / 'README.md').read_text().splitlines()) <= 120


@pytest.mark.parametrize('page', [ROOT / 'README.md', *GUIDES],
                         ids=lambda page: str(page.relative_to(ROOT)))
def test_page_tells_no_project_history(page):
    lines = page.read_text().splitlines()
    assert [f'{n}: {line}' for n, line in enumerate(lines, 1)
            if HISTORY.search(line)] == []


def test_version_is_the_changelog_newest():
    text = (ROOT / 'CHANGELOG.md').read_text()
    newest = re.search(r'^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$', text,
                       re.M)
    assert newest and newest.group(1) == hetdpt_mm.__version__


def runnable_blocks():
    """``(id, mode, script)`` of every marked block, in page order (get
    started first: the later blocks reuse the data it makes)."""
    pages = sorted(GUIDES, key=lambda page: page.name != 'get_started.md')
    blocks = []
    for page in pages:
        text = page.read_text()
        found = list(MARKER.finditer(text))
        assert len(found) == text.count('<!-- runnable'), (
            f'{page}: a runnable marker not right before a fenced block')
        for number, match in enumerate(found, 1):
            name = f'{page.relative_to(DOCS)}#{number}'
            blocks.append(pytest.param(match['mode'], match['body'], id=name))
    return blocks


def script_of(mode, body) -> str:
    """The block as bash runs it: continuation lines joined, and in ``tiny``
    mode :data:`TINY` appended to the training and test tools."""
    assert mode in (None, 'tiny'), f'unknown runnable mode {mode!r}'
    lines = body.replace('\\\n', ' ').splitlines()
    if mode == 'tiny':
        lines = [f'{line} {TINY}' if TINY_TOOLS.match(line) else line
                 for line in lines]
    return '\n'.join(lines)


@pytest.fixture(scope='module')
def scratch(tmp_path_factory):
    root = tmp_path_factory.mktemp('runnable')
    for name in ('configs', 'tools', 'tests'):
        (root / name).symlink_to(ROOT / name)
    (root / 'bin').mkdir()
    # A script, not a link: a linked venv interpreter loses its venv.
    python = root / 'bin' / 'python'
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return root


def test_there_are_runnable_blocks():
    assert len(runnable_blocks()) >= 3


def test_tiny_mode_reaches_every_tool_line():
    script = script_of('tiny', 'python tools/train.py a.py \\\n    --x 1\n'
                       '# python tools/test.py not a command\n')
    assert script == (f'python tools/train.py a.py      --x 1 {TINY}\n'
                      '# python tools/test.py not a command')


@pytest.mark.parametrize('mode, body', runnable_blocks())
def test_runnable_block_runs(mode, body, scratch):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1',
               PATH=f'{scratch / "bin"}{os.pathsep}{os.environ["PATH"]}')
    result = subprocess.run(
        ['bash', '-euo', 'pipefail', '-c', script_of(mode, body)],
        cwd=scratch, env=env, capture_output=True, text=True)
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
