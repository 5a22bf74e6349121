"""The docs (docs/, README.md, CHANGELOG.md): the Sphinx site builds in strict
mode, README's links resolve, pages stay short and tell no project history,
the tools, modules and configs they name exist, and every command block of
README and the guides runs.

A guide marks a fenced block it asks users to run on the demo data with an
HTML comment on the line before it, ``<!-- runnable -->`` or
``<!-- runnable: WORD ... -->`` (words split as the shell does):

* ``tiny`` appends :data:`TINY`'s arguments to every command line of those
  tools (``python tools/NAME.py ...``): a few images for training and
  testing, one small batch for the benchmark;
* ``OLD=>NEW`` replaces the text ``OLD`` of the block by ``NEW`` first (a
  shorter schedule's checkpoint name, a smaller input the model needs);
* any other word is appended after :data:`TINY`'s arguments (with ``tiny``):
  more ``--cfg-options`` for ``train.py`` and ``test.py``, more flags for
  the benchmark.

Runnable blocks run with bash in one scratch directory (``configs``,
``tools`` and ``tests`` linked in; ``python`` is this interpreter, with the
tools run by a :mod:`warm_tools` server that has imported the package), in
the site's page order (docs/index.md), so that a later guide uses what an
earlier one made, as a reader following them would.

Every other ``bash`` block (ImageNet, COCO and ADE20K runs, full-size
benchmarks) runs **dry** in a fresh clone per page, in the page's order:
its tools run as :mod:`dry_tools` says (parsed, configs loaded and models
built on the meta device, what they read required, what they write made
empty), ``wget`` makes an empty file of the URL's name, ``make`` prints its
recipe (``make -n``) and ``pip`` requires its requirements file; the rest
(``mkdir``, ``cp``, loops, ``cat``) runs as written.  A block that would
fail on a fresh clone where its data exist (a file used before any command
makes or downloads it, an option a tool does not take, a config that does
not build) fails.  Its optional marker ``<!-- dry: WORD ... -->`` takes
``OLD=>NEW`` replacements and ``needs=PATH``: a file of the reader's own
(another guide's result) made empty before the block runs.  A synopsis
(``tool IN OUT [--option ...]``) is a ``text`` block, not a command.
"""

import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_tools
from helpers import write_folder_dataset
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
#: A file of the repository a page names by its path (not a glob or a
#: brace pattern, nor a toolbox's own ``.../tools/...``).
REPO_PATH = re.compile(
    r'(?<![\w/.-])(?:tools|hetdpt_mm|hetdpt_demo|hetdpt_benchmark|configs|'
    r'tests)/[\w/.-]*\w\.(?:py|sh|csv|json)\b(?![{*])'
)
#: A module, class or function of the project a page names in dotted form.
DOTTED_NAME = re.compile(r'(?<![\w/.])hetdpt_(?:mm|demo|benchmark)(?:\.\w+)+')
CHECKPOINT = re.compile(
    r'\bwork_dirs/(?P<config>[\w.-]+)/epoch_(?P<epoch>\d+)\.pth'
)


def resolves(name: str) -> bool:
    """Whether the dotted ``name`` is a module or an attribute of one."""
    parts = name.split('.')
    for end in range(len(parts), 0, -1):
        try:
            found = importlib.import_module('.'.join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            found = getattr(found, part, None)
        return found is not None
    return False


@pytest.mark.parametrize(
    'page',
    [ROOT / 'README.md', *GUIDES],
    ids=lambda page: str(page.relative_to(ROOT)),
)
def test_named_pages_tools_and_checkpoints_exist(page):
    """A page, tool, module, config or data file named in the text by its
    path exists, and an ``epoch_N.pth`` of a project config's work dir is
    one its schedule writes."""
    text = page.read_text()
    missing = [
        path
        for path in DOC_PATH.findall(text) + REPO_PATH.findall(text)
        if not (ROOT / path).exists()
    ]
    missing += [
        name for name in DOTTED_NAME.findall(text) if not resolves(name)
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
def warm_server(tmp_path_factory):
    """The socket of a :mod:`warm_tools` server (the package imported once,
    not per command)."""
    root = tmp_path_factory.mktemp('warm')
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
        yield socket_path
    finally:
        server.terminate()
        server.wait()


def command_dir(root: Path, links, stand_ins=()) -> dict:
    """``root`` with ``links`` to the repository's entries and a ``bin`` of
    a ``python`` that runs the tools through the warm server and of
    ``stand_ins`` (name -> shell script); returns what the blocks' PATH
    starts with."""
    for name in links:
        (root / name).symlink_to(ROOT / name)
    (root / 'bin').mkdir()
    scripts = dict(
        python=f'exec {sys.executable} -S '
        f'{ROOT / "tests" / "warm_tools.py"} "$@"',
        **dict(stand_ins),
    )
    for name, script in scripts.items():
        (root / 'bin' / name).write_text(f'#!/bin/sh\n{script}\n')
        (root / 'bin' / name).chmod(0o755)
    return root / 'bin'


def run_block(script: str, cwd: Path, server: Path, **env) -> None:
    bin_dir = cwd / 'bin'
    result = subprocess.run(
        ['bash', '-euo', 'pipefail', '-c', script],
        cwd=cwd,
        env=dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            OMP_NUM_THREADS='1',
            PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}',
            **{warm_tools.SOCKET_VARIABLE: str(server)},
            **env,
        ),
        capture_output=True,
        text=True,
    )
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, output


@pytest.fixture(scope='module')
def scratch(tmp_path_factory, warm_server):
    """The runnable blocks' directory: the reader's own folder dataset
    (docs/user_guides/own_dataset.md) in it, and a ``wget`` whose official
    DeiT files are tiny stand-ins (:func:`helpers.write_official_deit`)."""
    root = tmp_path_factory.mktemp('runnable')
    wget = (
        'while [ $# -gt 0 ]; do\n'
        '  case $1 in -P) dir=$2; shift;; -*) ;; *) url=$1;; esac\n'
        '  shift\n'
        'done\n'
        'python - "$dir/${url##*/}" <<\'PY\'\n'
        'import sys\n'
        "sys.path.insert(0, 'tests')\n"
        'from helpers import write_official_deit\n'
        'write_official_deit(sys.argv[1])\n'
        'PY'
    )
    command_dir(root, ('configs', 'tools', 'tests'), dict(wget=wget))
    write_folder_dataset(root / 'data/my_dataset')
    return root


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
def test_runnable_block_runs(words, body, scratch, warm_server):
    run_block(script_of(words, body), scratch, warm_server)


# ------------------------------------------------------------- dry blocks
#: The pages whose commands a reader runs.
COMMAND_PAGES = [
    ROOT / 'README.md',
    DOCS / 'get_started.md',
    *sorted((DOCS / 'user_guides').glob('*.md')),
]
BASH_BLOCK = re.compile(
    r'^(?:<!-- (?P<kind>runnable|dry)(?::? (?P<words>[^\n]*?))? -->\n)?'
    r'```bash\n(?P<body>.*?)^```$',
    re.M | re.S,
)
#: What a fresh clone holds that the blocks use.
CLONE = (
    'configs',
    'tools',
    'tests',
    'requirements',
    'hetdpt_mm',
    'hetdpt_demo',
    'hetdpt_benchmark',
    'Makefile',
    'setup.py',
)
STAND_INS = dict(
    # the file the URL names, empty (-P DIR or -O FILE)
    wget='dir=. out=\n'
    'while [ $# -gt 0 ]; do\n'
    '  case $1 in -P) dir=$2; shift;; -O) out=$2; shift;; -*) ;; '
    '*) url=$1;; esac\n'
    '  shift\n'
    'done\n'
    'mkdir -p "$dir" && : > "${out:-$dir/${url##*/}}"',
    # the recipe, printed
    make=f'exec {shutil.which("make")} -n "$@"',
    # the requirements files, required
    pip='while [ $# -gt 0 ]; do\n'
    '  if [ "$1" = -r ] && [ ! -f "$2" ]; then echo "no $2" >&2; exit 1; fi\n'
    '  shift\n'
    'done',
)


def dry_blocks(page: Path):
    """``(words, body)`` of the page's bash blocks not marked runnable."""
    return [
        (match['words'] or '', match['body'])
        for match in BASH_BLOCK.finditer(page.read_text())
        if match['kind'] != 'runnable'
    ]


@pytest.mark.parametrize(
    'page',
    [page for page in COMMAND_PAGES if dry_blocks(page)],
    ids=lambda page: str(page.relative_to(ROOT)),
)
def test_command_blocks_run_on_a_fresh_clone(page, warm_server, tmp_path):
    """Each block of the page, dry, in order, in a fresh clone."""
    command_dir(tmp_path, CLONE, STAND_INS)
    for words, body in dry_blocks(page):
        split = shlex.split(words)
        for path in (
            w[len('needs=') :] for w in split if w.startswith('needs=')
        ):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).touch()
        replacements = shlex.join(w for w in split if REPLACE in w)
        run_block(
            script_of(replacements, body),
            tmp_path,
            warm_server,
            **{warm_tools.DRY_VARIABLE: '1'},
        )


def test_a_block_that_downloads_too_little_fails(warm_server, tmp_path):
    """What the dry run is for (issue 60 item 4): README's DeiT-B path
    without the teacher's file fails on a fresh clone, naming it."""
    command_dir(tmp_path, CLONE, STAND_INS)
    block = (
        'mkdir -p checkpoints\n'
        'wget -P checkpoints https://dl.fbaipublicfiles.com/deit/'
        'deit_base_distilled_patch16_224-df68dfff.pth\n'
        'bash tools/dist_train.sh configs/hetdpt/deit-b_prune-10l_in1k.py 8\n'
    )
    with pytest.raises(AssertionError, match="distillation teacher's"):
        run_block(
            block, tmp_path, warm_server, **{warm_tools.DRY_VARIABLE: '1'}
        )
