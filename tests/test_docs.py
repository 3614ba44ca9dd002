"""The docs a person reads first: a short README, a README in every code folder that names exactly the folder's
modules, no link that leads nowhere; and modules short enough to read top to bottom."""

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
    missing = sorted(str(f.relative_to(ROOT)) for f in code_folders() if not (f / "README.md").is_file())
    assert not missing, f"code folders without a README (its job and its public functions): {missing}"


def code_folders() -> list:
    """Every folder of the installed package that holds Python modules."""
    return sorted({p.parent for top in CODE_FOLDERS for p in (ROOT / top).rglob("*.py")
                   if not SKIPPED_PARTS & set(p.relative_to(ROOT).parts)})


# How a README lists its folder's modules: each by its file name in backticks (`trainer.py`), in a table row or a
# sentence. A backticked bare file name is always a module of that folder; a module elsewhere is named by its
# path (`components/engine/trainer.py`), so a table cannot keep a module that moved away, nor miss one that came.
MODULE_NAME = re.compile(r"`([A-Za-z0-9_]+\.py)`")


def readme_module_problems(folder) -> list[str]:
    """What the folder's README gets wrong about the folder's modules (``__init__.py`` aside)."""
    where = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    named = set(MODULE_NAME.findall((folder / "README.md").read_text())) - {"__init__.py"}
    modules = {p.name for p in folder.glob("*.py")} - {"__init__.py"}
    return ([f"{where}/README.md does not name {name}" for name in sorted(modules - named)]
            + [f"{where}/README.md names {name}, which is not in {where} (name a module elsewhere by its path)"
               for name in sorted(named - modules)])


def test_every_code_folders_readme_names_exactly_its_modules():
    problems = [p for folder in code_folders() if (folder / "README.md").is_file() for p in readme_module_problems(folder)]
    assert not problems, "; ".join(problems)


def test_the_readme_check_sees_a_stale_table(tmp_path):
    (tmp_path / "kept.py").write_text("")
    (tmp_path / "added.py").write_text("")
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "README.md").write_text("| `kept.py` | stays |\n| `moved.py` | went to `elsewhere/moved.py` |\n")
    assert readme_module_problems(tmp_path) == [
        f"{tmp_path}/README.md does not name added.py",
        f"{tmp_path}/README.md names moved.py, which is not in {tmp_path} (name a module elsewhere by its path)",
    ]


MAX_MODULE_LINES = 450  # nanochat's rule of thumb: one job per module, readable top to bottom
# Named, temporary exceptions: each must still be over the limit (else drop it here).
def long_modules(paths) -> dict[str, int]:
    """Module (relative to the repository) -> its line count, for those over MAX_MODULE_LINES."""
    counts = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in paths}
    return {name: lines for name, lines in counts.items() if lines > MAX_MODULE_LINES}


def test_no_module_is_longer_than_450_lines():
    over = long_modules(p for folder in code_folders() for p in folder.glob("*.py"))
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by job): {over}"


def test_the_size_check_counts_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert long_modules([tmp_path / "short.py", tmp_path / "long.py"]) == {"long.py": MAX_MODULE_LINES + 1}


def anchors(md) -> set[str]:
    """The #anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as '-'."""
    slugs = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", md.read_text(), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


def broken_links(md) -> list[str]:
    """The relative links in ``md`` whose file does not exist, or whose #anchor is no heading of that file."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", md.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (md.parent / path) if path else md
        if not linked.exists():
            broken.append(f"{md.relative_to(ROOT)} -> {target}")
        elif anchor and linked.suffix == ".md" and anchor.lower() not in anchors(linked):
            broken.append(f"{md.relative_to(ROOT)} -> {target} (no such heading)")
    return broken


def test_relative_links_in_the_docs_lead_somewhere():
    broken = [b for md in markdown_files() for b in broken_links(md)]
    assert not broken, "links that lead nowhere: " + "; ".join(broken)


def test_the_link_check_sees_a_missing_heading(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Gates and their statistics\n[ok](b.md#the-rules) [gone](b.md#reliability)\n"
                                   "[self](#gates-and-their-statistics) [no file](c.md)\n")
    (tmp_path / "b.md").write_text("## The rules\n")
    assert broken_links(tmp_path / "a.md") == ["a.md -> b.md#reliability (no such heading)", "a.md -> c.md"]


def test_the_model_card_sends_readers_to_pages_that_exist():
    """The card (components/steps/evaluate/card.py) is read outside the repository: it names a page and its
    section by their words, which must still be the page's path and one of its headings."""
    # The source with its implicitly concatenated string literals joined: the sentence as the card prints it.
    card = re.sub(r'"\s*\n\s*f?"', "", (ROOT / "components" / "steps" / "evaluate" / "card.py").read_text())
    named = re.findall(r"the rules are in ([\w/.]+\.md), \\?\"([^\"\\]+)\\?\"", card)
    assert named, "the card no longer says where the blessing rules are explained"
    for page, section in named:
        headings = {h.strip() for h in re.findall(r"^#{1,6}\s+(.+)$", (ROOT / page).read_text(), flags=re.M)}
        assert section in headings, f"the model card sends readers to {page}, \"{section}\": no such heading"


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
