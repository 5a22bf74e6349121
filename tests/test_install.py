import importlib
import subprocess
import sys
from pathlib import Path

import mmdet

REPO = Path(__file__).resolve().parents[1]


def test_stack_imports():
    import hetdpt_mm

    for name in ('mmdet.models', 'mmseg.models', 'mmpretrain.models', 'timm'):
        importlib.import_module(name)
    from mmcv.ops import nms  # noqa: F401  compiled ops are present

    assert hetdpt_mm.__version__


def test_the_toolboxes_own_tools_start():
    """psutil (a requirement) is what mmdet's analysis tools import first."""
    tool = (
        Path(mmdet.__file__).parent
        / '.mim'
        / 'tools'
        / 'analysis_tools'
        / 'benchmark.py'
    )
    result = subprocess.run(
        [sys.executable, str(tool), '-h'], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_tensorboard_backend_writes_events(tmp_path):
    """The `vis` extra: mmengine's TensorboardVisBackend logs scalars."""
    from mmengine.visualization import TensorboardVisBackend

    backend = TensorboardVisBackend(save_dir=str(tmp_path))
    backend.add_scalar('loss', 0.5, step=1)
    backend.close()
    assert list(tmp_path.glob('**/events.out.tfevents.*'))


def test_a_second_install_installs_nothing(tmp_path):
    """The Makefile's stamp is the inputs' content (issue 51 item 9): a
    fresh clone sharing ``PY`` installs nothing, a changed input
    reinstalls.  ``tools/install_deps.sh`` is a stand-in that logs runs."""
    python = tmp_path / 'env/bin/python'
    python.parent.mkdir(parents=True)
    python.write_text('')
    python.chmod(0o755)
    log = tmp_path / 'installs.log'

    def clone(name):
        root = tmp_path / name
        (root / 'tools').mkdir(parents=True)
        (root / 'requirements').mkdir()
        for path in ('Makefile', 'setup.py', 'requirements/runtime.txt'):
            (root / path).write_bytes((REPO / path).read_bytes())
        (root / 'tools/install_deps.sh').write_text(f'echo run >> {log}\n')
        return root

    def install(root):
        subprocess.run(
            ['make', '-s', 'install', f'PY={python}'],
            cwd=root,
            check=True,
            capture_output=True,
        )
        return log.read_text().count('run')

    first = clone('first')
    assert install(first) == 1
    assert install(first) == 1
    assert install(clone('second')) == 1
    (first / 'requirements/runtime.txt').write_text('timm==0.0\n')
    assert install(first) == 2
