"""`make test`'s docs step (tests/suites.py): docs/ built as mkdocs.yml says, strictly (a broken link or
anchor, or a page left out of the nav, fails it), into a folder removed afterwards.

Usage: python -m tests.build_docs
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def main(root: Path = REPO_ROOT) -> int:
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2, on every build
    with tempfile.TemporaryDirectory() as site:
        # Not --quiet: it hides the warnings from the count that --strict fails on (MkDocs 1.6).
        command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", site]
        return subprocess.call(command, cwd=root, env=env)


if __name__ == "__main__":
    sys.exit(main())
