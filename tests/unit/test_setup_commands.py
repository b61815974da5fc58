"""README's commands are the ones that run: .ci/run runs exactly README's command 2 and nothing
else (every setup step lives in the script that command names), and that script installs what
the tests need (chromium for the HTML report test, podman for the container tests). Read from
the real files; the script is run for real (``--packages`` only prints its list)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands(*, first_block_only: bool = False) -> dict[int, str]:
    """The numbered commands of README.md's ```bash code blocks (the first one alone, if asked):
    ``# N. ...`` comments, each followed by its one command line."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    assert blocks, "README.md has no ```bash code block"
    commands: dict[int, str] = {}
    for block in blocks[:1] if first_block_only else blocks:
        number = 0
        for line in block.splitlines():
            heading = re.match(r"# (\d+)\. ", line)
            if heading:
                number = int(heading[1])
            elif line.strip() and not line.startswith("#"):
                assert number and number not in commands, f"a second command line under # {number}: {line!r}"
                commands[number] = line
    return commands


def test_readmes_first_screen_is_for_users() -> None:
    """Issue 33 item 5: what wheelwright does, command 1 (and the tests' command 2), then the page to
    open; the developer's commands (3, 4) and the tiers' costs under "Developing wheelwright"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert sorted(readme_commands(first_block_only=True)) == [1, 2]
    first_screen = text[: text.index("## ")]
    assert "open **`dist/audit.html`**" in first_screen
    assert first_screen.index("wheelwright releases") < first_screen.index("```bash")
    developing = text[text.index("## Developing wheelwright") :]
    assert "# 3. " in developing and "# 4. " in developing
    assert "unit tests" not in first_screen and not re.search(
        r"\d+ (min|s)\b", first_screen.split("```bash")[0]
    )


def ci_run_lines() -> list[str]:
    """The lines .ci/run executes: no blank lines, no comments."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    return [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_readme_numbers_its_commands_and_the_second_runs_the_tests_after_the_setup_script() -> None:
    commands = readme_commands()
    assert sorted(commands) == [1, 2, 3, 4]
    assert commands[2] == "./scripts/setup.sh && .venv/bin/nox -s lint tests"
    assert commands[1].startswith("./scripts/bootstrap.sh && .venv/bin/nox -s release")
    assert commands[3] == ".venv/bin/nox -s tests -- tests/unit", "the fast loop: the unit tier only"
    assert commands[4] == ".venv/bin/nox -s tests-slow", "the slow tier, which CI runs after command 2"


def test_ci_run_runs_exactly_readme_commands_2_then_4_and_nothing_else() -> None:
    commands = readme_commands()
    lines = ci_run_lines()
    assert lines[-2:] == [commands[2], commands[4]], (
        "the last things .ci/run does are README's command 2 (setup, lint, the suite) and command 4 "
        "(the slow tier), as written there"
    )
    assert lines.count(commands[2]) == 1
    # before it: the shell's settings, the repository root, one line saying where it runs; no
    # setup of its own, which would make CI differ from a person's machine
    assert lines[:-2] == [
        "set -euo pipefail",
        'cd "$(dirname "$0")/.."',
        'echo "==> .ci/run on $(uname -m), $(nproc) cores, $(date -u +%FT%TZ)"',
    ]


def test_the_setup_script_of_command_2_installs_what_the_tests_need() -> None:
    script = ROOT / shlex.split(readme_commands()[2])[0]
    assert script == ROOT / "scripts" / "setup.sh" and script.stat().st_mode & 0o111, "executable"
    listed = subprocess.run(
        ["bash", str(script), "--packages"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    assert {"chromium", "podman"} <= set(listed)
    assert {"runc", "debootstrap", "qemu-user-static", "binfmt-support"} <= set(listed)
    assert {"libc6-arm64-cross", "g++-aarch64-linux-gnu"} <= set(listed)
    assert len(listed) == len(set(listed))
    # the script runs bootstrap.sh (the .venv of commands 1 and 3) and makes the stand-in image
    text = script.read_text(encoding="utf-8")
    assert "\n./scripts/bootstrap.sh\n" in text
    assert "scripts/make_builder_image.py --train 13.0" in text


def test_the_setup_script_refuses_unknown_arguments() -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), "--install-everything"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr == "usage: scripts/setup.sh [--packages]\n"
