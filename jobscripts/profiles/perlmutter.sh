# shellcheck shell=bash
# Perlmutter (NERSC), GPU nodes. Facts and where they come from: jobscripts/README.md.
# A GPU node: 1x AMD EPYC 7763 (64 cores, 2 hardware threads each), 4x NVIDIA A100,
# 4x HPE Slingshot 11 NICs; Lustre scratch. Set ATOLL_ACCOUNT to your project (-A).
# The default QOS is debug, where NERSC forbids job chaining: this profile asks for regular.
export ATOLL_SITE_SBATCH_ARGS="${ATOLL_ACCOUNT:+--account=$ATOLL_ACCOUNT} --constraint=gpu \
--qos=${ATOLL_QOS:-regular} --ntasks-per-node=4 --cpus-per-task=32"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-16}"   # 32 hardware threads per task = 16 cores
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-hsn}" GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-hsn0}"
export HDF5_USE_FILE_LOCKING="${HDF5_USE_FILE_LOCKING:-FALSE}"  # Lustre; the chain runs one job at a time
export ATOLL_STAGE_TO="${ATOLL_STAGE_TO:-/tmp}"   # compute nodes have no local disk; /tmp is in memory
export ATOLL_SRUN_MPI="${ATOLL_SRUN_MPI:-pmix}"   # for the image's Open MPI (Cray MPICH: cray_shasta)
atoll_site_setup() {
    if [[ -z "${ATOLL_IMAGE:-}" ]] && command -v module >/dev/null; then
        module load python   # for ATOLL_VENV built on NERSC's python module
    fi
}
