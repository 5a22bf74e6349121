"""The package keeps its layers (.importlinter, docs/architecture.md): no
module imports from a layer above its own, not even inside a function."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_layers_contract_is_kept():
    lint_imports = Path(sys.executable).with_name('lint-imports')
    result = subprocess.run([str(lint_imports), '--no-cache'], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
