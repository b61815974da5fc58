"""``[[jetson]]``: a Jetson row of its own (the seed's answer, automated): one Tegra GPU, one CUDA train,
one Python, its own builder image. Whether it is filled in (its arch list) or refused (with the reason) is
decided from its GPU dependency's device code (:mod:`release.coverage.jetson`), never taken on faith.

The GPU is named as release/resources/cuda.toml names it (``"Jetson Orin"``); its CPU comes from that
entry (a Jetson is an aarch64 machine), its CUDA train must be one a JetPack of the GPU runs.
"""

from __future__ import annotations

from release.policy.checker import Checker
from release.policy.model import SCHEMA, JetsonRow
from release.resources.cuda import cuda

__all__ = ["load_jetsons"]


def load_jetsons(
    c: Checker, value: object, trains: dict[str, str], pythons: tuple[str, ...]
) -> tuple[JetsonRow, ...]:
    """The ``[[jetson]]`` entries; ``trains`` maps each train of matrix.trains to its variant."""
    tegra = {g.name: g for g in cuda().gpus if g.tegra}
    out: list[JetsonRow] = []
    for where, t in c.entries(value, "jetson", *SCHEMA["jetson"]):
        name = c.string(t["gpu"], f"{where}.gpu")
        if name not in tegra:
            raise c.fail(
                f"{where}.gpu",
                f"{name!r} is not a Jetson GPU of release/resources/cuda.toml; one of: {', '.join(sorted(tegra))}",
            )
        gpu = tegra[name]
        train = c.string(t["train"], f"{where}.train")
        if train not in trains:
            raise c.fail(f"{where}.train", f"{train!r} is not in matrix.trains ({', '.join(trains)})")
        majors = sorted({j.cuda_major for j in gpu.jetpack})
        if int(train.split(".")[0]) not in majors:
            shown = ", ".join(f"JetPack {j.jetpack}: CUDA {j.cuda} ({j.stack})" for j in gpu.jetpack)
            raise c.fail(
                f"{where}.train",
                f"no JetPack for {name} runs CUDA {train} ({shown}); name a train of one of them",
            )
        python = c.string(t["python"], f"{where}.python")
        if python not in pythons:
            raise c.fail(f"{where}.python", f"{python!r} is not in matrix.pythons ({', '.join(pythons)})")
        image = c.token(t["builder_image"], f"{where}.builder_image")
        row = JetsonRow(gpu, train, trains[train], python, image)
        if any(r.id == row.id for r in out):
            raise c.fail(where, f"a second Jetson row {row.id}: one entry per GPU, train and Python")
        out.append(row)
    return tuple(out)
