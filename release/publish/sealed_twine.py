"""twine's upload of one sealed copy: run as a script by :mod:`release.publish.twine_upload`, never imported.

``python -P sealed_twine.py PARENT_PID FD STAGED SHA256 TWINE_UPLOAD_ARGS...``: the publisher
(``PARENT_PID``) holds the staged wheel's bytes in a sealed memfd, descriptor ``FD``
(:func:`release.publish.guards.seal.sealed_copy`: no write, no shrink, no growth, no new seal). This
process opens that memfd through ``/proc/PARENT_PID/fd/FD`` (the kernel's name for the publisher's
own descriptor: no file in any folder, so nothing renamed over a path changes it), checks its
seals, and gives twine that one file: twine's ``Settings`` (credentials, repository, certificates,
from the same options the ``twine upload`` command line takes), twine's ``PackageFile`` made from
``/proc/self/fd/N`` (its hashes and its upload read nothing else), sent under the wheel's name (the
staged path ``STAGED``'s last part: named for ``ps``, never opened) by twine's ``Repository.upload`` and judged by ``twine.utils.check_status_code``, as
``twine upload`` does. twine's hash of what it will send must be ``SHA256`` (the audited one).

Errors are printed as ``twine upload`` prints them (``HTTPError: 409 Conflict from URL``), exit 1;
a memfd that is not sealed, or other bytes, exit 3 before anything is sent.

What this cannot hold against: a process of this user that ptraces this one or the publisher
(it can change any byte in their memory), or edits this file or twine (docs/publishing.md).
"""

from __future__ import annotations

import argparse
import fcntl
import http
import os
import sys
import zipfile

SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
REFUSED = 3


def _refuse(text: str) -> int:
    print(f"sealed upload refused: {text}; nothing was sent", file=sys.stderr)
    return REFUSED


def _core_metadata(path: str) -> bytes:
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise ValueError(f"expected one .dist-info/METADATA at the top level, found {len(names)}")
        return zf.read(names[0])


def main(argv: list[str]) -> int:
    parent, number, sha256, twine_args = int(argv[0]), int(argv[1]), argv[3], argv[4:]
    filename = os.path.basename(argv[2])
    if os.getppid() != parent:
        return _refuse(f"the publisher (pid {parent}) is not this process's parent")
    try:
        fd = os.open(f"/proc/{parent}/fd/{number}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return _refuse(f"the publisher's sealed copy of {filename} cannot be opened: {exc}")
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError as exc:
        return _refuse(f"descriptor {number} of the publisher is not a sealed memfd: {exc}")
    if seals & SEALS != SEALS:
        return _refuse(f"the copy of {filename} is not sealed against writes (seals {seals:#x})")
    path = f"/proc/self/fd/{fd}"

    import requests
    from packaging.metadata import Metadata, parse_email
    from packaging.version import Version
    from twine import exceptions, utils
    from twine.package import PackageFile
    from twine.settings import Settings

    try:
        parser = argparse.ArgumentParser(prog="twine upload")
        Settings.register_argparse_arguments(parser)
        settings = Settings.from_argparse(parser.parse_args(twine_args))
        settings.check_repository_url()
        meta, unparsed = parse_email(_core_metadata(path))
        if Version(meta.get("metadata_version", "0")) < Version(
            "2.4"
        ):  # as twine's PackageFile.from_filename
            meta.pop("license_files", None)
            unparsed.pop("license-file", None)
        if unparsed:
            raise exceptions.InvalidDistribution(f"Invalid distribution metadata: {sorted(unparsed)}")
        Metadata.from_raw(meta)
        package = PackageFile(path, settings.comment, meta, filename.split("-")[-3], "bdist_wheel")
        package.basefilename = filename  # the name the index files it under: the wheel's, not "/proc/..."
        package.signed_basefilename = filename + ".asc"
        if package.sha2_digest != sha256:
            return _refuse(
                f"twine hashed {filename} as {package.sha2_digest}, the audited bytes have {sha256}"
            )
        print(
            f"Uploading distributions to {utils.sanitize_url(str(settings.repository_config['repository']))}"
        )
        repository = settings.create_repository()
        response = repository.upload(package)
        if response.is_redirect:
            raise exceptions.RedirectDetected.from_args(
                utils.sanitize_url(str(settings.repository_config["repository"])),
                utils.sanitize_url(response.headers["location"]),
            )
        utils.check_status_code(response, settings.verbose)
        repository.close()
    except requests.HTTPError as exc:
        code = exc.response.status_code if exc.response is not None else 0
        try:
            phrase = http.HTTPStatus(code).phrase
        except ValueError:
            phrase = "Unknown Status"
        url = exc.response.url if exc.response is not None else ""
        print(f"HTTPError: {code} {phrase} from {url}", file=sys.stderr)
        return 1
    except Exception as exc:  # twine's, packaging's (an ExceptionGroup), the zip's: said, exit 1
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
