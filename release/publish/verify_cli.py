"""The ``verify`` command's arguments (:func:`add_verify_parser`), without importing the command.

``python -m release`` builds every command's parser at start; the command itself
(:mod:`release.publish.verify`: the policy, the indexes' clients, the manifest) is imported only
when ``verify`` runs, so the other commands (an audit, say) do not pay for its imports.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from release.core.errors import WheelwrightError

__all__ = ["DEFAULT_INDEX_ROOT", "DEFAULT_POLICY", "add_verify_parser", "main"]

DEFAULT_POLICY = "rows.toml"
DEFAULT_INDEX_ROOT = Path(".wheelwright") / "index"
DESCRIPTION = (  # release/publish/verify.py's second paragraph
    "For every variant the manifest names: every file it lists is on the target's index for that variant, "
    "listed once, with its sha256, and downloaded: the bytes the index serves have the manifest's sha256; "
    "the index holds no other file of this release's project and version. Where wheelwright placed the "
    "manifest beside the wheels (the local index, a static index), the index's copy must be the manifest's "
    "bytes. --listing-only compares the listing alone (fast, nothing downloaded; an index that serves other "
    "bytes than it lists passes it, and the output says so). Exit 0 when every index agrees, 1 when one "
    "does not (each problem named, with its rule), 2 for bad input, 4 when an index cannot be read."
)


def _run(args: argparse.Namespace) -> int:
    from release.publish.verify import cmd_verify

    return cmd_verify(args)


def add_verify_parser(subparsers: Any) -> argparse.ArgumentParser:  # noqa: ANN401 - argparse's private type
    """Add the ``verify`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "verify",
        help="check a target's indexes against the release manifest",
        description=DESCRIPTION,
    )
    p.add_argument("--target", required=True, help="a [target.NAME] of the policy")
    p.add_argument("--policy", default=DEFAULT_POLICY, help="policy file (default: %(default)s)")
    p.add_argument("--dist", default="dist", help="where publish wrote the manifest (default: %(default)s)")
    p.add_argument("--manifest", metavar="FILE", help="the release manifest (default: the one in --dist)")
    p.add_argument(
        "--index-root",
        default=str(DEFAULT_INDEX_ROOT),
        help="a local-server target's index folder (default: %(default)s)",
    )
    p.add_argument(
        "--listing-only",
        action="store_true",
        help="compare the index's listing only (fast): no file is downloaded, so an index that serves "
        "other bytes than it lists passes; the output says it was a listing-only check",
    )
    p.set_defaults(func=_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m release.publish.verify``: the same command outside ``python -m release``."""
    parser = argparse.ArgumentParser(prog="python -m release.publish.verify")
    sub = parser.add_subparsers(dest="command", required=True)
    add_verify_parser(sub)
    args = parser.parse_args(["verify", *(sys.argv[1:] if argv is None else argv)])
    try:
        code: int = args.func(args)
    except WheelwrightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.return_code
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
