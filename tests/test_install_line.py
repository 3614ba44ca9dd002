"""The README's first command installs a CPU torch on a machine without a GPU, and CI installs as the README says.

pip resolves the README's own torch line (``pip install --dry-run --report``) against two local stand-ins for the
indexes it names: PyPI, whose Linux torch is the CUDA build, and PyTorch's CPU index, whose torch is ``+cpu``.
No network: every URL the line names is mapped to a local folder, and pip reads no configuration of this machine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.fixtures.paths import REPO_ROOT as ROOT

PYPI = "https://pypi.org/simple"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def readme_torch_install(line: str) -> list[str]:
    """The ``pip install torch...`` command of a set-up line, split as a shell would."""
    commands = [shlex.split(part) for part in line.split("&&")]
    torch = [c for c in commands if c[:2] == ["pip", "install"] and any(a.startswith("torch==") for a in c)]
    assert len(torch) == 1, f"expected one `pip install torch==...` in {line!r}"
    return torch[0]


def readme_set_up_lines() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    return block.strip().splitlines()


def _wheel(folder: Path, version: str, requires: list[str]) -> None:
    """A wheel of torch with nothing but its metadata: all a dry run reads."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"torch-{version}.dist-info"
    metadata = "Metadata-Version: 2.1\nName: torch\nVersion: " + version + "\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {f"{info}/METADATA": metadata, f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             "torch/__init__.py": ""}
    name = f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(folder / name, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{info}/RECORD", "".join(f"{p},,\n" for p in files) + f"{info}/RECORD,,\n")
    href = name.replace("+", "%2B")
    (folder / "index.html").write_text(f'<html><body><a href="{href}">{name}</a></body></html>\n')


def resolved_torch(command: list[str], tmp_path: Path) -> dict:
    """What pip would install for ``command`` against the stand-in indexes: the report's torch entry."""
    indexes = {PYPI: tmp_path / "pypi", CPU_INDEX: tmp_path / "cpu"}
    _wheel(indexes[PYPI] / "torch", "2.13.0", ["nvidia-cudnn-cu12==9.10.2.21; platform_system == 'Linux'"])
    _wheel(indexes[CPU_INDEX] / "torch", "2.13.0+cpu", [])
    args = []
    for arg in command[2:]:
        if arg.startswith(("http://", "https://")):
            assert arg.rstrip("/") in indexes, f"the install line names an index this test does not know: {arg}"
            arg = indexes[arg.rstrip("/")].as_uri()
        args.append(arg)
    report = tmp_path / "report.json"
    # No config file, no PIP_* variables; PyPI's stand-in is the default index, as PyPI is pip's.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PIP_CONFIG_FILE": os.devnull,
           "PIP_INDEX_URL": indexes[PYPI].as_uri(), "PIP_NO_CACHE_DIR": "1"}
    subprocess.run([sys.executable, "-m", "pip", "install", *args, "--dry-run", "--ignore-installed", "--no-deps",
                    "--quiet", "--disable-pip-version-check", "--retries", "0", "--report", str(report)],
                   check=True, env=env, cwd=tmp_path, timeout=120)
    [torch] = [i for i in json.loads(report.read_text())["install"] if i["metadata"]["name"] == "torch"]
    return torch


def test_the_first_command_installs_a_cpu_torch(tmp_path):
    command = readme_torch_install(readme_set_up_lines()[0])
    assert resolved_torch(command, tmp_path)["metadata"]["version"] == "2.13.0+cpu"


def test_the_stand_ins_tell_a_plain_pypi_install_apart(tmp_path):
    """The check above can fail: a plain ``pip install torch==2.13.0`` resolves to PyPI's CUDA build."""
    torch = resolved_torch(["pip", "install", "torch==2.13.0"], tmp_path)
    assert torch["metadata"]["version"] == "2.13.0"
    assert any("nvidia" in r for r in torch["metadata"]["requires_dist"])


def test_ci_installs_torch_as_the_readme_says():
    readme = [readme_torch_install(line) for line in readme_set_up_lines()]
    assert readme[0] == readme[1], "the README's two set-up commands install torch differently"
    ci = [shlex.split(line) for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("pip install") and "torch==" in line]
    assert [[a for a in c if a != "--quiet"] for c in ci] == [readme[0]]
