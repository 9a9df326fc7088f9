# shellcheck shell=bash
# JUWELS Booster (Juelich Supercomputing Centre). Facts and where they come from:
# jobscripts/README.md. A node: 2x AMD EPYC 7402 (2x24 cores), 4x NVIDIA A100, 4x InfiniBand
# HDR200; psslurm runs the steps (no slurmd). Set ATOLL_ACCOUNT to your compute project.
export ATOLL_SITE_SBATCH_ARGS="${ATOLL_ACCOUNT:+--account=$ATOLL_ACCOUNT} \
--partition=${ATOLL_PARTITION:-booster} --ntasks-per-node=4 --cpus-per-task=12"
# InfiniBand for NCCL's and gloo's sockets (the ethernet name does not reach other nodes fast).
# NCCL's data goes over InfiniBand verbs by itself (the image's NCCL; Apptainer shares the host's
# /dev, /dev/infiniband with it, by default). Atoll sets no MASTER_ADDR: each multi-node worker's rendezvous is a small
# store on its leader at the address its host name resolves to (setup only, no tensors), so
# the "i" suffix other JUWELS scripts add to MASTER_ADDR for InfiniBand is not needed here
# (not tried on JUWELS).
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-ib0}" GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-ib0}"
export HDF5_USE_FILE_LOCKING="${HDF5_USE_FILE_LOCKING:-FALSE}"  # the chain runs one job at a time
export ATOLL_STAGE_TO="${ATOLL_STAGE_TO:-/dev/shm}"   # node memory; no local disk assumed
export ATOLL_SRUN_MPI="${ATOLL_SRUN_MPI:-pspmix}"     # ParaStation's PMIx for the image's MPI
atoll_site_setup() {
    if [[ -z "${ATOLL_IMAGE:-}" ]] && command -v module >/dev/null; then
        module load Stages/2025 GCC OpenMPI Python   # for ATOLL_VENV built on these modules
    fi
}
