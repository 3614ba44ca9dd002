"""The docs a person reads first: a short README, a README in every code folder, and no link that leads nowhere."""

from __future__ import annotations

import re

from tests.fixtures.paths import REPO_ROOT as ROOT

CODE_FOLDERS = ("ctpipe", "components", "pipelines")
SKIPPED_PARTS = {".venv", ".venv-ci", "node_modules", "__pycache__", ".git", "build"}


def markdown_files():
    readmes = [p for p in ROOT.rglob("README.md") if not SKIPPED_PARTS & set(p.relative_to(ROOT).parts)]
    return sorted({ROOT / "README.md", *readmes, *(ROOT / "docs").glob("*.md")})


def test_the_readme_is_short_enough_to_read_top_to_bottom():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move reference material to docs/"


def test_every_code_folder_has_a_readme():
    folders = {p.parent for top in CODE_FOLDERS for p in (ROOT / top).rglob("*.py")
               if not SKIPPED_PARTS & set(p.relative_to(ROOT).parts)}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "README.md").is_file())
    assert not missing, f"code folders without a README (its job and its public functions): {missing}"


def test_relative_links_in_the_docs_lead_somewhere():
    broken = []
    for md in markdown_files():
        for target in re.findall(r"\]\(([^)\s]+)\)", md.read_text()):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            if not (md.parent / target.split("#")[0]).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    assert not broken, "links to files that do not exist: " + "; ".join(broken)


def readme_commands() -> list[list[str]]:
    """Every `ctpipe ...` line of the README's shell blocks, split as a shell would (comments dropped)."""
    import shlex

    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("ctpipe "):
                commands.append(shlex.split(line)[1:])
    return commands


def test_the_readme_shows_its_two_set_up_commands_first():
    first_block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    lines = first_block.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("python3 -m venv .venv") and lines[0].endswith("ctpipe run")
    assert lines[1].endswith("pytest") and "pip install torch==2.13.0" in lines[1]


def test_every_command_line_the_readme_shows_parses():
    """A README example with an option the CLI no longer has would fail a newcomer at once."""
    from ctpipe.pipelines.cli.main import build_parser

    commands = readme_commands()
    assert len(commands) >= 5
    for args in commands:
        try:
            build_parser().parse_args(args)
        except SystemExit as exit_:
            if exit_.code == 0:  # --version, --help: done, not refused
                continue
            raise AssertionError(f"README shows `ctpipe {' '.join(args)}`, which the CLI refuses") from exit_
