"""The Spack environment (spack.yaml) and Atoll's Spack package.

Its keys are checked at the YAML level always; the real Spack checks it where there is one
(``spack`` on PATH, or ``SPACK_ROOT``): its schema (``config get``), the recipe that
``spack containerize`` renders, and a full ``concretize -f`` of a copy of the environment whose
resolved versions must be the ones containers/README.md reports.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

import atoll
from apptainer_deffile import parse, unknown_sections
from conftest import ROOT

SPACK_YAML = ROOT / "spack.yaml"
REPO = ROOT / "spack" / "spack_repo" / "atoll"
RECIPE = REPO / "packages" / "atoll" / "package.py"
TEMPLATE = ROOT / "spack" / "templates" / "container" / "atoll.def"
HOST_EXTERNALS = ("openmpi", "slurm", "pmix", "cuda")
# The versions containers/README.md reports; concretize must still resolve them.
REPORTED = ("py-torch", "nccl", "py-mpi4py", "py-h5py", "py-torchvision")


def env() -> dict:
    return yaml.safe_load(SPACK_YAML.read_text())["spack"]


def spec_names() -> dict[str, str]:
    return {re.split(r"[\s@+~]", spec, maxsplit=1)[0]: spec for spec in env()["specs"]}


def test_specs_are_the_stack() -> None:
    specs = spec_names()
    assert set(specs) == {"atoll", "py-torch", "py-torchvision", "py-mpi4py", "py-h5py",
                          "py-click"}
    for variant in ("+cuda", "+nccl", "+distributed", "+gloo"):
        assert variant in specs["py-torch"].split(), variant
    assert "+torch" in specs["atoll"]


def test_concretizer_view_and_cuda_arch_knob() -> None:
    spack = env()
    assert spack["concretizer"]["unify"] is True
    assert spack["view"]
    assert re.fullmatch(r"cuda_arch=\d+(,\d+)*", spack["packages"]["all"]["variants"])
    assert spack["packages"]["mpi"]["require"] == "openmpi"


@pytest.mark.parametrize("name", HOST_EXTERNALS)
def test_host_software_is_external_and_never_built(name: str) -> None:
    package = env()["packages"][name]
    assert package["buildable"] is False
    (external,) = package["externals"]
    assert re.match(rf"{name}@\d", external["spec"])
    assert external["prefix"].startswith("/")


def test_atoll_comes_from_this_checkout_through_its_own_repository() -> None:
    spack = env()
    assert spack["repos"]["atoll"] == "$env/spack/spack_repo/atoll"
    repo = yaml.safe_load((REPO / "repo.yaml").read_text())["repo"]
    assert repo["namespace"] == "atoll"
    assert RECIPE.is_file()
    assert spack["develop"]["atoll"] == {"spec": f"atoll@={atoll.__version__}", "path": "."}
    assert re.search(rf'version\("{re.escape(atoll.__version__)}"\)', RECIPE.read_text())


def test_container_section_renders_with_atolls_template() -> None:
    container = env()["container"]
    assert container["format"] == "singularity"
    assert container["images"]["spack"] == "v1.1.0"
    assert container["template"] == "container/atoll.def"
    assert env()["config"]["template_dirs"] == ["$env/spack/templates"]
    assert (ROOT / "spack" / "templates" / container["template"]).is_file()


def test_template_copies_what_the_environment_builds_from() -> None:
    """The develop path and the repository are in the checkout: %files must bring them."""
    files = re.search(r"^%files\n(.*?)^{%", TEMPLATE.read_text(), re.M | re.S)
    assert files, "the template has no %files section"
    sources = [line.split()[0] for line in files.group(1).splitlines() if line.strip()]
    for source in sources:
        assert (ROOT / source).exists(), source
    assert {"pyproject.toml", "README.md", "app", "spack"} <= set(sources)
    assert "cat << 'EOF' > spack.yaml" in TEMPLATE.read_text(), "$env must reach Spack"


def spack_name(requirement: str) -> tuple[str, str | None]:
    """("py-numpy", "1.26") from "numpy>=1.26": the Spack name and the lower bound."""
    parts = re.match(r"([\w.-]+)(\[[^\]]*\])?(.*)", requirement)
    assert parts, requirement
    name, _, rest = parts.groups()
    floor = re.search(r">=\s*([\w.]+)", rest)
    return "py-" + name.lower().replace("_", "-"), floor.group(1) if floor else None


def test_recipe_depends_on_what_pyproject_lists() -> None:
    """A dependency added to pyproject.toml and not to the recipe fails here."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    recipe = RECIPE.read_text()
    depends = dict(re.findall(r'depends_on\("([\w-]+)@?([\w.]*):?', recipe))
    for requirement in pyproject["project"]["dependencies"]:
        name, floor = spack_name(requirement)
        assert name in depends, f"{requirement}: no depends_on({name!r}) in {RECIPE.name}"
        assert depends[name] == floor, f"{requirement}: the recipe has {name}@{depends[name]}:"
    torch_part = recipe[recipe.index('with when("+torch"):'):]
    for requirement in pyproject["project"]["optional-dependencies"]["torch"]:
        assert f'depends_on("{spack_name(requirement)[0]}' in torch_part, requirement
    python_floor = pyproject["project"]["requires-python"].removeprefix(">=")
    assert f'depends_on("python@{python_floor}:"' in recipe
    setuptools = next(r for r in pyproject["build-system"]["requires"] if "setuptools" in r)
    assert f'depends_on("py-setuptools@{spack_name(setuptools)[1]}:"' in recipe


# ---- the real Spack, where there is one


def spack_command() -> str:
    found = shutil.which("spack")
    if found is None and os.environ.get("SPACK_ROOT"):
        candidate = Path(os.environ["SPACK_ROOT"]) / "bin" / "spack"
        found = str(candidate) if candidate.is_file() else None
    if found is None:
        pytest.skip("Spack is not installed (neither spack on PATH nor SPACK_ROOT): "
                    "containers/README.md, 'Running Spack on a development machine'")
    return found


def spack(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([spack_command(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def env_copy(tmp_path: Path) -> Path:
    """spack.yaml and its spack/ directory, away from the checkout: Spack may write into an
    environment's spack.yaml (compilers, a lock file) and must not write into ours."""
    shutil.copy2(SPACK_YAML, tmp_path / "spack.yaml")
    shutil.copytree(ROOT / "spack", tmp_path / "spack",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_spack_schema_accepts_it_and_names_a_bad_key(env_copy: Path) -> None:
    done = spack("-e", ".", "config", "get", cwd=env_copy)
    assert done.returncode == 0, done.stderr
    assert "atoll +torch" in done.stdout
    bad = env_copy / "spack.yaml"
    bad.write_text(bad.read_text().replace("  concretizer:", "  concretiser:"))
    done = spack("-e", ".", "config", "get", cwd=env_copy)
    assert done.returncode != 0
    assert re.search(r"spack\.yaml:\d+: .*'concretiser' was unexpected", done.stderr), done.stderr


def test_spack_containerize_renders_an_apptainer_recipe(env_copy: Path) -> None:
    done = spack("-e", ".", "containerize", cwd=env_copy)
    assert done.returncode == 0, done.stderr
    stages = parse(done.stdout)
    assert [s.header["stage"] for s in stages] == ["build", "final"]
    assert unknown_sections(stages) == []
    assert stages[0].header["from"] == "spack/ubuntu-noble:v1.1.0"
    for source, _ in stages[0].files():
        assert (ROOT / source).exists(), source
    post = stages[0].sections["post"]
    assert "atoll: $env/spack/spack_repo/atoll" in post and "cat << 'EOF'" in post
    assert "apt-get -yqq install openmpi-bin libopenmpi-dev" in post
    assert "spack -e . install" in post


def reported_versions() -> dict[str, str]:
    table = (ROOT / "containers" / "README.md").read_text()
    found = {}
    for name in REPORTED:
        row = re.search(rf"^\| {name} \| ([\w.-]+)", table, re.M)
        assert row, f"containers/README.md has no row for {name}"
        found[name] = row.group(1)
    return found


def test_readme_reports_a_version_for_each_package_asked_about() -> None:
    assert all(re.fullmatch(r"\d+(\.\d+)+(-\d+)?", v) for v in reported_versions().values())


@pytest.mark.slow
def test_spack_concretizes_the_stack_to_the_reported_versions(env_copy: Path) -> None:
    """About 1.5 minutes on 2 cores. compiler find first, in the copy (see make spack-env)."""
    done = spack("-e", ".", "compiler", "find", cwd=env_copy)
    assert done.returncode == 0, done.stderr
    done = spack("-e", ".", "concretize", "-f", cwd=env_copy, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = spack("-e", ".", "find", "-c", "--format", "{name} {version} {variants}",
                 cwd=env_copy)
    assert done.returncode == 0, done.stderr
    resolved = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] in ("-", "[e]", "[+]", "[^]"):
            resolved[words[1]] = (words[2], " ".join(words[3:]))
    assert resolved["atoll"][0] == atoll.__version__
    assert resolved["openmpi"][0] == "4.1.6" and resolved["cuda"][0] == "12.6.3", "externals"
    assert "cuda_arch:=80" in resolved["nccl"][1]
    assert "~mpi" in resolved["py-h5py"][1]
    for name, version in reported_versions().items():
        assert resolved[name][0] == version, f"{name}: resolved {resolved[name][0]}, " \
                                             f"containers/README.md says {version}"


def test_make_spack_env_without_spack_says_so_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPACK", "MAKE"))}
    env["PATH"] = "/usr/bin:/bin"
    assert shutil.which("spack", path=env["PATH"]) is None
    done = subprocess.run(["make", "--no-print-directory", "spack-env"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "make spack-env: no spack on PATH nor in $SPACK_ROOT/bin; install Spack 1.1" \
        in done.stderr
