"""The repository keeps its layers and its style: `lint-imports` (the layer
contract of .importlinter, docs/advanced/architecture.md), `ruff check` and
`ruff format --check` (ruff.toml) and `codespell` (.codespellrc), as
.pre-commit-config.yaml runs them for contributors."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    'hetdpt_mm',
    'hetdpt_demo',
    'hetdpt_benchmark',
    'tools',
    'tests',
    'configs',
]
#: Check name -> the tool of the environment and its arguments.
CHECKS = {
    'lint-imports': ['lint-imports', '--no-cache'],
    'ruff check': ['ruff', 'check', '--no-cache', *SOURCES],
    'ruff format': ['ruff', 'format', '--check', '--no-cache', *SOURCES],
    'codespell': ['codespell', *SOURCES, 'docs', 'README.md'],
}


@pytest.mark.parametrize('check', list(CHECKS))
def test_the_repository_passes(check):
    tool, *arguments = CHECKS[check]
    executable = Path(sys.executable).with_name(tool)
    result = subprocess.run(
        [str(executable), *arguments], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
