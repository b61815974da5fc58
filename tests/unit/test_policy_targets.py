"""Target and index rules, checked at load: each with URLs that must fail it and URLs that must pass.

The bad-policy fixtures show each rule refusing a whole file through the loader; here the
pure rules are pinned down case by case, and valid targets load.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.policy import stub_project

from release.core.errors import PolicyError
from release.policy.load import load_policy
from release.policy.targets import (
    KNOWN_INDEXES,
    IndexTarget,
    index_identity,
    join_url,
    url_problem,
    variant_index_problems,
)

ROOT = Path(__file__).resolve().parents[2]

OK_EVERYWHERE = [
    "pypi",
    "testpypi",
    "https://wheels.example.invalid/whl/cu130/",
    "https://wheels.example.invalid:8443/whl/cu130",
    "HTTPS://Wheels.Example.Invalid/whl/",
]
OK_FOR_REHEARSAL = [
    "http://127.0.0.1:8080/cu130/simple/",
    "http://127.5.6.7/cu130/",
    "http://[::1]:9000/cu130/",
    "http://localhost:8080/cu130/",
    "file:///srv/wheels/cu130/",
    "file://localhost/srv/wheels/cu130/",
]


@pytest.mark.parametrize("url", OK_EVERYWHERE)
@pytest.mark.parametrize("use", ["production", "rehearsal", "channel"])
def test_https_urls_and_known_names_pass(url: str, use: str) -> None:
    assert url_problem(url, use) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("url", OK_FOR_REHEARSAL)
def test_loopback_http_and_file_pass_for_rehearsals_and_channels_only(url: str) -> None:
    assert url_problem(url, "rehearsal") is None
    assert url_problem(url, "channel") is None
    problem = url_problem(url, "production")
    assert problem is not None and "a non-rehearsal target publishes over https:// only" in problem


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("pypy", "neither a URL nor a known index name (pypi, testpypi)"),
        ("PyPI", "neither a URL nor a known index name"),
        ("", "neither a URL nor a known index name"),
        ("https://user:SECRET@wheels.example.invalid/whl/", "credentials never go in rows.toml"),
        ("https://SECRET@wheels.example.invalid/whl/", "credentials never go in rows.toml"),
        ("https://wheels.example.invalid/whl/?token=SECRET", "has a query string"),
        ("https://wheels.example.invalid/whl/?", "has a query string"),
        ("https://wheels.example.invalid/whl/#SECRET", "has a '#' fragment"),
        ("https://wheels.example.invalid/whl/#", "has a '#' fragment"),
        ("ftp://wheels.example.invalid/whl/", "uses ftp://"),
        ("javascript://x/", "uses javascript://"),
        ("https:///whl/", "has no host"),
        ("https://wheels.example.invalid:99999/", "is not a valid URL"),
        ("https://wheels.example.invalid:port/", "is not a valid URL"),
        ("http://[::1/", "is not a valid URL"),
        ("https://wheels.example.invalid/a b/", "it has spaces, control or non-ASCII characters"),
        ("https://wheels.example.invalid/whl/\n", "it has spaces, control or non-ASCII characters"),
        ("https://whéels.example.invalid/", "non-ASCII"),
        ("http://wheels.example.invalid/whl/", "not loopback"),
        ("http://127.0.0.1.example.invalid/", "not loopback"),
        ("file://server/share/whl/", "not a local file:// URL"),
    ],
)
def test_bad_urls_are_refused_without_repeating_them(url: str, fragment: str) -> None:
    problem = url_problem(url, "rehearsal")
    assert problem is not None and fragment in problem, problem
    assert "SECRET" not in problem


def test_index_identity_ignores_spelling_not_place() -> None:
    same = {
        index_identity(u)
        for u in (
            "https://wheels.example.invalid/whl/cu130/",
            "https://WHEELS.example.invalid/whl/cu130",
            "HTTPS://wheels.example.invalid:443/whl/cu130/",
        )
    }
    assert len(same) == 1
    different = {
        index_identity(u)
        for u in (
            "https://wheels.example.invalid/whl/cu130/",
            "https://wheels.example.invalid/whl/CU130/",
            "https://wheels.example.invalid:8443/whl/cu130/",
            "http://wheels.example.invalid/whl/cu130/",
            "pypi",
            "testpypi",
        )
    }
    assert len(different) == 6
    assert index_identity("http://[::1]:80/x") == "http://127.0.0.1/x/"  # loopback: one machine


@pytest.mark.parametrize(
    "alias",
    [
        "http://localhost:8080/cu130/",
        "http://LocalHost:8080/cu130",
        "http://localhost.:8080/cu130/",
        "http://127.0.0.1:8080/cu130/",
        "http://127.0.0.2:8080/cu130/",
        "http://127.1:8080/cu130/",
        "http://[::1]:8080/cu130/",
        "http://[::ffff:127.0.0.1]:8080/cu130/",
        "HTTP://127.0.0.1:8080//cu130/./",
        "http://127.0.0.1:8080/whl/../cu130",
    ],
)
def test_index_identity_one_loopback_index_under_many_spellings(alias: str) -> None:
    assert index_identity(alias) == "http://127.0.0.1:8080/cu130/"


def test_index_identity_keeps_what_tells_indexes_apart() -> None:
    assert len({index_identity(f"http://127.0.0.1:{p}/cu130/") for p in (8080, 8081)}) == 2
    assert index_identity("https://h.invalid:443/a/") == index_identity("https://H.invalid/a")
    assert index_identity("https://[2001:DB8::1]/a") == "https://[2001:db8::1]/a/"
    assert index_identity("https://10.0.0.1/a") != index_identity("https://127.0.0.1/a")
    assert index_identity("file://localhost/srv/idx/cu130") == index_identity("file:///srv/idx/cu130/")


def test_the_issue_alias_and_a_simple_root_are_one_index() -> None:
    port = 8080
    issue = {
        "cu130": _index("cu130", f"http://127.0.0.1:{port}/cu130/", f"http://127.0.0.1:{port}/cu130/simple/"),
        "cu132": _index("cu132", f"http://localhost:{port}/cu130/", f"http://localhost:{port}/cu130/simple/"),
    }
    [(variant, key, problem)] = variant_index_problems(issue)
    assert (variant, key) == ("cu132", "upload_url")
    assert problem.startswith("is the same index as index.cu130.upload_url (")
    assert "give index.cu132 an upload_url and simple_url of its own" in problem
    crossed = {  # cu132 uploads where cu130 is read: <root>/ and <root>/simple/ are one index
        "cu130": _index("cu130", "https://h.invalid/up/cu130/", "https://h.invalid/whl/cu130/simple/"),
        "cu132": _index("cu132", "https://h.invalid/whl/cu130/", "https://h.invalid/whl/cu132/simple/"),
    }
    [(variant, key, problem)] = variant_index_problems(crossed)
    assert (variant, key) == ("cu132", "upload_url") and "index.cu130.simple_url" in problem
    apart = {
        "cu130": _index("cu130", "https://h.invalid/cu130/", "https://h.invalid/cu130/simple/"),
        "cu132": _index("cu132", "https://h.invalid/cu132/", "https://h.invalid/cu132/simple/"),
    }
    assert variant_index_problems(apart) == []


def _index(variant: str, upload: str, simple: str) -> IndexTarget:
    return IndexTarget(variant, upload, simple, None)


def test_cross_variant_rules() -> None:
    good = {
        "cpu": _index("cpu", "pypi", "pypi"),
        "cu130": _index("cu130", "https://h.invalid/up/cu130/", "https://h.invalid/whl/cu130/"),
        "cu132": _index("cu132", "https://h.invalid/up/cu132/", "https://h.invalid/whl/cu132/"),
    }
    assert variant_index_problems(good) == []
    for name in KNOWN_INDEXES:
        on_public = {**good, "cu130": _index("cu130", name, "https://h.invalid/whl/cu130/")}
        variant, key, problem = variant_index_problems(on_public)[0]  # first: the most telling
        assert (variant, key) == ("cu130", "upload_url")
        assert f"may not go to the public index {name!r}" in problem
    shared = {**good, "cu132": _index("cu132", "https://h.invalid/up/cu132/", "https://H.invalid/whl/cu130")}
    [(variant, key, problem)] = variant_index_problems(shared)
    assert (variant, key) == ("cu132", "simple_url")
    assert "is the same index as index.cu130.simple_url" in problem
    cpu_elsewhere = {**good, "cpu": _index("cpu", "testpypi", "https://h.invalid/whl/cpu/")}
    assert variant_index_problems(cpu_elsewhere) == []


def test_join_url_joins_as_a_url() -> None:
    assert join_url("https://h.invalid/simple", "tiny-axpy") == "https://h.invalid/simple/tiny-axpy/"
    assert join_url("https://h.invalid/simple/", "tiny-axpy") == "https://h.invalid/simple/tiny-axpy/"
    assert join_url("https://h.invalid/simple/?t=x#f", "p") == "https://h.invalid/simple/p/"
    assert join_url("https://h.invalid/simple/", "a/b", "c?d") == "https://h.invalid/simple/a%2Fb/c%3Fd/"
    assert join_url("file:///srv/idx", "p") == "file:///srv/idx/p/"


def _policy_with_targets(tmp_path: Path, targets: str) -> Path:
    text = (ROOT / "rows.toml").read_text(encoding="utf-8")
    head = text[: text.index("[target.rehearsal]")]
    path = tmp_path / "targets.toml"
    path.write_text(head + targets, encoding="utf-8")
    stub_project(tmp_path, "examples/tinyaxpy")
    return path


def _indexes(upload: str, simple: str, variants: tuple[str, ...]) -> str:
    """A target's ``index.<variant> = {...}`` lines; ``{v}`` in the URLs stands for the variant."""
    return "\n".join(
        f'index.{v} = {{ upload_url = "{upload.format(v=v)}", simple_url = "{simple.format(v=v)}" }}'
        for v in variants
    )


def test_valid_targets_load(tmp_path: Path) -> None:
    every = ("cpu", "cu126", "cu130", "cu132")
    loopback = _indexes("http://127.0.0.1:8080/{v}/", "http://[::1]:8080/{v}/simple/", every)
    files = _indexes("file:///srv/idx/{v}/", "file:///srv/idx/{v}/", every)
    prod = _indexes("https://h.invalid/up/{v}/", "https://h.invalid/{v}/", every[1:])
    path = _policy_with_targets(
        tmp_path,
        f"[target.local]\nrehearsal = true\n{loopback}\n[target.static]\nrehearsal = true\n{files}\n"
        f'[target.prod]\nrehearsal = false\nindex.cpu = {{ upload_url = "testpypi", simple_url = "testpypi" }}\n{prod}\n'
        '[[dependency]]\npackage = "torchao"\nindex = "http://127.0.0.1:9/whl/"\n'
        '[[dependency]]\npackage = "torchao"\nindex = "pypi"\n',
    )
    policy = load_policy(path)
    assert sorted(policy.targets) == ["local", "prod", "static"]
    assert policy.targets["prod"].indexes["cpu"].is_repository_name
    assert [d.index for d in policy.dependencies] == ["http://127.0.0.1:9/whl/", "pypi"]


def test_a_refusal_names_file_target_variant_and_key(tmp_path: Path) -> None:
    prod = _indexes("https://h.invalid/up/{v}/", "https://h.invalid/{v}/", ("cpu", "cu126", "cu130"))
    path = _policy_with_targets(
        tmp_path,
        f'[target.prod]\nrehearsal = false\n{prod}\nindex.cu132 = {{ upload_url = "https://h.invalid/up/cu132/", '
        'simple_url = "https://h.invalid/cu130" }\n',
    )
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value).startswith(
        f"{path}: target.prod.index.cu132.simple_url: is the same index as index.cu130.simple_url"
    )
