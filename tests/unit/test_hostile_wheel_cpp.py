"""release.audit.cpp.consumer's guards: includes that escape, files opened outside, messages cut to the wheel."""

from __future__ import annotations

from pathlib import Path

import pytest

from release.audit.cpp.consumer import (
    Sdk,
    declares_something,
    escaping_includes,
    messages,
    outside_files,
    system_include_dirs,
)
from release.core import proc


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b'#include "/root/.pypirc"\n', "an absolute path"),
        (b"  #  include </dev/zero>\n", "an absolute path"),
        (b'#include_next "/etc/hostname"\n', "an absolute path"),
        (b'#import "/etc/hostname"\n', "an absolute path"),
        (b'#if __has_include("/root/.token")\n#endif\n', "an absolute path"),
        (b'#pragma GCC dependency "/root/.token"\n', "an absolute path"),
        (b'#include "../../../../root/.pypirc"\n', "climbing out"),
        (b"#include <../../../../../root/.pypirc>\n", "climbing out"),
        (b'#include "../missing.h"\n', "climbing out"),  # not a header of the SDK: the search path decides
    ],
)
def test_escaping_includes(text: bytes, why: str) -> None:
    found = escaping_includes({"sub/a.h": text, "b.h": b""})
    assert len(found) == 1 and found[0][0] == "sub/a.h" and why in found[0][2]


def test_includes_inside_the_sdk_pass() -> None:
    files = {
        "a.h": b'#include "sub/b.h"\n#include <vector>\n#include <sys/../stdio.h>\n',
        "sub/b.h": b'#include "../a.h"\n#include "c.h"\n',
        "sub/c.h": b"int c(void);\n",
    }
    assert escaping_includes(files) == []


def test_outside_files(tmp_path: Path) -> None:
    include = tmp_path / "include"
    stderr = "\n".join(
        [
            f". {include}/fx.h",
            ".. /usr/include/stdio.h",
            "... /usr/include/x86_64-linux-gnu/bits/../../stdlib.h",
            ". /root/.pypirc",
            f".. {include}/../../../tmp/token",
            "fx.h:3:10: error: something",
            "Multiple include guards may be useful for:",
            "/root/.pypirc",
        ]
    )
    assert outside_files(stderr, (str(include), "/usr/include"), tmp_path) == [
        "/root/.pypirc",
        f"{include}/../../../tmp/token",
    ]


def test_messages_keep_only_the_wheels_own_files(tmp_path: Path) -> None:
    root, scratch = tmp_path / "tree", tmp_path / "scratch"
    sdk = Sdk("pkg/include", ("fx.h",), ())
    stderr = "\n".join(
        [
            f"In file included from {scratch}/consumer.cpp:2:",
            f"{scratch}/include/fx.h:3:1: error: expected initializer before 'int'",
            "/root/.pypirc:1:1: error: 'ghp_SECRET' does not name a type",
            "    1 | ghp_SECRET",
            f". {scratch}/include/fx.h",
            "/usr/include/c++/12/vector:5:1: error: broken",
            f"/usr/bin/ld: {scratch}/consumer.o: in function `main':",
            f"{scratch}/consumer.cpp:(.text+0x9): undefined reference to `fx_missing'",
            "collect2: error: ld returned 1 exit status",
            "compilation terminated.",
        ]
    )
    shown = messages(stderr, sdk, root, scratch)
    assert "SECRET" not in shown and "/usr/include" not in shown and str(scratch) not in shown
    assert shown.splitlines() == [
        "In file included from consumer.cpp:2:",
        "pkg/include/fx.h:3:1: error: expected initializer before 'int'",
        "ld: consumer.o: in function `main':",
        "consumer.cpp:(.text+0x9): undefined reference to `fx_missing'",
        "collect2: error: ld returned 1 exit status",
        "(4 other lines not shown: only messages about the wheel's own files are)",
    ]


def test_messages_are_cut(tmp_path: Path) -> None:
    sdk = Sdk("pkg/include", ("fx.h",), ())
    stderr = "\n".join(f"{tmp_path}/include/fx.h:{i}:1: error: bad" for i in range(300))
    shown = messages(stderr, sdk, tmp_path / "tree", tmp_path).splitlines()
    assert len(shown) == 13 and shown[-1].startswith("(288 other lines not shown")


def testdeclares_something(tmp_path: Path) -> None:
    include = tmp_path / "include"
    pre = tmp_path / "consumer.ii"
    pre.write_text(f'# 1 "consumer.cpp"\n# 1 "{include}/fx.h" 1\n\n\n# 2 "consumer.cpp" 2\nint main();\n')
    assert not declares_something(pre, include)
    pre.write_text(f'# 1 "consumer.cpp"\n# 1 "{include}/fx.h" 1\nint fx(void);\n')
    assert declares_something(pre, include)


def test_system_include_dirs_found_in_a_clean_environment() -> None:
    dirs = system_include_dirs(proc.which("g++"), "c++")
    assert "/usr/include" in dirs


def test_messages_after_the_include_guard_list(tmp_path: Path) -> None:
    """-H's closing list of files comes before the compiler's messages where it keeps the preprocessed
    program (-save-temps): the list is left out, the messages after it are kept."""
    sdk = Sdk("pkg/include", ("fx.h",), ())
    stderr = "\n".join(
        [
            f". {tmp_path}/include/fx.h",
            "Multiple include guards may be useful for:",
            f"{tmp_path}/include/fx.h",
            "/usr/include/stdio.h",
            f"In file included from {tmp_path}/consumer.cpp:2:",
            f"{tmp_path}/include/fx.h:1:15: error: expected primary-expression before ';' token",
        ]
    )
    assert messages(stderr, sdk, tmp_path / "tree", tmp_path).splitlines() == [
        "In file included from consumer.cpp:2:",
        "pkg/include/fx.h:1:15: error: expected primary-expression before ';' token",
    ]
    # at the end (no -save-temps), as before: nothing of the list is shown or counted
    tail = "\n".join([*stderr.splitlines()[4:], *stderr.splitlines()[:4]])
    assert messages(tail, sdk, tmp_path / "tree", tmp_path).splitlines() == [
        "In file included from consumer.cpp:2:",
        "pkg/include/fx.h:1:15: error: expected primary-expression before ';' token",
    ]
