# shellcheck shell=bash
# The two-node SLURM that tests/slurm_cluster.py starts on one host (what `make test` runs):
# n1 and n2, 4 CPUs and 4 fake GPUs each (torch sees no CUDA device behind them). Open MPI 5
# started by srun ran at most 2 tasks per node here (as many as the host's cores).
export ATOLL_SITE_SBATCH_ARGS="--ntasks-per-node=2 --cpus-per-task=1"
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo   # both "nodes" are one host
export GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ATOLL_CPU_BIND=""   # TaskPlugin=task/none: SLURM cannot bind here
