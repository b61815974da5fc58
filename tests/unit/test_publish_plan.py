"""Pure parts of publishing: the plan, the guards, credentials, redaction, index parsing, channels."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

from release.core.errors import CheckFailed, InputError, StepFailed
from release.policy.load import load_policy
from release.policy.targets import IndexTarget, Target
from release.publish.channels import ChannelRule, check_channels, tag_arch
from release.publish.dist_wheels import collect_wheels
from release.publish.guards.conflicts import removal_action
from release.publish.guards.deadlines import Deadlines, deadlines_for
from release.publish.guards.plan import (
    LocalWheel,
    check_audit_record,
    check_local_set,
    check_sizes,
    check_target_urls,
    credential_env_names,
    plan_publish,
    resolve_credentials,
    twine_command,
    twine_env,
    unexpected_problem,
    verify_published,
)
from release.publish.guards.readback import served_problem
from release.publish.index.client import (
    IndexFile,
    Redactor,
    Served,
    parse_html_project,
    parse_json_project,
    redact_url,
    resolve_simple_url,
    split_userinfo,
)
from release.publish.index.listing import duplicates, listing_problems
from release.publish.index.static import build_static_index, write_static_index
from release.publish.upload import publish
from release.records import wheel_variant

ROOT = Path(__file__).resolve().parents[2]

POLICY = "a" * 64
W1 = "wwdemo-1.5.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
W2 = "wwdemo-1.5.0+cu130-cp313-cp313-manylinux_2_28_x86_64.whl"


def _wheel(filename: str, sha: str = "1" * 64, size: int = 10) -> LocalWheel:
    return LocalWheel(Path("/dist") / filename, filename, sha, "cu130-py312-x86_64", size)


def _target(rehearsal: bool = False, upload_url: str = "http://127.0.0.1:9/cu130/") -> Target:
    index = IndexTarget("cu130", upload_url, "http://127.0.0.1:9/cu130/simple/", None)
    return Target("prod" if not rehearsal else "rehearsal", rehearsal, {"cu130": index})


FAILED = {"check": "device_code", "ok": False, "message": "no sm_90", "library": None, "details": {}}


def _record(filename: str = W1, **overrides: object) -> dict[str, object]:
    record: dict[str, object] = {
        "version": 1,
        "wheel": filename,
        "sha256": "1" * 64,
        "row": "cu130-py312-x86_64",
        "variant": "cu130",
        "policy_sha256": POLICY,
        "passed": True,
        "findings": [],
    }
    record.update(overrides)
    return record


# --- plan_publish -------------------------------------------------------------


def test_plan_uploads_new_skips_same_and_stops_on_a_different_file() -> None:
    plan = plan_publish(
        [_wheel(W1, "1" * 64), _wheel(W2, "2" * 64), _wheel("wwdemo-1.5.0+cu130-py3-none-any.whl", "3" * 64)],
        {W1: "1" * 64, W2: "9" * 64},
    )
    assert [w.filename for w in plan.to_upload] == ["wwdemo-1.5.0+cu130-py3-none-any.whl"]
    assert [w.filename for w in plan.skip_same] == [W1]
    assert [(c.filename, c.remote_sha256) for c in plan.conflicts] == [(W2, "9" * 64)]
    assert not plan.ok
    assert "never holds two files under one name" in plan.problems()[0]


def test_plan_compares_wheel_identity_not_spelling_and_hash_case() -> None:
    remote = {"WWDemo-1.5.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl": "AB" * 32}
    plan = plan_publish([_wheel(W1, "ab" * 32)], remote)
    assert plan.to_upload == () and len(plan.skip_same) == 1 and plan.ok


def test_plan_flags_stray_files_of_this_version_only() -> None:
    remote = {
        "wwdemo-1.5.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl": "4" * 64,  # wrong variant here
        "wwdemo-1.5.0.tar.gz": "5" * 64,  # an sdist of this version
        "wwdemo-1.4.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl": "6" * 64,  # last release: fine
        "other-1.5.0-py3-none-any.whl": "7" * 64,  # another project: fine
        "README.txt": "8" * 64,
    }
    plan = plan_publish([_wheel(W1)], remote)
    assert plan.unexpected == (
        "wwdemo-1.5.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl",
        "wwdemo-1.5.0.tar.gz",
    )
    assert [w.filename for w in plan.to_upload] == [W1]


def test_plan_of_nothing_remote_uploads_everything_in_a_stable_order() -> None:
    plan = plan_publish([_wheel(W2), _wheel(W1)], {})
    assert [w.filename for w in plan.to_upload] == [W1, W2] and plan.ok


def test_verify_published_both_ways() -> None:
    local = [_wheel(W1, "1" * 64), _wheel(W2, "2" * 64)]
    assert verify_published(local, {W1: "1" * 64, W2: "2" * 64}) == []
    problems = verify_published(local, {W1: "1" * 64, "wwdemo-1.5.0+cu130-py3-none-any.whl": "3" * 64})
    assert problems == [
        f"{W2}: not on the index after uploading [rule: read-back]",
        unexpected_problem("wwdemo-1.5.0+cu130-py3-none-any.whl"),
    ]
    assert "the index already holds" in verify_published(local, {W1: "1" * 64, W2: "f" * 64})[0]


# --- audit records and the local set --------------------------------------------


def test_a_good_record_passes() -> None:
    assert check_audit_record(W1, "1" * 64, _record(), policy_sha256=POLICY, variant="cu130") is None


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (None, "no audit record"),
        ([], "not a JSON object"),
        (_record(version=2), "version 2; this wheelwright reads version 1"),
        ({**_record(), "extra": 1}, "unknown keys ['extra']"),
        (_record(wheel=W2), "the record is for"),
        (_record(passed=False, findings=[FAILED]), "its audit failed (1 finding(s): no sm_90"),
        (_record(passed="true"), "'passed' is 'true'"),
        (_record(passed=True, findings=[FAILED]), "'passed' contradicts its findings"),
        (_record(findings=[{"m": "x"}]), "findings[0] is not a finding"),
        (_record(policy_sha256="b" * 64), "audited against another rows.toml"),
        (_record(sha256="2" * 63), "not a sha256"),
        (_record(row=None), "audited against a variant, not a row"),
        (_record(variant="cu126"), "audited as variant 'cu126'"),
        (_record(sha256="2" * 64), "changed since it was audited"),
    ],
)
def test_records_that_refuse(record: object, expected: str) -> None:
    problem = check_audit_record(W1, "1" * 64, record, policy_sha256=POLICY, variant="cu130")
    assert problem is not None and expected in problem and W1 in problem


def test_local_set_must_equal_the_expected_files() -> None:
    assert check_local_set([W1], None) == []
    assert check_local_set([W1, W2], [W2, W1]) == []
    problems = check_local_set([W1, "x-1-py3-none-any.whl"], [W1, W2])
    assert problems == [
        f"{W2}: expected by this release but not among the wheels given [rule: expected-set]",
        "x-1-py3-none-any.whl: given but not expected by this release (another row or version?) [rule: expected-set]",
    ]


def test_size_limit() -> None:
    big = _wheel(W1, size=101 * 1024 * 1024)
    assert check_sizes([big], None) == []
    assert check_sizes([big], 200) == []
    assert "101.0 MiB is over the index's 100 MiB limit" in check_sizes([big], 100)[0]


def test_wheel_variant_comes_from_the_local_label() -> None:
    assert wheel_variant(W1) == "cu130"
    assert wheel_variant("wwdemo-1.5.0-cp312-cp312-manylinux_2_28_x86_64.whl") == "cpu"


def _audited_files(folder: Path, names: Iterable[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        path = folder / name
        path.write_bytes(name.encode())
        sha = hashlib.sha256(name.encode()).hexdigest()
        record = _record(name, sha256=sha, variant=wheel_variant(name))
        path.with_name(name + ".audit.json").write_text(json.dumps(record), encoding="utf-8")
        out.append(path)
    return out


def test_collect_wheels_picks_the_variant_from_a_folder_and_checks_listed_files(tmp_path: Path) -> None:
    cpu = "wwdemo-1.5.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    _audited_files(tmp_path, [W1, W2, cpu])
    paths, problems = collect_wheels(tmp_path, "cu130")
    assert [p.name for p in paths] == [W1, W2] and problems == []
    paths, problems = collect_wheels([tmp_path / W1, tmp_path / cpu, tmp_path / "gone.whl"], "cu130")
    assert [p.name for p in paths] == [W1]
    assert problems == [
        f"{cpu}: a cpu wheel; this publish is for cu130",
        f"{tmp_path / 'gone.whl'}: no such file",
    ]
    with pytest.raises(InputError, match="no cu126 wheels"):
        collect_wheels(tmp_path, "cu126")


def test_publish_checks_every_wheel_before_touching_the_index(tmp_path: Path) -> None:
    # The index (port 9, discard) is never reached: the audit refusal comes first and names both files.
    paths = _audited_files(tmp_path, [W1, W2])
    paths[0].write_bytes(b"tampered")
    paths[1].with_name(W2 + ".audit.json").unlink()
    policy = load_policy(ROOT / "rows.toml")
    private = tmp_path / "tmp"
    private.mkdir()
    with pytest.raises(CheckFailed) as info:
        publish(tmp_path, _target(), variant="cu130", policy=policy, env={"TMPDIR": str(private)},
                log=lambda line: None)  # fmt: skip
    message = str(info.value)
    assert f"{W1}: changed since it was audited" in message
    assert f"{W2}: no audit record" in message
    assert message.count("[rule: record-chain]") == 2
    assert message.endswith("nothing was uploaded")
    assert list(private.iterdir()) == []  # its staging folder (outside dist/) went with it
    assert not (tmp_path / ".publish").exists()  # nothing is staged inside dist/


def test_target_names_its_variants() -> None:
    with pytest.raises(InputError, match=r"no index for variant 'cu13'.*did you mean 'cu130'"):
        _target().index_for("cu13")


# --- credentials and twine ---------------------------------------------------------


def test_credentials_prefer_the_variant_then_twine_then_keyring() -> None:
    assert credential_env_names("cu130") == ("WHEELWRIGHT_CU130_USERNAME", "WHEELWRIGHT_CU130_PASSWORD")
    env = {
        "WHEELWRIGHT_CU130_USERNAME": "alice",
        "WHEELWRIGHT_CU130_PASSWORD": "pw-cu130",
        "TWINE_USERNAME": "bob",
        "TWINE_PASSWORD": "pw-twine",
    }
    creds = resolve_credentials("cu130", env)
    assert creds is not None and (creds.username, creds.password) == ("alice", "pw-cu130")
    assert "pw-cu130" not in repr(creds) and "alice" not in repr(creds)
    creds = resolve_credentials("cu126", env)
    assert creds is not None and creds.username == "bob"
    token = resolve_credentials("cpu", {"TWINE_PASSWORD": "pypi-AgEtoken"})
    assert token is not None and token.username == "__token__"
    assert resolve_credentials("cpu", {}) is None  # twine asks its keyring


def test_a_username_without_password_names_the_variable_not_the_value() -> None:
    with pytest.raises(InputError) as info:
        resolve_credentials("cu130", {"WHEELWRIGHT_CU130_USERNAME": "alice-secret-name"})
    assert "WHEELWRIGHT_CU130_PASSWORD is not" in str(info.value)
    assert "alice-secret-name" not in str(info.value)


def test_twine_gets_credentials_in_its_environment_never_on_the_command_line() -> None:
    index = IndexTarget("cu130", "http://127.0.0.1:9/cu130/", "http://127.0.0.1:9/cu130/simple/", None)
    argv = twine_command(index, Path("/stage/w.whl"), python="python")
    assert argv == [
        "python", "-m", "twine", "--no-color", "upload", "--non-interactive", "--disable-progress-bar",
        "--repository-url", "http://127.0.0.1:9/cu130/", "/stage/w.whl",
    ]  # fmt: skip
    pypi = IndexTarget("cpu", "pypi", "unused", 100)
    assert twine_command(pypi, Path("w.whl"), python="python")[-3:] == ["--repository", "pypi", "w.whl"]
    creds = resolve_credentials("cu130", {"WHEELWRIGHT_CU130_PASSWORD": "s3cret"})
    env = twine_env(
        {"PATH": "/bin", "WHEELWRIGHT_CU130_PASSWORD": "s3cret", "WHEELWRIGHT_TEST_STOP_AFTER_UPLOADS": "1"},
        creds,
    )
    assert env == {
        "PATH": "/bin",
        "TWINE_NON_INTERACTIVE": "1",
        "TWINE_USERNAME": "__token__",
        "TWINE_PASSWORD": "s3cret",
    }


def test_a_target_url_with_credentials_is_refused_without_showing_them() -> None:
    with pytest.raises(InputError) as info:
        check_target_urls(_target(), IndexTarget("cu130", "https://u:hunter2@example.invalid/", "x", None))
    assert "rows.toml must not hold them" in str(info.value) and "hunter2" not in str(info.value)


# --- redaction ----------------------------------------------------------------------


def test_redactor_removes_every_form_of_a_secret() -> None:
    red = Redactor()
    red.add_auth(("uploader", "p@ss/w rd"))
    basic = base64.b64encode(b"uploader:p@ss/w rd").decode()
    text = (
        "user uploader pw p@ss/w rd quoted p%40ss%2Fw%20rd plus p%40ss%2Fw+rd "
        f"header Basic {basic} url https://someone:other@host.invalid/simple/"
    )
    out = red(text)
    for secret in ("uploader", "p@ss/w rd", "p%40ss", basic, "someone", "other"):
        assert secret not in out
    assert "https://***@host.invalid/simple/" in out


def test_index_urls_pass_through_and_unknown_names_are_refused() -> None:
    # "pypi" asks pip (a process): tests/integration/test_publish.py checks it
    assert resolve_simple_url("http://127.0.0.1:9/simple/") == "http://127.0.0.1:9/simple/"
    with pytest.raises(InputError, match="neither a URL nor a known index name"):
        resolve_simple_url("pypy")
    with pytest.raises(InputError, match="write the simple URL of 'testpypi' instead of its name"):
        resolve_simple_url("testpypi")


def test_redact_url_and_split_userinfo() -> None:
    assert redact_url("see http://a:b@h:1/x and ftp://c@d/") == "see http://***@h:1/x and ftp://***@d/"
    assert split_userinfo("https://u:p%40q@h.invalid:8443/s/") == ("https://h.invalid:8443/s/", ("u", "p@q"))
    assert split_userinfo("https://h.invalid/s/") == ("https://h.invalid/s/", None)


# --- reading an index -----------------------------------------------------------------


def test_parse_pypiserver_html() -> None:
    page = (
        "<html><body><h1>Links for wwdemo</h1>\n"
        f'<a href="/cu130/packages/{W1}#sha256={"AB" * 32}">{W1}</a><br>\n'
        '<a href="/cu130/packages/wwdemo-1.4.0.tar.gz#md5=00">wwdemo-1.4.0.tar.gz</a><br>\n'
        "</body></html>"
    )
    files = parse_html_project(page, "http://127.0.0.1:8/cu130/simple/wwdemo/")
    assert files[0].url == f"http://127.0.0.1:8/cu130/packages/{W1}"
    assert files[0].sha256 == "ab" * 32
    assert files[1].sha256 is None


def test_parse_html_with_base_and_quoted_names() -> None:
    page = '<base href="https://files.invalid/x/"><a href="w%2Bcu130.whl#sha256=' + "c" * 64 + '"></a>'
    (f,) = parse_html_project(page, "https://index.invalid/simple/w/")
    assert (f.filename, f.url) == ("w+cu130.whl", "https://files.invalid/x/w%2Bcu130.whl")


def test_parse_pep691_json() -> None:
    data = {
        "meta": {"api-version": "1.1"},
        "name": "wwdemo",
        "files": [{"filename": W1, "url": f"../../files/{W1}", "hashes": {"sha256": "D" * 64}}],
    }
    (f,) = parse_json_project(data, "https://i.invalid/simple/wwdemo/", where="t")
    assert (f.url, f.sha256) == (f"https://i.invalid/files/{W1}", "d" * 64)
    with pytest.raises(StepFailed, match=r"unsupported simple API version '2\.0'"):
        parse_json_project({"meta": {"api-version": "2.0"}, "files": []}, "x", where="t")


# --- dependency channels -----------------------------------------------------------------

CUDA_CHANNEL = "http://127.0.0.1:9/whl/cu130/"
PLAIN_CHANNEL = "http://127.0.0.1:9/simple/"
LISTINGS = {
    (CUDA_CHANNEL, "torchao"): [
        "torchao-0.14.0+cu130-cp39-abi3-manylinux_2_28_x86_64.whl",
        "torchao-0.14.0+cu130-py3-none-any.whl.metadata",
    ],
    (PLAIN_CHANNEL, "torchao"): ["torchao-0.14.0-py3-none-any.whl", "torchao-0.14.0.tar.gz"],
    (CUDA_CHANNEL, "torch"): [
        "torch-2.14.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.14.1+cu130-cp312-cp312-manylinux_2_28_aarch64.whl",
    ],
}


def _fetch(url: str, package: str) -> list[str]:
    return LISTINGS.get((url, package), [])


def test_tag_arch() -> None:
    assert tag_arch("manylinux_2_28_x86_64") == "x86_64"
    assert tag_arch("manylinux2014_aarch64") == "aarch64"
    assert tag_arch("linux_x86_64") == "x86_64"
    assert tag_arch("musllinux_1_2_aarch64") == "aarch64"
    assert tag_arch("any") == "any"
    assert tag_arch("win_amd64") is None


def test_a_channel_with_nothing_for_the_arch_fails_before_the_build() -> None:
    rules = [ChannelRule("torch", CUDA_CHANNEL), ChannelRule("torchao", CUDA_CHANNEL)]
    assert all(f.ok for f in check_channels(rules, "x86_64", _fetch, python_tag="cp312"))
    with pytest.raises(CheckFailed) as info:
        check_channels(rules, "aarch64", _fetch)
    message = str(info.value)
    assert (
        "torchao: channel http://127.0.0.1:9/whl/cu130/ publishes no wheel usable on aarch64 (it has: x86_64)"
        in message
    )
    assert "torch:" not in message


def test_per_arch_channel_rules_as_declared() -> None:
    rules = [
        ChannelRule("torchao", CUDA_CHANNEL, platforms=("x86_64",)),
        ChannelRule("torchao", PLAIN_CHANNEL, platforms=("aarch64",)),
    ]
    (only,) = check_channels(rules, "aarch64", _fetch)
    assert only.index_url == PLAIN_CHANNEL and only.usable == ("torchao-0.14.0-py3-none-any.whl",)


def test_python_tags_are_checked_when_given() -> None:
    rules = [ChannelRule("torch", CUDA_CHANNEL)]
    with pytest.raises(CheckFailed, match="nothing for x86_64 / cp313"):
        check_channels(rules, "x86_64", _fetch, python_tag="cp313")
    abi3 = [ChannelRule("torchao", CUDA_CHANNEL)]
    assert check_channels(abi3, "x86_64", _fetch, python_tag="cp313")[0].ok  # cp39-abi3 covers 3.13
    with pytest.raises(InputError):
        check_channels(abi3, "x86_64", _fetch, python_tag="3.13")


# --- static index (files only) -------------------------------------------------------------


def _zip_wheel(folder: Path, filename: str, body: bytes = b"") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    name, version = filename.split("-")[:2]
    path = folder / filename
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(
            f"{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.10\n\n",
        )
        zf.writestr(f"{name}/__init__.py", body)
    return path


def test_static_index_pages_are_deterministic_and_carry_metadata_hashes(tmp_path: Path) -> None:
    wheel = _zip_wheel(tmp_path / "dist", W1)
    root = tmp_path / "cu130"
    index = build_static_index(root, [wheel])
    metadata = (root / "files" / (W1 + ".metadata")).read_bytes()
    meta_sha = hashlib.sha256(metadata).hexdigest()
    page = (root / "wwdemo" / "index.html").read_text(encoding="utf-8")
    assert f'data-core-metadata="sha256={meta_sha}"' in page
    assert f'data-dist-info-metadata="sha256={meta_sha}"' in page
    assert 'data-requires-python="&gt;=3.10"' in page
    assert "wwdemo-1.5.0%2Bcu130-cp312" in page
    data = json.loads((root / "wwdemo" / "index.json").read_text(encoding="utf-8"))
    assert data["meta"] == {"api-version": "1.1"} and data["versions"] == ["1.5.0+cu130"]
    assert data["files"][0]["core-metadata"] == {"sha256": meta_sha}
    assert json.loads((root / "index.json").read_text(encoding="utf-8"))["projects"] == [{"name": "wwdemo"}]
    assert index.url.startswith("file://") and index.projects == ("wwdemo",)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    write_static_index(root)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_static_index_refuses_a_different_file_under_an_existing_name(tmp_path: Path) -> None:
    root = tmp_path / "cu130"
    build_static_index(root, [_zip_wheel(tmp_path / "a", W1, b"one")])
    build_static_index(root, [_zip_wheel(tmp_path / "a", W1, b"one")])  # same bytes: fine
    with pytest.raises(CheckFailed, match="already holds a different file under this name"):
        build_static_index(root, [_zip_wheel(tmp_path / "b", W1, b"two")])


# --- deadlines, and what to do about a corrupt file on an index ------------------------------


def test_deadlines_come_per_variant_then_globally_and_scale_with_the_wheel() -> None:
    assert Deadlines().for_upload(0) == 120.0 and Deadlines().for_upload(600 * 1024 * 1024) == 720.0
    env = {"WHEELWRIGHT_CU130_UPLOAD_DEADLINE_S": "30", "WHEELWRIGHT_UPLOAD_DEADLINE_S": "90",
           "WHEELWRIGHT_REQUEST_DEADLINE_S": "5"}  # fmt: skip
    cu130, cpu = deadlines_for("cu130", env), deadlines_for("cpu", env)
    assert (cu130.upload_s, cu130.request_s, cpu.upload_s, cpu.timeout) == (30.0, 5.0, 90.0, (5.0, 5.0))
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(
            InputError, match=rf"WHEELWRIGHT_REQUEST_DEADLINE_S='{bad}': give a positive, finite number"
        ):
            deadlines_for("cpu", {"WHEELWRIGHT_REQUEST_DEADLINE_S": bad})


def test_the_one_right_action_depends_on_what_the_index_allows(tmp_path: Path) -> None:
    def index(upload_url: str) -> IndexTarget:
        return IndexTarget("cu130", upload_url, "https://h/simple/", None)

    local = removal_action(index("http://127.0.0.1:1/cu130/"), W1, tmp_path / "packages" / "cu130")
    assert local.startswith(
        f"remove it (this local index allows that): rm {tmp_path / 'packages' / 'cu130' / W1}"
    )
    static = removal_action(index((tmp_path / "whl").as_uri() + "/"), W1, None)
    assert f"rm {tmp_path / 'whl' / 'files' / W1} {tmp_path / 'whl' / 'files' / W1}.metadata" in static
    pypi = removal_action(index("pypi"), W1, None)
    assert pypi.startswith("bump the build number") and "remove" not in pypi
    other = removal_action(index("https://wheels.example.invalid/cu130/"), W1, None)
    assert other.startswith("remove it through the index, then rerun the same command")


def _entry(filename: str, sha: str, url: str = "") -> IndexFile:
    return IndexFile(filename, url or f"http://127.0.0.1:9/packages/{filename}", sha)


def test_a_name_listed_twice_is_named_with_what_each_installer_takes() -> None:
    old = "wwdemo-1.4.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    spelled = "WWDemo-1.5.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    files = [_entry(W1, "a" * 64), _entry(W2, "2" * 64), _entry(spelled, "b" * 64, "http://h/x/" + spelled),
             _entry(old, "3" * 64), _entry(old, "4" * 64)]  # fmt: skip
    assert listing_problems([_entry(W1, "a" * 64), _entry(W2, "2" * 64)]) == []
    (dup,) = duplicates(files, {("wwdemo", "1.5.0")})  # one release's files; 1.4.0 is left alone
    assert dup.filename == W1 and [e.sha256 for e in dup.entries] == ["a" * 64, "b" * 64] and not dup.agree
    (problem,) = listing_problems(files, {("wwdemo", "1.5.0")})
    assert problem.startswith(f"{W1}: the index lists this name 2 times, and its entries disagree: 1st: ")
    assert f"uv the first (sha256 {'a' * 64}), pip the last (sha256 {'b' * 64})" in problem
    assert problem.endswith("[rule: read-back]") and "remove the extra copy or entry" in problem
    assert len(duplicates(files)) == 2  # every release, when none is named
    same = duplicates([_entry(W1, "a" * 64), _entry(W1, "a" * 64)])[0]
    assert same.agree and "its entries agree:" in same.describe()
    local = same.describe(local_folder=Path("/idx/packages/cu130"))
    assert f"keep /idx/packages/cu130/{W1}, remove the other copies" in local


@pytest.mark.parametrize(
    ("listed", "served", "expected"),
    [
        ("a", "a", None),
        (
            "a",
            "b",
            "the index lists the audited sha256 " + "a" * 64 + ", but the file it serves is other bytes",
        ),
        ("b", "a", "the listing is wrong, not the file. Do not remove the file and do not bump"),
        ("b", "b", "(downloaded: the bytes it serves are what it lists), the audited bytes have " + "a" * 64),
        ("b", "c", "serves other bytes again (sha256 " + "c" * 64 + ", 5 bytes); neither is the audited"),
        ("b", None, "more than 5 bytes"),
    ],
)
def test_the_read_back_advice_fits_what_it_saw(listed: str, served: str | None, expected: str | None) -> None:
    got = served_problem(
        W1,
        "a" * 64,
        listed * 64,
        Served(served * 64 if served else None, 5 if served else 6),
        replaced="REPLACED",
    )
    if expected is None:
        assert got is None
        return
    assert got is not None and f"{W1}: " in got and expected in got and got.endswith("[rule: read-back]")
    assert ("REPLACED" in got) == (
        listed != "a" and served != "a"
    )  # "another file" advice only for another file


def test_listing_only_takes_the_listing_at_its_word_and_says_so() -> None:
    assert served_problem(W1, "a" * 64, "a" * 64, None, replaced="R") is None
    got = served_problem(W1, "a" * 64, "b" * 64, None, replaced="R", ours="the manifest says")
    assert got == (
        f"{W1}: on the index with sha256 {'b' * 64}, the manifest says {'a' * 64} (the listing says so; not "
        "downloaded): R [rule: read-back]"
    )
