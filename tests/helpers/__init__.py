"""The tests' helpers: plain functions, classes and constants the test modules import (no tests, and
no fixtures: those are in tests/conftest.py). tests/ is on sys.path (through tests/conftest.py), so a
test imports ``from helpers.<module> import name``.

- ``audit``: builders of synthetic audit inputs (libraries, fatbinaries, wheels as the readers'
  dataclasses; no file is read).
- ``chromium``: a real headless Chromium for the HTML reports, and the DOM it rendered as a tree.
- ``container``: the container tests' engine (configured as the stand-in images need) and their skip.
- ``durations``: where a run's time went, by test module (the summary tests/conftest.py prints).
- ``elf``: real shared libraries linked on the spot by gcc, and wheels zipped around them.
- ``index``: publishing helpers: real wheels rewrapped from the audit's fixture wheels, their
  records, the fixture policy, a local index's variants, a venv to install into, a fault proxy
  (the fixtures built on them, ``local_index_server`` and the rest, are in tests/conftest.py).
- ``policy``: policies a test writes into a folder of its own, with the project they must name.
- ``proc``: processes: ``python -m`` runs, a process that must end, an audit's JSON.
- ``real_wheels``: published third-party wheels pinned by file name and sha256, fetched into a cache.
- ``repo``: a git repository of a test's own holding a committed copy of this repository's policy
  and example package.
- ``rows``: the rows of a policy (by default this repository's rows.toml).
- ``scripts``: loading the repository's scripts/ files by path.
- ``text``: edited copies of a text file (a policy, a table, a recipe) that must be refused.
"""
