"""Published wheels the real-binary tests read, pinned by file name and sha256, fetched into a cache.

The tests never read a machine-specific folder. :func:`real_wheel` returns the cached
file, fetching it first with ``pip download --no-deps --require-hashes`` through this
machine's pip configuration (its index, find-links or proxy: wherever pip finds
published wheels), and checks its sha256. When it cannot, the test fails, naming the
wheel and what to do; it is never skipped.

Cache: ``$WHEELWRIGHT_CACHE/test-wheels`` (default ``~/.cache/wheelwright/test-wheels``).
A file whose sha256 is wrong is removed and fetched again. A file this process has already
hashed and found right is not hashed again while its inode, size and modification time stay
the same (the slow tier asks for the same 0.5 GB wheels dozens of times).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from release.core.machine import default_cache_dir

PIP_TIMEOUT_S = 1800  # a 555 MB wheel over a slow link


@dataclass(frozen=True)
class Pin:
    project: str
    version: str
    filename: str
    sha256: str

    @property
    def key(self) -> str:
        """``nvidia_curand``, ``torch``: the file name's distribution part."""
        return self.filename.split("-")[0]


def _pin(filename: str, sha256: str) -> Pin:
    name, version, _build, _tags = parse_wheel_filename(filename)
    return Pin(str(name), str(version), filename, sha256)


# The CUDA 13 library wheels torch 2.14.1 cu130 depends on, and torch itself (x86_64, CPython 3.11).
PINS: tuple[Pin, ...] = (
    _pin(
        "nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl",
        "37936a16db8fe4ac1f065c2139360608a543a09275cb1a1af612e08cfa065436",
    ),
    _pin(
        "nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl",
        "4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8",
    ),
    _pin(
        "nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
        "ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575",
    ),
    _pin(
        "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
        "71f181cd810e90f9b6023b01186fe82d13d65f0ec098581ee201d39fad769e4b",
    ),
    _pin(
        "nvidia_cufft-12.0.0.61-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "6c44f692dce8fd5ffd3e3df134b6cdb9c2f72d99cf40b62c32dde45eea9ddad3",
    ),
    _pin(
        "nvidia_cufile-1.15.1.6-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "08a3ecefae5a01c7f5117351c64f17c7c62efa5fffdbe24fc7d298da19cd0b44",
    ),
    _pin(
        "nvidia_curand-10.4.0.35-py3-none-manylinux_2_27_x86_64.whl",
        "1aee33a5da6e1db083fe2b90082def8915f30f3248d5896bcec36a579d941bfc",
    ),
    _pin(
        "nvidia_cusolver-12.0.4.66-py3-none-manylinux_2_27_x86_64.whl",
        "0a759da5dea5c0ea10fd307de75cdeb59e7ea4fcb8add0924859b944babf1112",
    ),
    _pin(
        "nvidia_cusparse-12.6.3.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "2b3c89c88d01ee0e477cb7f82ef60a11a4bcd57b6b87c33f789350b59759360b",
    ),
    _pin(
        "nvidia_cusparselt_cu13-0.8.1-py3-none-manylinux2014_x86_64.whl",
        "786ce87568c303fadb5afcc7102d454cd3040d75f6f8626f5db460d1871f4dd0",
    ),
    _pin(
        "nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl",
        "cefa7fdb9710efd0f39c5f1be1d61ff6fc9a996c451265bd7fbdcf9455ed4b50",
    ),
    _pin(
        "nvidia_nvjitlink-13.4.92-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl",
        "e0391f24ed94ec879b84e3da4d4ec320c879aff681f2c7a638462f7199284323",
    ),
    _pin(
        "nvidia_nvshmem_cu13-3.4.5-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "290f0a2ee94c9f3687a02502f3b9299a9f9fe826e6d0287ee18482e78d495b80",
    ),
    _pin(
        "nvidia_nvtx-13.0.85-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.whl",
        "4936d1d6780fbe68db454f5e72a42ff64d1fd6397df9f363ae786930fd5c1cd4",
    ),
    _pin(
        "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        "305a61f61f35f128579f299c5bd33d475f6a01c6307336139632e30856c4854d",
    ),
    _pin(
        "torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        "2cb678029a5dd45afbbfa662fce49736827d52be33242b5a8a731e0db02ccdf5",
    ),
)
BY_KEY = {pin.key: pin for pin in PINS}

# the audit corpus: the third-party CUDA wheels the audit tests (test_audit_corpus.py) and the
# benchmark (benchmarks/audit_vs_auditwheel.py) read, smallest first
CORPUS = (
    "torchvision",
    "nvidia_cufile",
    "nvidia_curand",
    "nvidia_nvshmem_cu13",
    "nvidia_nccl_cu13",
    "nvidia_cusparse",
    "nvidia_cufft",
    "nvidia_cudnn_cu13",
)


class FetchError(Exception):
    """A pinned wheel could not be fetched, or is not the pinned file."""


def cache_dir() -> Path:
    return default_cache_dir(os.environ) / "test-wheels"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_args(pin: Pin, requirements: Path, dest: Path) -> list[str]:
    """``pip download`` of exactly the pinned file, whatever the interpreter running the tests."""
    _name, _version, _build, tags = parse_wheel_filename(pin.filename)
    args = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input"]
    for platform in sorted({t.platform for t in tags}):
        args += ["--platform", platform]
    cpython = sorted({t.interpreter for t in tags if t.interpreter.startswith("cp")})
    if cpython:
        version = cpython[0][2:]
        args += ["--implementation", "cp", "--python-version", f"{version[0]}.{version[1:]}"]
        args += [arg for abi in sorted({t.abi for t in tags}) for arg in ("--abi", abi)]
    return [*args, "--require-hashes", "-r", str(requirements), "--dest", str(dest)]


# files this process hashed and found to be their pin: path -> (sha256, inode, size, mtime in ns)
_VERIFIED: dict[Path, tuple[str, int, int, int]] = {}


def _stamp(path: Path, sha256: str) -> tuple[str, int, int, int]:
    st = path.stat()
    return (sha256, st.st_ino, st.st_size, st.st_mtime_ns)


def is_pinned_file(path: Path, sha256: str) -> bool:
    """Whether ``path`` holds the bytes of ``sha256``: hashed once per process, and again whenever the
    file's inode, size or modification time differs from when it was hashed."""
    if _VERIFIED.get(path) == _stamp(path, sha256):
        return True
    stamp = _stamp(path, sha256)
    if sha256_of(path) != sha256:
        _VERIFIED.pop(path, None)
        return False
    _VERIFIED[path] = stamp
    return True


def fetch(pin: Pin, *, into: Path | None = None) -> Path:
    """The pinned wheel in the cache, fetched first if absent or wrong. Raises FetchError."""
    folder = cache_dir() if into is None else into
    target = folder / pin.filename
    if target.is_file():
        if is_pinned_file(target, pin.sha256):
            return target
        target.unlink()  # a damaged or different file: fetch it again
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{pin.key}-", dir=folder) as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(
            f"{pin.project}=={pin.version} --hash=sha256:{pin.sha256}\n", encoding="utf-8"
        )
        dest = Path(tmp) / "out"
        args = _download_args(pin, requirements, dest)
        try:
            result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise FetchError(
                f"{pin.filename}: `pip download` did not finish within {PIP_TIMEOUT_S} s: {' '.join(args)}"
            ) from None
        got = dest / pin.filename
        if result.returncode != 0 or not got.is_file():
            tail = "\n".join((result.stderr + result.stdout).strip().splitlines()[-15:])
            found = sorted(p.name for p in dest.glob("*")) if dest.is_dir() else []
            raise FetchError(
                f"{pin.filename} (sha256 {pin.sha256}) could not be fetched: `{' '.join(args)}` exited "
                f"{result.returncode}{f' and saved {found}' if found else ''}\n{tail}\n"
                f"configure pip (pip config list) to reach an index or find-links folder that holds it, "
                f"or put the file into {folder}"
            )
        digest = sha256_of(got)
        if digest != pin.sha256:
            raise FetchError(
                f"{pin.filename}: pip saved a file with sha256 {digest}; the pin is {pin.sha256}"
            )
        os.replace(got, target)
    return target


def real_wheel(key: str) -> Path:
    """The pinned wheel ``key`` (``torch``, ``nvidia_curand``), or the test fails saying why."""
    try:
        return fetch(BY_KEY[key])
    except FetchError as exc:
        pytest.fail(str(exc), pytrace=False)


# aarch64 CUDA wheels the audit judges on an x86_64 machine (tests/integration/test_audit_aarch64_real.py),
# each with its x86_64 twin (the same project and version): the verdict must be the twin's. All four ship a
# C++ SDK (nvidia/cu13/include next to nvidia/cu13/lib), which the C++ consumer links with a toolchain for
# aarch64. Keyed apart from PINS: the file name's distribution part is the same for both architectures.
AARCH64_PINS: tuple[Pin, ...] = (
    _pin(
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        "ef9bcbe90493a2b9d810e43d249adb3d02e98dd30200d86607d8d02687c43f55",
    ),
    _pin(
        "nvidia_cufile-1.15.1.6-py3-none-manylinux_2_27_aarch64.whl",
        "bdc0deedc61f548bddf7733bdc216456c2fdb101d020e1ab4b88d232d5e2f6d1",
    ),
    _pin(
        "nvidia_curand-10.4.0.35-py3-none-manylinux_2_27_aarch64.whl",
        "133df5a7509c3e292aaa2b477afd0194f06ce4ea24d714d616ff36439cee349a",
    ),
    _pin(
        "nvidia_nvjitlink-13.4.92-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        "25f74fad0d654271c921ac4dca614bd6258bc21791242fc7b2289dad7ae9c099",
    ),
)
AARCH64_BY_KEY = {pin.key: pin for pin in AARCH64_PINS}
# x86_64 twins of AARCH64_PINS that PINS does not hold (the others are PINS' own files)
TWIN_PINS: tuple[Pin, ...] = (
    _pin(
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
    ),
)


# torch 2.14.1 for aarch64 (CPython 3.11, 454 MB), the GPU dependency `coverage` reads for an aarch64 row
# (tests/integration/test_coverage_torch.py). Apart from AARCH64_PINS, whose every pin has an audit verdict.
TORCH_AARCH64 = _pin(
    "torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl",
    "ef1276fd07adb8d463ac402a24ea7482e45c9a42df8ebdac211aa757779200ba",
)


def real_torch_aarch64() -> Path:
    """The pinned aarch64 torch wheel, or the test fails saying why."""
    try:
        return fetch(TORCH_AARCH64)
    except FetchError as exc:
        pytest.fail(str(exc), pytrace=False)


def real_aarch64_wheel(key: str) -> Path:
    """The pinned aarch64 wheel ``key`` (``nvidia_curand``), or the test fails saying why."""
    try:
        return fetch(AARCH64_BY_KEY[key])
    except FetchError as exc:
        pytest.fail(str(exc), pytrace=False)


def x86_64_twin(key: str) -> Path:
    """The x86_64 wheel of the same project and version as the aarch64 pin ``key``."""
    twin = AARCH64_BY_KEY[key].filename.split("-")[:3]
    for pin in (*PINS, *TWIN_PINS):
        if pin.filename.split("-")[:3] == twin and pin.filename.endswith("_x86_64.whl"):
            try:
                return fetch(pin)
            except FetchError as exc:
                pytest.fail(str(exc), pytrace=False)
    pytest.fail(f"no x86_64 twin of {AARCH64_BY_KEY[key].filename} is pinned", pytrace=False)


# The survey of real CUDA wheels (docs/survey.md, issue 24 item 3): popular CUDA wheels of many projects, each
# audited standalone from an empty folder. x86_64, CPython 3.12 (or abi3/py3); tests/integration/
# test_audit_survey.py audits SURVEY_TESTED, the small ones (285 MB together), and asserts each verdict.
SURVEY_PINS: tuple[Pin, ...] = (
    _pin(
        "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl",
        "55348a9a4a21bfd99cf8c7b32fe67b4030ae5c2a05738e03c1747f65fa6ec283",
    ),
    _pin(
        "ctranslate2-4.8.5-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "86876e8b579ef61e4d1402002f7728fca40967fe79ac2ef71a65d1b8dc5a18ee",
    ),
    _pin(
        "cucim_cu12-26.10.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "fd4caff89d9f99a7ea51386c71583c922abed0cd79ef35ee493563d780c100ad",
    ),
    _pin(
        "cuda_bindings-13.5.0-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "a46a8cc84112d769d0f57bf3ae3fedc115cf09348f14da85a1a8200968b6f262",
    ),
    _pin(
        "cumm_cu120-0.6.3-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "4e7c5911ccc99855154f5f2e1dd8602464769847232f8fcef3110b8ab2f5abd4",
    ),
    _pin(
        "cupy_cuda12x-14.2.0-cp312-cp312-manylinux2014_x86_64.whl",
        "f82141761f2c81905d49387464ae29438887956d99063381c93a1d5d1b7d32e8",
    ),
    _pin(
        "cupy_cuda13x-14.2.0-cp312-cp312-manylinux2014_x86_64.whl",
        "9aafadbe29db3d4285026044aafeb28f2a3de4bd0df70718ec6892b7d27a4ded",
    ),
    _pin(
        "cutensor_cu12-2.8.1-py3-none-manylinux2014_x86_64.whl",
        "07193cd98a7132ace004c0cc501756a56dcf8a4b1a611c7804816eae3a03eb75",
    ),
    _pin(
        "cuvs_cu12-26.10.0-cp311-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "6b4ba981a47ec588abd280d6f72e170b7c8f842917a310df996261e999d1f6d8",
    ),
    _pin(
        "faiss_gpu_cu12-1.14.1.post1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d997b9a4d9c7697e3ce39576edb91733c20ac2e81b455b4c08afea9d69e894cf",
    ),
    _pin(
        "jax_cuda12_pjrt-0.12.0.1-py3-none-manylinux_2_27_x86_64.whl",
        "5ec28e06198d094031c37590b4ea753ae8cde4879ab4b60baf40f0dffb673286",
    ),
    _pin(
        "jax_cuda12_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl",
        "61dc67a8341ad6a0bb59631307914581ad16055f6c5635a2b7e57dfffb77e466",
    ),
    _pin(
        "jax_cuda13_plugin-0.12.0.1-cp312-cp312-manylinux_2_27_x86_64.whl",
        "6028faf179e7aa7cc64100ed3c7c7b1b11346f5aa05d5e9e33e8fe60c5289fa1",
    ),
    _pin(
        "librmm_cu12-26.10.0-py3-none-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "c4269c256b35364007c8c53c15060fd04c9762c488c943ea8ab7ede37234beaa",
    ),
    _pin(
        "nvidia_dali_cuda120-2.4.0-py3-none-manylinux_2_28_x86_64.whl",
        "8be1bf9137cf4e3a62b51db5de818226ef6c81ec17791672d06ed5351d6e8eb1",
    ),
    _pin(
        "nvmath_python-1.0.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "74127b86957521fc5434a3b90c20be9e0fb45fe497cef17e12d3e776cf241cbd",
    ),
    _pin(
        "onnxruntime_gpu-1.31.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        "05d548956197b9d01f59b625de740e0d6be3593f874e241a12dc0362650ecdf7",
    ),
    _pin(
        "pylibraft_cu12-26.10.0-cp311-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "103b13d37424b2239237ed2d1fb1948bc4b296c4addf93c478eb791a89ca09d0",
    ),
    _pin(
        "rmm_cu12-26.10.0-cp311-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "59e7cdf116d5a92aa986abc73cd876eb1dd6c43f2df216773dcacca05cd04b85",
    ),
    _pin(
        "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl",
        "57dfb3a2a3cd759f499c32e2bad5f6489b7c58f7f9a84ee00c53ec92d303aaab",
    ),
    _pin(
        "spconv_cu126-2.3.8-cp312-cp312-manylinux_2_28_x86_64.whl",
        "88002b375d33561ac956e29e00dade16cad11d0e3413630a8ef35e92ddfda6e1",
    ),
    _pin(
        "torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl",
        "0173b5b51e1368aa88de3cbe4e98508b5e9df4d8d59356c4e1fbc830c96191ef",
    ),
    _pin(
        "triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "5e52ab4e2f1d64f0ac494c9aa723697b793f81a91c4cae4c36608ca0bc4267bf",
    ),
    _pin(
        "warp_lang-1.19.0-py3-none-manylinux_2_28_x86_64.whl",
        "c797f5f4aa9925f676e20dd28e5416fee794499f3f3c0a5b66f2d4dfc2de9e32",
    ),
    _pin(
        "xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl",
        "ccc73c7db9890224ab05f5fb60e2034f9e6c8672a10be0cf00e95cbbae3eda7c",
    ),
)
SURVEY_BY_KEY = {pin.key: pin for pin in SURVEY_PINS}
# the ones the test audits, smallest first
SURVEY_TESTED = (
    "rmm_cu12",
    "torchaudio",
    "xformers",
    "jax_cuda12_plugin",
    "cucim_cu12",
    "cumm_cu120",
    "ctranslate2",
    "bitsandbytes",
    "cupy_cuda13x",
    "spconv_cu126",
)


def survey_wheel(key: str) -> Path:
    """The pinned survey wheel ``key`` (``cupy_cuda13x``), or the test fails saying why."""
    try:
        return fetch(SURVEY_BY_KEY[key])
    except FetchError as exc:
        pytest.fail(str(exc), pytrace=False)
