# shellcheck shell=bash
# Perlmutter (NERSC), GPU nodes. Facts and where they come from: jobscripts/README.md.
# A GPU node: 1x AMD EPYC 7763 (64 cores, 2 hardware threads each), 4x NVIDIA A100,
# 4x HPE Slingshot 11 NICs; Lustre scratch. Set ATOLL_ACCOUNT to your project (-A).
# The default QOS is debug, where NERSC forbids job chaining: this profile asks for regular.
export ATOLL_SITE_SBATCH_ARGS="${ATOLL_ACCOUNT:+--account=$ATOLL_ACCOUNT} --constraint=gpu \
--qos=${ATOLL_QOS:-regular} --ntasks-per-node=4 --cpus-per-task=32"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-16}"   # 32 hardware threads per task = 16 cores
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-hsn}" GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-hsn0}"
# NCCL between nodes over Slingshot: through the aws-ofi-nccl plugin and the host's libfabric,
# which the image does not carry. ATOLL_NCCL_OFI=1 (for an image or venv that has the plugin on
# its library path, see jobscripts/README.md) makes NCCL use it, or fail instead of falling back
# to TCP sockets, with HPE's libfabric settings for NCCL on Slingshot.
if [[ "${ATOLL_NCCL_OFI:-0}" == 1 ]]; then
    export NCCL_NET="${NCCL_NET:-AWS Libfabric}" NCCL_NET_GDR_LEVEL="${NCCL_NET_GDR_LEVEL:-PHB}"
    export NCCL_CROSS_NIC="${NCCL_CROSS_NIC:-1}"
    export FI_CXI_DISABLE_HOST_REGISTER="${FI_CXI_DISABLE_HOST_REGISTER:-1}"
    export FI_MR_CACHE_MONITOR="${FI_MR_CACHE_MONITOR:-userfaultfd}"
    export FI_CXI_DEFAULT_CQ_SIZE="${FI_CXI_DEFAULT_CQ_SIZE:-131072}"
fi
export HDF5_USE_FILE_LOCKING="${HDF5_USE_FILE_LOCKING:-FALSE}"  # Lustre; the chain runs one job at a time
export ATOLL_STAGE_TO="${ATOLL_STAGE_TO:-/tmp}"   # compute nodes have no local disk; /tmp is in memory
export ATOLL_SRUN_MPI="${ATOLL_SRUN_MPI:-pmix}"   # for the image's Open MPI (Cray MPICH: cray_shasta)
atoll_site_setup() {
    if [[ -z "${ATOLL_IMAGE:-}" ]] && command -v module >/dev/null; then
        module load python   # for ATOLL_VENV built on NERSC's python module
    fi
}
