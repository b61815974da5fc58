"""``python -m release verify --target NAME | --rebuild ROW``: check a target's indexes against the
release manifest (every file listed once, with its sha256, and nothing else of the release), or
rebuild a row from this checkout and compare its sha256 with the manifest's.

``python -m release`` builds every command's parser at start; the command's work
(:mod:`release.publish.verify`: the policy, the indexes' clients, the manifest;
:mod:`release.publish.rebuild`) is imported only when ``verify`` runs, so the other commands (an
audit, say) do not pay for its imports.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, cast

from release.core.errors import InputError
from release.policy.load import DEFAULT_POLICY, default_policy
from release.wheelbuild.backends import CHOICES as BACKEND_CHOICES

__all__ = ["DEFAULT_INDEX_ROOT", "DEFAULT_POLICY", "add_parser", "run"]

DEFAULT_INDEX_ROOT = Path(".wheelwright") / "index"
DESCRIPTION = (  # release/publish/verify.py's second paragraph
    "For every variant the manifest names: every file it lists is on the target's index for that variant, "
    "listed once, with its sha256, and downloaded: the bytes the index serves have the manifest's sha256; "
    "the index holds no other file of this release's project and version. Where wheelwright placed the "
    "manifest beside the wheels (the local index, a static index), the index's copy must be the manifest's "
    "bytes. --listing-only compares the listing alone (fast, nothing downloaded; an index that serves other "
    "bytes than it lists passes it, and the output says so). Exit 0 when every index agrees, 1 when one "
    "does not (each problem named, with its rule), 2 for bad input, 4 when an index cannot be read. "
    "The manifest's signature (<manifest>.sig) is checked first: missing or wrong exits 1 "
    "[rule: signed-manifest] unless --allow-unsigned. --rebuild ROW rebuilds the row from this checkout "
    "instead and compares its sha256 with the manifest's: 0 when equal, 1 naming both digests."
)


def run(args: argparse.Namespace) -> int:
    if args.rebuild:
        from release.publish.verify import find_manifest

        return _rebuild(args, find_manifest(Path(args.dist), args.manifest))
    if not args.target:
        raise InputError("verify needs --target NAME (check an index) or --rebuild ROW (rebuild a row)")
    return _verify(args)


def _verify(args: argparse.Namespace) -> int:
    """Check the target's indexes against the manifest (:func:`release.publish.verify.verify_target`)."""
    from release.policy.load import load_policy
    from release.publish import manifest as mf
    from release.publish.index.local import attach
    from release.publish.verify import find_manifest, verify_target

    policy = load_policy(args.policy)
    declared = policy.target(args.target)
    path = find_manifest(Path(args.dist), args.manifest)
    manifest, signed = mf.read_trusted(
        path,
        public_key=getattr(args, "public_key", None),
        allow_unsigned=bool(getattr(args, "allow_unsigned", False)),
        env=os.environ,
    )
    print(f"{'!' if 'NOT' in signed else '✓'} {signed}")
    if manifest.policy_sha256 != policy.sha256:
        print(f"note: {path.name} was written under another rows.toml than {policy.path}", file=sys.stderr)
    if declared.local_server and Path(args.index_root).is_dir():  # no index stop until the last download
        from release.publish.index.lease import claim

        claim(Path(args.index_root), alone=False)
    local = attach(Path(args.index_root)) if declared.local_server else None
    target = local.target(args.target, rehearsal=True) if local is not None else declared.to_target()
    listing_only = bool(getattr(args, "listing_only", False))
    good, problems = verify_target(manifest, target, env=os.environ, local=local, listing_only=listing_only)
    for line in good:
        print(f"✓ {line}")
    for line in problems:
        print(f"✗ {line}")
    what = f"{manifest.name} on target {args.target!r}"
    if problems:
        print(f"FAILED: {len(problems)} problem(s) with {what}")
        return 1
    how = (
        "lists exactly the files of {m} (listing only: the files were not downloaded)"
        if listing_only
        else "holds exactly the files of {m} (each downloaded and hashed)"
    )
    print(f"ok: every index of target {args.target!r} {how.format(m=manifest.name)}")
    return 0


def _rebuild(args: argparse.Namespace, path: Path) -> int:
    """Check the manifest at ``path``, rebuild each ``--rebuild`` row, compare; the exit code
    (:mod:`release.publish.rebuild`)."""
    from release.policy.load import load_policy
    from release.publish import manifest as mf
    from release.publish.rebuild import manifest_entry, rebuild, rebuild_problems
    from release.wheelbuild.engine import BackendChoice

    manifest, signed = mf.read_trusted(
        path, public_key=args.public_key, allow_unsigned=args.allow_unsigned, env=os.environ
    )
    print(f"{'!' if 'NOT' in signed else '✓'} {signed}")
    entries = [manifest_entry(manifest, r) for r in args.rebuild]  # bad input before any build
    policy_path = Path(args.policy)
    policy = load_policy(policy_path)  # once, before any build: a bad policy stops here
    head = mf.source_commit(policy_path.resolve().parent, os.environ)
    if manifest.source_commit and head != manifest.source_commit:
        print(f"note: the checkout is at {head}, {manifest.name} was published from {manifest.source_commit}")
    failed = 0
    for entry in entries:
        backend = cast(BackendChoice, args.backend)
        got = rebuild(entry.row, policy=policy, backend=backend, env=os.environ)
        problems = rebuild_problems(entry, got)
        for line in problems:
            print(f"✗ {entry.row}: {line}")
        if not problems:
            print(f"✓ {entry.row}: rebuilt {got.filename}: sha256 {got.sha256}, the manifest's")
        failed += bool(problems)
    if failed:
        print(f"FAILED: {failed} of {len(entries)} row(s) rebuild to other bytes than {manifest.name} lists")
        return 1
    print(f"ok: {len(entries)} row(s) rebuild to the bytes {manifest.name} lists")
    return 0


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``verify`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "verify",
        help="check a target's indexes against the release manifest",
        description=DESCRIPTION,
    )
    p.add_argument("--target", help="a [target.NAME] of the policy (needed unless --rebuild)")
    p.add_argument(
        "--policy",
        default=default_policy(os.environ),
        help=f"policy file (default: $WHEELWRIGHT_POLICY, else {DEFAULT_POLICY}; here: %(default)s)",
    )
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
    p.add_argument(
        "--public-key",
        metavar="FILE",
        help="the release key's public half (PEM) to check the manifest's signature with (default: "
        "$WHEELWRIGHT_SIGNING_PUBLIC_KEY, else this user's own signing key)",
    )
    p.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="check a manifest without a valid signature anyway (its digests are then taken on trust; "
        "the output says so)",
    )
    p.add_argument(
        "--rebuild",
        action="append",
        metavar="ROW",
        default=[],
        help="instead of reading an index: rebuild ROW from this checkout into a private temporary "
        "folder and compare its sha256 with the manifest's (repeat for more rows)",
    )
    p.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="the build backend of --rebuild (default: %(default)s)",
    )
    p.set_defaults(func=run)
    return p
