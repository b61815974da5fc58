"""The build frontend a host build runs inside its isolated build environment.

Run as a script by the environment's own interpreter (it imports nothing of wheelwright,
only ``build``, which the environment holds)::

    <env>/bin/python frontend.py --outdir OUT [-C KEY=VALUE ...] SRC

It does what ``python -m build --wheel`` does in an environment it made itself, with
``build``'s public API: ask the backend what else it needs (``get_requires_for_build_wheel``),
check that the environment holds it, then build the wheel. When something is missing it
builds nothing, prints one line ``wheelwright-missing: <JSON list>`` and exits with
:data:`MISSING_EXIT`: wheelwright then makes an environment that also holds those and runs
this again there. ``-C KEY=VALUE`` passes a config setting to the backend, as ``python -m build -C``
does (a cross build gives meson-python its cross file this way).
"""

from __future__ import annotations

import argparse
import json
import sys

MISSING_EXIT = 75
MISSING_PREFIX = "wheelwright-missing: "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--outdir", required=True)
    parser.add_argument("-C", "--config-setting", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("srcdir")
    args = parser.parse_args(argv)
    settings = dict(item.partition("=")[::2] for item in args.config_setting)

    import build  # the environment's own `build`

    builder = build.ProjectBuilder(args.srcdir)
    try:
        # each unmet chain starts with the backend's requirement itself: installing that one
        # brings whatever it lacks
        requires = builder.get_requires_for_build("wheel", settings or None)
        missing = sorted({chain[0] for req in requires for chain in build.check_dependency(req)})
        if missing:
            print(MISSING_PREFIX + json.dumps(missing), flush=True)
            return MISSING_EXIT
        wheel = builder.build("wheel", args.outdir, settings or None)
    except build.BuildBackendException as exc:  # the backend said why on stderr already
        print(f"wheelwright-frontend: the build backend failed: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"wheelwright-built: {wheel}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
