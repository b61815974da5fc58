"""``python -m release verify --target NAME``: check a target's indexes against the release manifest.

For every variant the manifest names: every file it lists is on the target's index for that
variant with its sha256, and the index holds no other file of this release's project and
version. Where wheelwright placed the manifest beside the wheels (the local index, a static
index), the index's copy must be the manifest's bytes. Exit 0 when every index agrees, 1 when
one does not (each problem named, with its rule), 2 for bad input, 4 when an index cannot be read.

The manifest: ``--manifest FILE``, else the one ``<dist>/*.release.json`` that publish wrote.
A local-server target (the rehearsal index) is verified where it runs (``--index-root``); it is
never started or changed here.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from release.core.errors import InputError
from release.policy.load import load_policy
from release.policy.targets import IndexTarget, Target, join_url
from release.publish import manifest as mf
from release.publish.deadlines import deadlines_for
from release.publish.index_client import Auth, Redactor, download, remote_hashes
from release.publish.local_index import LocalIndex, attach
from release.publish.plan import LocalWheel, plan_publish, read_auth, resolve_credentials, ruled


def find_manifest(dist: Path, given: str | None) -> Path:
    """The manifest to verify against: ``given``, else the one ``dist/*.release.json``."""
    if given:
        return Path(given)
    found = sorted(dist.glob(f"*{mf.SUFFIX}"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputError(
            f"no release manifest (*{mf.SUFFIX}) in {dist}; publish writes one there, or pass --manifest FILE"
        )
    raise InputError(
        f"{len(found)} release manifests in {dist} ({', '.join(p.name for p in found)}); pass --manifest"
    )


def index_problems(manifest: mf.Manifest, variant: str, remote: Mapping[str, str]) -> list[str]:
    """Where the index's files (``filename -> sha256``) disagree with the manifest's for ``variant`` (pure)."""
    wanted = [
        LocalWheel(Path(f.filename), f.filename, f.sha256, f.row, f.size)
        for f in manifest.for_variant(variant)
    ]
    plan = plan_publish(wanted, remote)
    problems = [
        ruled("read-back", f"{w.filename}: listed by the manifest but not on the index")
        for w in plan.to_upload
    ]
    problems += [
        ruled(
            "read-back",
            f"{c.filename}: on the index with sha256 {c.remote_sha256}, the manifest says {c.local_sha256}: "
            "the file was replaced",
        )
        for c in plan.conflicts
    ]
    problems += plan.problems()[len(plan.conflicts) :]  # files of this version the manifest does not list
    return problems


def _copy_on_index(
    manifest: mf.Manifest, index: IndexTarget, local: LocalIndex | None, *, auth: Auth | None, red: Redactor
) -> tuple[str, bytes | None] | None:
    """(where, the index's copy of the manifest or None when missing); None when the index has no place for one."""
    if local is not None:
        url = join_url(local.upload_url(index.variant), "+release") + manifest.name
        chunks: list[bytes] = []
        found = download(url, auth=auth, redactor=red, sink=chunks.append, missing_ok=True)
        return url, b"".join(chunks) if found else None
    folder = mf.folder_on_index(index, None)
    if folder is None:
        return None
    path = folder / manifest.name
    return str(path), (path.read_bytes() if path.is_file() else None)


def verify_target(
    manifest: mf.Manifest, target: Target, *, env: Mapping[str, str], local: LocalIndex | None
) -> tuple[list[str], list[str]]:
    """(what agrees, what does not) for every variant of the manifest on ``target``."""
    good: list[str] = []
    problems: list[str] = []
    for variant in manifest.variants:
        index = target.index_for(variant)
        red = Redactor()
        creds = resolve_credentials(variant, env)
        auth = None if local is not None else read_auth(index, creds)  # the local index reads anonymously
        red.add_auth(auth)
        timeout = deadlines_for(variant, env).timeout
        remote = remote_hashes(index.simple_url, manifest.project, auth=auth, timeout=timeout, redactor=red)
        found = index_problems(manifest, variant, remote)
        where = f"{variant} ({red(index.simple_url)})"
        copy = _copy_on_index(manifest, index, local, auth=auth, red=red)
        if copy is not None and copy[1] is None:
            found.append(
                ruled(
                    "read-back", f"{manifest.name}: the index does not carry the release manifest ({copy[0]})"
                )
            )
        elif copy is not None and copy[1] != manifest.text().encode():
            found.append(
                ruled("read-back", f"{manifest.name}: the index's copy ({copy[0]}) is not this manifest")
            )
        if found:
            problems += [f"{where}: {p}" for p in found]
        else:
            good.append(
                f"{where}: {len(manifest.for_variant(variant))} file(s), each with its sha256, nothing else"
            )
    return good, problems


def cmd_verify(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy)
    declared = policy.target(args.target)
    path = find_manifest(Path(args.dist), args.manifest)
    manifest = mf.read(path)
    if manifest.policy_sha256 != policy.sha256:
        print(f"note: {path.name} was written under another rows.toml than {policy.path}", file=sys.stderr)
    local = attach(Path(args.index_root)) if declared.local_server else None
    target = local.target(args.target, rehearsal=True) if local is not None else declared.to_target()
    good, problems = verify_target(manifest, target, env=os.environ, local=local)
    for line in good:
        print(f"✓ {line}")
    for line in problems:
        print(f"✗ {line}")
    what = f"{manifest.name} on target {args.target!r}"
    if problems:
        print(f"FAILED: {len(problems)} problem(s) with {what}")
        return 1
    print(f"ok: every index of target {args.target!r} holds exactly the files of {manifest.name}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m release.publish.verify``: the same command outside ``python -m release``."""
    from release.publish.verify_cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
