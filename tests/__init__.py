"""The test suite. Imported before tests/conftest.py and by every scenario a test runs as `python -m tests.NAME`."""

import os
import sys

# Bytecode caching on (git-ignored __pycache__/), whatever the shell says: the suite starts some fifty Python processes
# that import this repository (xdist workers, app.py and ci_app.py, the tools, nested pytest runs, Ray scenarios), and
# with PYTHONDONTWRITEBYTECODE each of them compiled its ~100k lines (the cdk8s imports/ most) again, ~1 s apiece.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
