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


def _anchors(path: Path) -> set[str]:
    """A markdown file's heading anchors, as GitHub writes them (lower case, punctuation dropped, spaces to -)."""
    return {re.sub(r"[^\w\- ]", "", m.strip().lower()).replace(" ", "-")
            for m in re.findall(r"^#+\s+(.*)$", path.read_text(), re.M)}


def test_every_relative_link_of_the_docs_resolves():
    """A relative link in README.md or docs/ names a file of the repository (an image or a result too), and a
    #fragment names a heading of the file it points to."""
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for link in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", link):
                continue
            path, _, fragment = link.partition("#")
            target = (doc.parent / path).resolve() if path else doc
            if not target.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {link}")
            elif fragment and target.suffix == ".md" and fragment not in _anchors(target):
                broken.append(f"{doc.relative_to(ROOT)}: {link} (no such heading)")
    assert not broken, broken


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
