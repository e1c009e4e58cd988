"""Sphinx configuration of pmverify's documentation site.

Build it from the repository root (warnings are errors, as in CI)::

    pip install -c constraints/cpu.txt -e '.[docs]'
    sphinx-build -W --keep-going -b html docs docs/_build/html

The API reference imports the public modules (torch, not ``torch.compile``); nothing reaches the network.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pmverify import __version__  # noqa: E402  (torch-free: pmverify's __init__ is lazy)

project = "pmverify"
author = "the pmverify authors"
copyright = "the pmverify authors, Apache-2.0"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]

# Markdown pages: `[text](page.md#a-heading)` links reach headings down to level 3
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# API reference: the public names each module exports (its __all__), in source order
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": True}
autodoc_typehints = "description"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# ``x`` in a docstring is code; a single-backtick `x` too (the docstrings use both)
default_role = "code"
# names the docstrings use that are not documented here (torch's, Hypothesis', private ones) are not errors
nitpicky = False

try:
    import furo  # noqa: F401

    html_theme = "furo"
except ImportError:  # the default theme where furo is not installed
    html_theme = "alabaster"
html_title = f"pmverify {release}"


_LOCAL_RUN_LINK = re.compile(r"\[([^\]]*)\]\((\.\./\.pmverify/[^)]*)\)")


def _local_audit_run_links(app, docname, source):
    """docs/AUDIT.md (written by ``pmverify audit --markdown``) links each finding's reproducer under
    ``.pmverify/``, the audit run's own untracked output: on the site such a link is its path as text."""
    if docname == "AUDIT":
        source[0] = _LOCAL_RUN_LINK.sub(lambda m: f"{m.group(1)} `{m.group(2)[3:]}`", source[0])


def setup(app):
    app.connect("source-read", _local_audit_run_links)
