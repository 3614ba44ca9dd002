"""Offline checks of containers/*.Dockerfile (no Docker engine here): they parse, are multi-stage with
pinned bases, run as non-root, install the package (torch pinned, first), COPY only files that exist and
that .dockerignore lets into the context, and name entrypoints that exist."""

from __future__ import annotations

import importlib.util
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO_ROOT as ROOT

DOCKERFILES = sorted((ROOT / "containers").glob("*.Dockerfile"))
# Installed with the package for the tests, left out of the runtime images (.dockerignore).
TEST_ONLY = ("ctpipe/testing/",)
INSTRUCTIONS = {"FROM", "RUN", "COPY", "ADD", "ENV", "ARG", "WORKDIR", "USER", "CMD", "ENTRYPOINT", "EXPOSE",
                "LABEL", "HEALTHCHECK", "SHELL", "VOLUME", "STOPSIGNAL", "ONBUILD"}


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, args = full.partition(" ")
        if word.upper() not in INSTRUCTIONS:
            raise ValueError(f"unknown instruction {word!r} in line {full!r}")
        out.append((word.upper(), args.strip()))
    if pending:
        raise ValueError("dangling line continuation at end of file")
    return out


def stages(instructions: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in instructions:
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def global_args(instructions: list[tuple[str, str]]) -> dict[str, str]:
    values = {}
    for word, args in instructions:
        if word == "FROM":
            break
        if word == "ARG" and "=" in args:
            key, _, value = args.partition("=")
            values[key] = value
    return values


def dockerignore_allows(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""

    def regex(pattern: str) -> re.Pattern:
        out = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**", i):
                out += ".*"
                i += 2
            elif pattern[i] == "*":
                out += "[^/]*"
                i += 1
            elif pattern[i] == "?":
                out += "[^/]"
                i += 1
            else:
                out += re.escape(pattern[i])
                i += 1
        return re.compile(f"^{out}$")

    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    allowed = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        body = body.strip("/")
        if any(regex(body).match(p) for p in prefixes):
            allowed = negate
    return allowed


def _ignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


@pytest.fixture(params=DOCKERFILES, ids=lambda p: p.name)
def dockerfile(request):
    path = request.param
    return path, parse_dockerfile(path.read_text())


def test_the_images_exist():
    names = {p.name for p in DOCKERFILES}
    assert {"component.Dockerfile", "trainer.Dockerfile", "mlflow.Dockerfile", "spark.Dockerfile"} <= names


def test_multi_stage_with_pinned_bases(dockerfile):
    path, instructions = dockerfile
    args = global_args(instructions)
    froms = [a for w, a in instructions if w == "FROM"]
    assert len(froms) >= 2, f"{path.name} must be multi-stage"
    stage_names = {a.split()[-1] for a in froms if len(a.split()) == 3}
    for spec in froms:
        image = spec.split()[0]
        if image in stage_names:
            continue  # built on an earlier stage of the same file
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        assert "@sha256:" in image or re.search(r":\d+\.\d+\.\d+[-\w.]*$", image), (
            f"{path.name}: base image {image!r} is not pinned to a digest or an exact version tag"
        )
        assert not image.endswith(":latest")


def test_final_stage_is_non_root_and_has_no_build_tools(dockerfile):
    path, instructions = dockerfile
    final = stages(instructions)[-1]
    users = [a for w, a in final if w == "USER"]
    assert users, f"{path.name}: the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"{path.name} runs as root"
    runs = " ".join(a for w, a in final if w == "RUN")
    for tool in ("apt-get install", "build-essential", "gcc", "pip install", "git "):
        assert tool not in runs, f"{path.name}: '{tool}' in the final stage"
    # Built FROM an earlier stage (the venv, nothing compiled), or from the base: only what earlier stages made.
    copies = [a.split() for w, a in final if w in ("COPY", "ADD")]
    assert all(any(f.startswith("--from=") for f in c) for c in copies), "the final stage copies only from earlier stages"
    # pip caches are never written: every install in any stage disables the cache.
    for word, args in instructions:
        if word == "RUN" and "pip install" in args:
            assert "--no-cache-dir" in args, f"{path.name}: pip install without --no-cache-dir"


def test_copy_sources_exist_and_are_in_the_build_context(dockerfile):
    path, instructions = dockerfile
    patterns = _ignore_patterns()
    for word, args in instructions:
        if word in ("COPY", "ADD") and not any(flag.startswith("--from=") for flag in args.split()):
            tokens = [t for t in shlex.split(args) if not t.startswith("--")]
            for source in tokens[:-1]:
                assert (ROOT / source).exists(), f"{path.name}: COPY source {source} does not exist"
                assert dockerignore_allows(source, patterns), f"{path.name}: {source} is excluded by .dockerignore"
                if (ROOT / source).is_dir():
                    files = [p for p in (ROOT / source).rglob("*.py") if "__pycache__" not in p.parts
                             and not str(p.relative_to(ROOT)).startswith(TEST_ONLY)]
                    assert files and all(dockerignore_allows(str(f.relative_to(ROOT)), patterns) for f in files)


def test_dockerignore_keeps_local_state_out():
    patterns = _ignore_patterns()
    for path in (".venv/bin/python", ".git/config", ".ctpipe/mlflow.db", "tests/test_x.py", "components/__pycache__/a.pyc",
                 "manifests/secrets/mlflow.env"):
        assert not dockerignore_allows(path, patterns), path


def test_no_instruction_debians_buildah_refuses(dockerfile):
    """ci/build_images.sh builds with Debian's podman/buildah (1.28), which rejects `COPY --link` ("unknown flag")."""
    path, instructions = dockerfile
    for word, args in instructions:
        if word in ("COPY", "ADD"):
            assert "--link" not in args.split(), f"{path.name}: {word} --link (buildah 1.28 refuses it)"


def test_package_is_installed_not_copied_onto_sys_path_and_torch_is_pinned_first(dockerfile):
    path, instructions = dockerfile
    runs = [a for build in stages(instructions)[:-1] for w, a in build if w == "RUN"]
    env = " ".join(a for w, a in instructions if w == "ENV")
    assert "PYTHONPATH" not in env, f"{path.name} puts code on sys.path by hand"
    if path.name == "mlflow.Dockerfile":
        reqs = (ROOT / "containers" / "mlflow-requirements.txt").read_text()
        assert "mlflow[auth]==3.17.2" in reqs
        return
    torch_at = next(i for i, r in enumerate(runs) if "torch==2.13.0" in r)
    package_at = next(i for i, r in enumerate(runs) if re.search(r"pip install [^&]*\s\.(\s|$)", r))
    assert torch_at < package_at, "torch must be installed (pinned) before the package"
    assert "-e " not in runs[package_at] and "--editable" not in runs[package_at]


def _console_scripts() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def test_entrypoints_exist(dockerfile):
    path, instructions = dockerfile
    for word, args in instructions:
        if word not in ("CMD", "ENTRYPOINT"):
            continue
        argv = __import__("json").loads(args)
        if argv[0] == "ctpipe":
            assert "ctpipe" in _console_scripts()
        elif argv[0] == "mlflow":
            assert importlib.util.find_spec("mlflow.server") is not None
        elif argv[0].startswith("python") and argv[1] == "-m":
            assert importlib.util.find_spec(argv[2]) is not None, f"{path.name}: module {argv[2]} does not exist"
        elif argv == ["/opt/entrypoint.sh"]:  # Spark's own, copied from the Spark image in the final stage
            copies = [a for w, a in stages(instructions)[-1] if w == "COPY"]
            assert any("--from=spark" in c and "/opt/entrypoint.sh" in c for c in copies), path.name
        else:
            raise AssertionError(f"{path.name}: unknown entrypoint {argv}")


def test_the_worker_module_the_pytorchjob_runs_is_in_the_package():
    from ctpipe.components.lib.config import Config
    from ctpipe.pipelines.cluster_job import render_pytorchjob

    job = render_pytorchjob(Config())
    argv = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert argv[0] == "python" and importlib.util.find_spec(argv[2]) is not None


def test_parser_rejects_garbage():
    with pytest.raises(ValueError):
        parse_dockerfile("FROM python:3.11.11-slim\nRUNN echo hi\n")
    with pytest.raises(ValueError):
        parse_dockerfile("FROM python:3.11.11-slim\nRUN echo \\\n")


def test_component_image_owns_the_kfp_launcher_scratch_directories():
    """KFP's launcher writes input artifacts under /gcs, /minio and /s3 at the filesystem root. KFP >= 2.3 mounts
    emptyDirs there (kubeflow/pipelines#10857); on older backends the non-root image user must own them."""
    instructions = parse_dockerfile((ROOT / "containers" / "component.Dockerfile").read_text())
    final = stages(instructions)[-1]
    user_at = max(i for i, (w, _) in enumerate(final) if w == "USER")
    uid, _, gid = final[user_at][1].partition(":")
    prepared: dict[str, tuple[bool, bool]] = {}
    for word, args in final[:user_at]:
        if word != "RUN":
            continue
        for command in re.split(r"&&|;", args):
            argv = shlex.split(command)
            if argv[:1] == ["mkdir"]:
                prepared.update({p: (True, prepared.get(p, (False, False))[1]) for p in argv if p.startswith("/")})
            if argv[:1] == ["chown"] and f"{uid}:{gid}" in argv:
                prepared.update({p: (prepared.get(p, (False, False))[0], True) for p in argv if p.startswith("/")})
    for path in ("/gcs", "/minio", "/s3"):
        assert prepared.get(path) == (True, True), f"{path} is not created and chowned to {uid}:{gid} before USER"


def _spark_image() -> tuple[list[tuple[str, str]], dict[str, str]]:
    instructions = parse_dockerfile((ROOT / "containers" / "spark.Dockerfile").read_text())
    return instructions, global_args(instructions)


def test_the_spark_image_is_the_spark_release_the_application_names():
    """The SparkApplication's sparkVersion is the Spark the image copies, 4.1 or later, on Java 17; and ctpipe's
    `spark` extra, where it pins pyspark, pins that release too (the driver's Python and the JVM must agree)."""
    from ctpipe.components.lib.kube.sparkapplication import SPARK_VERSION

    _, args = _spark_image()
    image = args["SPARK_IMAGE"]
    assert image.startswith(f"apache/spark:{SPARK_VERSION}-") and "java17" in image, image
    assert tuple(int(p) for p in SPARK_VERSION.split(".")[:2]) >= (4, 1)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    pins = [r for r in extras.get("spark", []) if r.replace(" ", "").startswith("pyspark==")]
    assert all(r.replace(" ", "") == f"pyspark=={SPARK_VERSION}" for r in pins), pins


def test_the_spark_image_runs_the_application_as_the_pods_non_root_user():
    """The pods' security context (runAsUser, fsGroup) is the image's user; the venv is the Python of the driver and
    the executors' workers; the entry file is where the application's mainApplicationFile points."""
    from ctpipe.components.lib.kube.pod import IMAGE_UID
    from ctpipe.components.lib.kube.sparkapplication import ENTRY_FILE

    instructions, _ = _spark_image()
    final = stages(instructions)[-1]
    assert [a for w, a in final if w == "USER"][-1] == f"{IMAGE_UID}:{IMAGE_UID}"
    env = " ".join(a for w, a in final if w == "ENV")
    for setting in ("PYSPARK_PYTHON=/opt/venv/bin/python", "PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python",
                    "SPARK_HOME=/opt/spark", "JAVA_HOME=/opt/java/openjdk", "HOME=/tmp"):
        assert setting in env, setting
    build = next(stage for stage in stages(instructions) if stage[0][1].split()[-1] == "build")
    assert any(w == "COPY" and a.split()[-1] == ENTRY_FILE and "containers/spark_entry.py" in a for w, a in build)
    copies = [a for w, a in final if w == "COPY"]
    assert any("/opt/ctpipe" in c and "--from=build" in c for c in copies)
    for tree in ("/opt/spark", "/opt/java/openjdk", "/usr/bin/tini"):
        assert any("--from=spark" in c and tree in c for c in copies), tree


def test_the_entry_file_runs_a_module_as_python_dash_m_does(tmp_path):
    """spark-submit runs containers/spark_entry.py; the module gets its arguments and its exit status is the driver's."""
    import subprocess
    import sys

    (tmp_path / "probe.py").write_text("import sys\nprint(__name__, sys.argv[1:])\nsys.exit(int(sys.argv[-1]))\n")
    run = [sys.executable, str(ROOT / "containers" / "spark_entry.py"), "probe", "--data-uri", "x", "2"]
    done = subprocess.run(run, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)}, timeout=60)
    assert done.returncode == 2 and done.stdout.strip() == "__main__ ['--data-uri', 'x', '2']", done
    usage = subprocess.run([sys.executable, str(ROOT / "containers" / "spark_entry.py")], capture_output=True, text=True)
    assert usage.returncode == 1 and "usage: spark_entry.py MODULE" in usage.stderr
def shadowed_imports(instructions: list[tuple[str, str]]) -> list[str]:
    """Import checks (`RUN python -c "import ..."`) that run in a folder where a copied source folder of the same
    name sits: `python -c` puts the working directory first on sys.path, so that folder, not the installed
    package, is what gets imported. Follows WORKDIR and COPY through the stages (a stage built FROM another
    starts with its folder and files)."""
    found: list[str] = []
    stage_state: dict[str, tuple[str, set[str]]] = {}  # stage name -> (WORKDIR, paths copied in)
    name, workdir, copied = "", "/", set()
    for word, args in instructions:
        if word == "FROM":
            parts = args.split()
            workdir, inherited = stage_state.get(parts[0], ("/", set()))
            copied = set(inherited)
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else ""
        elif word == "WORKDIR":
            workdir = args if args.startswith("/") else f"{workdir.rstrip('/')}/{args}"
        elif word in ("COPY", "ADD"):
            *sources, dest = [t for t in shlex.split(args) if not t.startswith("--")]
            dest = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
            into_folder = len(sources) > 1 or dest.endswith("/")
            copied |= {f"{dest.rstrip('/')}/{Path(s).name}" if into_folder else dest.rstrip("/") for s in sources}
        elif word == "RUN":
            for flags, _quote, code in re.findall(r"python3?\s+((?:-[A-Za-z]+\s+)*)-c\s+(['\"])(.*?)\2", args):
                if "P" in flags or "I" in flags:
                    continue  # -P / -I: the working directory is not put on sys.path
                imported = {m.strip().split(".")[0] for group in re.findall(r"import\s+([\w., ]+)", code)
                            for m in group.split(",")}
                here = {Path(p).name for p in copied if str(Path(p).parent) == workdir.rstrip("/")}
                found += [f"import {m} in {workdir} (copied there: {workdir.rstrip('/')}/{m})"
                          for m in sorted(imported & here)]
        if name:
            stage_state[name] = (workdir, copied)
    return found


def test_the_image_import_checks_import_the_installed_package(dockerfile):
    """The component image's check ran in WORKDIR /src, where the source folder ctpipe/ shadows the installed
    package: `No module named 'ctpipe.components'` (the trainer's too). Each check runs where no source sits."""
    path, instructions = dockerfile
    assert shadowed_imports(instructions) == [], path.name


def test_the_shadow_check_finds_the_broken_layout():
    broken = parse_dockerfile(
        "FROM python:3.11.11-slim AS build\nWORKDIR /src\nCOPY ctpipe ./ctpipe\nCOPY components ./components\n"
        'RUN pip install --no-cache-dir . && python -c "import ctpipe.components, kfp"\n'
        "FROM build AS again\nRUN python -c 'import ctpipe'\n"
    )
    assert shadowed_imports(broken) == ["import ctpipe in /src (copied there: /src/ctpipe)"] * 2
    fixed = parse_dockerfile(
        "FROM python:3.11.11-slim AS build\nWORKDIR /src\nCOPY ctpipe ./ctpipe\nRUN python -P -c 'import ctpipe'\n"
        "WORKDIR /tmp\nRUN python -c 'import ctpipe'\n"
    )
    assert shadowed_imports(fixed) == []


def _ctpipe_dockerfiles() -> list[Path]:
    return [p for p in DOCKERFILES if "pyproject.toml" in p.read_text()]


@pytest.mark.parametrize("path", _ctpipe_dockerfiles(), ids=lambda p: p.name)
def test_layers_keep_the_dependencies_apart_from_the_code(path):
    """A commit that changes only code reuses the dependency layers: they are installed from pyproject.toml alone,
    before any source is copied, and the commit's lineage (GIT_COMMIT) enters after the last COPY."""
    instructions = parse_dockerfile(path.read_text())
    deps_install = next(i for i, (w, a) in enumerate(instructions) if w == "RUN" and "-r /tmp/requirements.txt" in a)
    copied_before = [a for w, a in instructions[:deps_install] if w == "COPY"]
    assert copied_before == ["pyproject.toml /src/pyproject.toml"], copied_before
    final = stages(instructions)[-1]
    last_copy = max(i for i, (w, _) in enumerate(final) if w == "COPY")
    commit_arg = next(i for i, (w, a) in enumerate(final) if w == "ARG" and a.startswith("GIT_COMMIT"))
    assert commit_arg > last_copy, f"{path.name}: GIT_COMMIT before the COPY layers rebuilds them on every commit"


def test_the_cpu_trainer_reuses_the_component_images_layers():
    """The trainer's dependency and build stages, and its runtime stage up to the user, are the component image's
    word for word: podman's layer cache builds the CPU trainer from the component image's layers, and the two
    share the venv's 2 GB on disk (one torch install, one copy)."""
    def image_stages(name: str) -> list[list[tuple[str, str]]]:
        return stages(parse_dockerfile((ROOT / "containers" / name).read_text()))

    trainer, component = image_stages("trainer.Dockerfile"), image_stages("component.Dockerfile")
    assert trainer[:-1] == component[:-1]

    def up_to_user(stage: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return stage[: next(i for i, (w, _) in enumerate(stage) if w == "USER") + 1]

    assert up_to_user(trainer[-1]) == up_to_user(component[-1])


def test_test_only_code_stays_out_of_the_images():
    patterns = _ignore_patterns()
    assert not dockerignore_allows("ctpipe/testing/faults.py", patterns)
    assert dockerignore_allows("ctpipe/task.py", patterns)
