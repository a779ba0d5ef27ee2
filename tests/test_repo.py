"""Repository contracts: CI runs the README's test command; docs name what exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    return re.findall(r"```\n(.+?)\n```", (ROOT / "README.md").read_text())


def test_readme_opens_with_install_run_and_test_commands():
    first, second = readme_commands()[:2]
    assert first.startswith("pip install -e . && hoccl-compile") and "hoccl-inspect" in first
    assert second.startswith("pip install -e '.[test") and second.endswith("&& pytest")


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = readme_commands()[1]
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in lines


def test_docs_exist():
    for name in ("architecture.md", "plan-format.md", "cli.md", "benchmarks.md"):
        assert (ROOT / "docs" / name).is_file(), name


def test_every_script_the_tests_run_is_there():
    """The tests run helper scripts by path (torchrun workers, network-namespace peers, examples): each one a
    test names exists where the tests look (tests/support/, examples/), GPU tests included, which the CPU skips."""
    import re

    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names |= set(re.findall(r"[\"']([A-Za-z_]+\.py)[\"']", path.read_text()))
    names -= {"attach.py", "__init__.py", "plans.py", "schema.py", "_cuda.py"}  # written by a test; library modules
    where = [ROOT / "tests" / "support", ROOT / "examples"]
    missing = sorted(n for n in names if not any((d / n).exists() for d in where))
    assert not missing, missing
    assert {"mp_worker.py", "mp_torch_worker.py", "netns_peer.py", "train_fsdp.py"} <= names  # the scan sees them
