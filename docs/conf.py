"""Sphinx configuration of the hetdpt_mm docs (Markdown via myst-parser).

Build: ``sphinx-build -W --keep-going -n docs docs/_build``; tests/test_docs.py
builds it so, where a broken link, a missing page or a moved anchor is an
error.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

version_info = {}
exec((ROOT / 'hetdpt_mm' / 'version.py').read_text(), version_info)

project = 'hetdpt_mm'
author = 'hetdpt_mm contributors'
copyright = '2026, hetdpt_mm contributors'
release = version_info['__version__']
version = release

extensions = ['myst_parser']
source_suffix = {'.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build']

# `[text](page.md#a-heading)` links resolve against heading anchors
# (GitHub's slugs), so a renamed heading breaks the build.
myst_heading_anchors = 4
myst_enable_extensions = ['colon_fence']
# Fenced blocks are shown as written: no highlighting, whose lexer errors on
# partial snippets would be warnings, hence errors.
highlight_language = 'none'
pygments_style = 'sphinx'

html_theme = 'alabaster'
html_title = f'hetdpt_mm {release}'
