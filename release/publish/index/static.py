"""A static per-variant package index: plain files for object storage (or ``file://``).

For an index hosted as files (a bucket behind a CDN), with no server to
negotiate content types, one folder per variant holds::

    <root>/index.html                 PEP 503 project list
    <root>/index.json                 PEP 691 project list (api-version 1.1)
    <root>/<project>/index.html       PEP 503 project page, with data-requires-python and
                                      PEP 658/714 data-dist-info-metadata / data-core-metadata
    <root>/<project>/index.json       the same page as PEP 691 JSON
    <root>/files/<wheel>              the wheels
    <root>/files/<wheel>.metadata     each wheel's core metadata (PEP 658)

``pip install --index-url file://<root>/`` works as is (pip opens
``index.html`` for a folder). Served over HTTP, the host must answer
``<root>/<project>/`` with ``index.html`` (an "index document" setting); JSON
clients read ``index.json`` by name. Pages are sorted and carry no timestamps,
so writing the same files twice gives the same bytes.

:func:`add_wheels` copies wheels in under the same rule as a real index: a
different file under an existing name is refused.
"""

from __future__ import annotations

import hashlib
import html
import json
import shutil
import zipfile
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from pathlib import Path
from urllib.parse import quote

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from release.core.errors import CheckFailed, InputError
from release.core.hashing import sha256_file

FILES_DIR = "files"
API_VERSION = "1.1"
METADATA_SUFFIX = ".metadata"


@dataclass(frozen=True)
class StaticFile:
    filename: str
    project: str  # normalized
    version: str
    sha256: str
    size: int
    metadata_sha256: str
    requires_python: str | None


@dataclass(frozen=True)
class StaticIndex:
    root: Path
    files: tuple[StaticFile, ...]

    @property
    def url(self) -> str:
        """The ``file://`` index URL of this folder (for pip's --index-url)."""
        return self.root.resolve().as_uri() + "/"

    @property
    def projects(self) -> tuple[str, ...]:
        return tuple(sorted({f.project for f in self.files}))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_core_metadata(wheel: Path, name: str | None = None) -> bytes:
    """The wheel's ``<name>-<version>.dist-info/METADATA`` bytes, exactly as stored (``name``: the
    wheel's filename in messages, when ``wheel`` is not a path named so)."""
    name = name or wheel.name
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise InputError(
                    f"{name}: expected one .dist-info/METADATA at the top level, found {len(names)}"
                )
            return zf.read(names[0])
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"{name}: not a readable wheel: {exc}") from None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def add_wheels(root: Path, wheels: list[Path]) -> tuple[str, ...]:
    """Copy ``wheels`` into ``<root>/files`` and write their ``.metadata``; return the names added.

    A file already there with the same sha256 is skipped; a different file under
    the same name is refused (CheckFailed) before anything is copied.
    """
    return _add(root, [(w.name, w) for w in wheels])


def add_sealed(root: Path, filename: str, source: Path) -> tuple[str, ...]:
    """:func:`add_wheels` of one wheel named ``filename`` whose bytes are read from ``source``
    (publish's sealed copy, ``/proc/self/fd/N``: :mod:`release.publish.guards.seal`)."""
    return _add(root, [(filename, source)])


def _add(root: Path, wheels: list[tuple[str, Path]]) -> tuple[str, ...]:
    dest = root / FILES_DIR
    problems: list[str] = []
    todo: list[tuple[str, Path]] = []
    for name, source in wheels:
        try:
            parse_wheel_filename(name)
        except InvalidWheelFilename as exc:
            problems.append(f"{name}: not a wheel filename: {exc}")
            continue
        existing = dest / name
        if existing.exists():
            have, new = sha256_file(existing), sha256_file(source)
            if have != new:
                problems.append(
                    f"{name}: the static index already holds a different file under this name "
                    f"(sha256 {have[:16]}..., new {new[:16]}...); an index never holds two files under one name"
                )
            continue
        todo.append((name, source))
    if problems:
        raise CheckFailed("refusing to add to the static index:\n" + "\n".join(f"  - {p}" for p in problems))
    dest.mkdir(parents=True, exist_ok=True)
    for name, source in todo:
        metadata = read_core_metadata(source, name)
        tmp = dest / (name + ".tmp")
        shutil.copyfile(source, tmp)
        (dest / (name + METADATA_SUFFIX)).write_bytes(metadata)
        tmp.replace(dest / name)
    return tuple(name for name, _ in todo)


def _scan(root: Path) -> tuple[StaticFile, ...]:
    files: list[StaticFile] = []
    folder = root / FILES_DIR
    for path in sorted(folder.glob("*.whl")) if folder.is_dir() else []:
        name, version, _, _ = parse_wheel_filename(path.name)
        metadata_path = path.with_name(path.name + METADATA_SUFFIX)
        if not metadata_path.exists():
            metadata_path.write_bytes(read_core_metadata(path))
        metadata = metadata_path.read_bytes()
        headers = BytesHeaderParser().parsebytes(metadata)
        requires_python = headers.get("Requires-Python")
        files.append(
            StaticFile(
                filename=path.name,
                project=str(name),
                version=str(version),
                sha256=sha256_file(path),
                size=path.stat().st_size,
                metadata_sha256=_sha256(metadata),
                requires_python=str(requires_python).strip() if requires_python else None,
            )
        )
    return tuple(files)


_HTML_HEAD = '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n    <title>{title}</title>\n  </head>\n  <body>\n'
_HTML_TAIL = "  </body>\n</html>\n"


def _root_html(projects: list[str]) -> str:
    links = "".join(f'    <a href="{quote(p)}/">{html.escape(p)}</a><br>\n' for p in projects)
    return _HTML_HEAD.format(title="Simple index") + links + _HTML_TAIL


def _project_html(project: str, files: list[StaticFile]) -> str:
    lines = []
    for f in files:
        attrs = [f'href="../{FILES_DIR}/{quote(f.filename)}#sha256={f.sha256}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python, quote=True)}"')
        attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
        attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
        lines.append(f"    <a {' '.join(attrs)}>{html.escape(f.filename)}</a><br>\n")
    return _HTML_HEAD.format(title=f"Links for {html.escape(project)}") + "".join(lines) + _HTML_TAIL


def _project_json(project: str, files: list[StaticFile]) -> str:
    data = {
        "meta": {"api-version": API_VERSION},
        "name": project,
        "versions": sorted({f.version for f in files}),
        "files": [
            {
                "filename": f.filename,
                "url": f"../{FILES_DIR}/{quote(f.filename)}",
                "hashes": {"sha256": f.sha256},
                "requires-python": f.requires_python,
                "size": f.size,
                "core-metadata": {"sha256": f.metadata_sha256},
                "dist-info-metadata": {"sha256": f.metadata_sha256},
                "yanked": False,
            }
            for f in files
        ],
    }
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def write_static_index(root: Path) -> StaticIndex:
    """(Re)write every page of the static index in ``root`` from ``<root>/files``."""
    files = _scan(root)
    projects = sorted({f.project for f in files})
    _write(root / "index.html", _root_html(projects))
    _write(
        root / "index.json",
        json.dumps(
            {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in projects]},
            indent=1,
            sort_keys=True,
        )
        + "\n",
    )
    for project in projects:
        mine = [f for f in files if f.project == project]
        _write(root / project / "index.html", _project_html(project, mine))
        _write(root / project / "index.json", _project_json(project, mine))
    return StaticIndex(root, files)


def build_static_index(root: Path, wheels: list[Path]) -> StaticIndex:
    """Add ``wheels`` (exactly-once rule) and rewrite the pages: the one call a release needs."""
    add_wheels(root, wheels)
    return write_static_index(root)
