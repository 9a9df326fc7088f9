# shellcheck shell=bash
# Sourced by every Atoll jobscript: site profile, launcher, threads, staging, preflight, and the
# search with its stop-and-resubmit loop. Nothing site-specific lives here (see profiles/).
#
# The batch shell gets SIGUSR1 before the time limit (#SBATCH --signal=B:USR1@SECONDS). bash
# runs a trap only once its foreground command ends, so every step runs in the background and
# the shell waits for it; the trap forwards the signal to the running srun, which passes it to
# every task. Atoll then stops cleanly and exits 75. A signal that arrives between steps is
# remembered: the remaining steps are skipped.
#
# Only the time-limit signal chains. SIGTERM comes from `scancel` (the chain stops for good), a
# requeue (`scontrol requeue`, preemption: the requeued job is the successor, none is chained)
# or the time limit itself (chains, like SIGUSR1); `scontrol show job` tells them apart while
# the job ends. A file RUN_DIR/stop-chain stops the chain at the end of the running job.
#
# Exit codes of the search: 0 the run's budget is spent; 75 stopped early, resume me (the job
# resubmits itself); 74 a record file could not be written (disk full, quota): stop, no
# resubmission (it would meet the same full disk), free space and resubmit by hand; anything
# else: stop, no resubmission, say which nodes did not answer and how to continue. A job that
# chained (or requeued) its successor exits 0: its part is done, SLURM shows it COMPLETED.

ATOLL_EXIT_RESUME=75
ATOLL_EXIT_DISK_FULL=74
ATOLL_STOP_FILE=stop-chain
atoll_stop_requested=0
atoll_term_cause=""  # why SIGTERM came: cancel, requeue or time limit
atoll_step_pid=""

atoll_log() { echo "atoll-job[${SLURM_JOB_ID:-?}] $(date '+%H:%M:%S') $*"; }

# The job's chain index: jobs chained before it plus the times SLURM requeued it.
atoll_chain_index() {
    echo $((${ATOLL_CHAIN_INDEX:-0} + ${SLURM_RESTART_COUNT:-0}))
}

# Why SLURM sends this job SIGTERM: a requeue has already counted a restart, the time limit
# says so in the job's reason; anything else (scancel, an admin) is a cancel.
atoll_why_terminated() {
    local info restarts
    info=" $(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null)"
    restarts=$(grep -o " Restarts=[0-9]*" <<<"$info" | cut -d= -f2) || true
    if ((${restarts:-0} > ${SLURM_RESTART_COUNT:-0})); then
        echo requeue
    elif [[ "$info" == *" Reason=TimeLimit "* ]]; then
        echo "time limit"
    else
        echo cancel
    fi
}

atoll_on_signal() {
    local sig="$1"
    atoll_stop_requested=1
    if [[ "$sig" == TERM && -z "$atoll_term_cause" ]]; then
        atoll_term_cause=$(atoll_why_terminated)
        atoll_log "SIGTERM ($atoll_term_cause): stopping the running step"
    elif [[ "$sig" == USR1 ]]; then
        atoll_log "time-limit signal: stopping the running step"
    fi
    if [[ -n "$atoll_step_pid" ]]; then
        kill -USR1 "$atoll_step_pid" 2>/dev/null || true
    fi
}

# Load the site profile named by ATOLL_PROFILE (a name under profiles/ or a path).
atoll_load_profile() {
    local profile="${ATOLL_PROFILE:-}"
    if [[ -z "$profile" ]]; then
        return 0
    fi
    if [[ "$profile" != */* ]]; then
        profile="$ATOLL_JOBSCRIPTS/profiles/$profile.sh"
    fi
    if [[ ! -f "$profile" ]]; then
        echo "atoll-job: error: profile $profile not found; set ATOLL_PROFILE to a file under" \
            "$ATOLL_JOBSCRIPTS/profiles/ (without .sh) or to a path" >&2
        exit 2
    fi
    # shellcheck source=/dev/null
    source "$profile"
    if declare -F atoll_site_setup >/dev/null; then
        atoll_site_setup
    fi
}

# The command that runs atoll in each task: the image with Apptainer when ATOLL_IMAGE names
# one (GPU scripts add --nv), else the venv in ATOLL_VENV, else atoll on PATH.
atoll_launcher() {
    local gpu="$1"
    ATOLL_CMD=()
    if [[ -n "${ATOLL_IMAGE:-}" ]]; then
        if [[ ! -f "$ATOLL_IMAGE" ]]; then
            echo "atoll-job: error: ATOLL_IMAGE=$ATOLL_IMAGE is not a file" >&2
            exit 2
        fi
        ATOLL_CMD=("${ATOLL_APPTAINER:-apptainer}" exec)
        if [[ "$gpu" == gpu ]]; then
            ATOLL_CMD+=(--nv)
        fi
        ATOLL_CMD+=("$ATOLL_IMAGE" atoll)
    elif [[ -n "${ATOLL_VENV:-}" ]]; then
        ATOLL_CMD=("$ATOLL_VENV/bin/atoll")
    elif command -v atoll >/dev/null; then
        ATOLL_CMD=(atoll)
    else
        echo "atoll-job: error: no atoll: set ATOLL_IMAGE (an Apptainer image) or ATOLL_VENV" \
            "(a virtual env with atoll installed), or put atoll on PATH" >&2
        exit 2
    fi
}

# Threads from the allocation: each task gets --cpus-per-task CPUs, and as many threads.
atoll_threads() {
    local cpus="${SLURM_CPUS_PER_TASK:-1}"
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$cpus}"
    export MKL_NUM_THREADS="${MKL_NUM_THREADS:-$OMP_NUM_THREADS}"
    # srun does not inherit --cpus-per-task from sbatch since Slurm 22.05
    export SRUN_CPUS_PER_TASK="$cpus"
    # As the image: locks where the file system has them, none where it refuses them (some
    # Lustre and NFS mounts); Atoll's claim file keeps one job per run either way.
    export HDF5_USE_FILE_LOCKING="${HDF5_USE_FILE_LOCKING:-BEST_EFFORT}"
}

# One step over all tasks, in the background so that the time-limit trap can act.
atoll_srun() {
    local bind=()
    if [[ -n "${ATOLL_CPU_BIND-cores}" ]]; then  # set empty where SLURM cannot bind
        bind=(--cpu-bind="${ATOLL_CPU_BIND-cores}")
    fi
    srun --mpi="${ATOLL_SRUN_MPI:-pmix}" "${bind[@]}" --kill-on-bad-exit=0 "$@" &
    atoll_step_pid=$!
    local rc=0
    wait "$atoll_step_pid" || rc=$?
    while [[ $rc -gt 128 ]] && kill -0 "$atoll_step_pid" 2>/dev/null; do
        rc=0
        wait "$atoll_step_pid" || rc=$?  # the trap ran; wait for the step itself
    done
    atoll_step_pid=""
    return "$rc"
}

# Copy ATOLL_STAGE_FROM to node-local storage once per node (one task per node copies).
# Prints the directory objectives should read.
atoll_stage_data() {
    local source="$1" target="$2"
    # shellcheck disable=SC2016  # the inner bash expands them
    srun --nodes="${SLURM_JOB_NUM_NODES:-1}" --ntasks-per-node=1 --ntasks="${SLURM_JOB_NUM_NODES:-1}" \
        --cpus-per-task=1 \
        bash -c 'set -euo pipefail
            mkdir -p "$(dirname "$2")"
            tmp=$(mktemp -d "$2.tmp.XXXXXX")
            cp -r "$1/." "$tmp/"
            rm -rf "$2" && mv "$tmp" "$2"
            echo "atoll-job: staged $1 to $2 on ${SLURMD_NODENAME:-$(hostname)}"' \
        stage "$source" "$target" >&2
}

# This job's shape as sbatch options (nodes, tasks, CPUs, time, partition, account, QOS,
# GPUs), so that a successor fits like this job even when sbatch's command line set them.
atoll_job_shape() {
    local info field value
    info=" $(scontrol show job -o "$SLURM_JOB_ID")"
    for field in NumNodes NumTasks CPUs/Task TimeLimit Partition Account QOS TresPerNode; do
        value=$(grep -o " $field=[^ ]*" <<<"$info" | head -n 1 | cut -d= -f2-) || true
        if [[ -z "$value" || "$value" == "(null)" || "$value" == UNLIMITED ]]; then
            continue
        fi
        case "$field" in
            NumNodes) echo "--nodes=${value%%-*}" ;;
            NumTasks) echo "--ntasks=$value" ;;
            CPUs/Task) echo "--cpus-per-task=$value" ;;
            TimeLimit) echo "--time=$value" ;;
            Partition) echo "--partition=$value" ;;
            Account) echo "--account=$value" ;;
            QOS) echo "--qos=$value" ;;
            TresPerNode)
                if [[ "$value" == gres[:/]gpu* ]]; then echo "--gres=${value#gres?}"; fi ;;
        esac
    done
}

# The sbatch options of a successor: this job's shape and ATOLL_SBATCH_ARGS (without --wait).
atoll_successor_options() {
    local extra=() option
    atoll_job_shape
    read -r -a extra <<<"${ATOLL_SBATCH_ARGS:-}"
    for option in "${extra[@]}"; do  # the successor must not wait for itself
        [[ "$option" == --wait || "$option" == -W ]] || echo "$option"
    done
}

# The jobscript sbatch runs (its original: sbatch runs a copy).
atoll_script() {
    local script="${ATOLL_JOBSCRIPT:-}"
    if [[ -z "$script" ]]; then
        script=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/^ *Command=\([^ ]*\).*/\1/p')
    fi
    echo "$script"
}

# The command that continues the run by hand (with this job's other ATOLL_* settings);
# arguments are more sbatch options.
atoll_continue_command() {
    local options=() command
    mapfile -t options < <(atoll_successor_options)
    command=$(printf ' %q' sbatch "${options[@]}" "$@" "$(atoll_script)" "${ATOLL_SCRIPT_ARGS[@]}")
    if [[ -n "${ATOLL_PROFILE:-}" ]]; then
        command=" ATOLL_PROFILE=$(printf '%q' "$ATOLL_PROFILE")$command"
    fi
    echo "${command# }"
}

# Submit the next job of the chain (after this one ends), or requeue this one; the argument,
# if any, names nodes it must not use. Returns 0 if a successor will run, 1 if the chain ends.
atoll_resubmit() {
    local mode="${ATOLL_RESUBMIT:-chain}" index limit="${ATOLL_MAX_JOBS:-50}" more=()
    if [[ -n "${1:-}" ]]; then
        more=(--exclude="$1")
    fi
    index=$(atoll_chain_index)
    if ((index + 1 >= limit)); then
        atoll_log "not resubmitting: ATOLL_MAX_JOBS=$limit jobs ran; resume by hand:" \
            "$(atoll_continue_command "${more[@]}")"
        return 1
    fi
    if [[ "$mode" == requeue ]]; then
        atoll_log "requeueing job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0})"
        trap '' USR1 TERM  # the requeue's own SIGTERM
        scontrol requeue "$SLURM_JOB_ID"
        if [[ -n "${1:-}" ]]; then
            scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$1" || true
        fi
        return 0
    fi
    local options=()
    mapfile -t options < <(atoll_successor_options)
    unset SBATCH_WAIT
    local next
    if ! next=$(sbatch --parsable "${options[@]}" "${more[@]}" \
        --dependency="afterany:$SLURM_JOB_ID" --export="ALL,ATOLL_CHAIN_INDEX=$((index + 1))" \
        "$(atoll_script)" "${ATOLL_SCRIPT_ARGS[@]}"); then
        atoll_log "could not chain a successor (sbatch failed); continue with:" \
            "$(atoll_continue_command "${more[@]}")"
        return 1
    fi
    atoll_log "chained job $next to resume after this one"
}

# After exit 75: chain a successor unless told not to. Returns 0 if a successor will run.
atoll_continue() {
    local run_dir="$1"
    if [[ -e "$run_dir/$ATOLL_STOP_FILE" ]]; then
        atoll_log "$run_dir/$ATOLL_STOP_FILE exists: the chain stops here; remove it, then" \
            "continue with: $(atoll_continue_command)"
        return 1
    fi
    case "$atoll_term_cause" in
        requeue)
            atoll_log "SLURM requeued this job (scontrol requeue or preemption): the requeued" \
                "job resumes the run; not chaining"
            return 0 ;;
        cancel)
            atoll_log "cancelled (scancel): the chain stops here; continue with:" \
                "$(atoll_continue_command)"
            return 1 ;;
    esac
    atoll_resubmit
}

# The nodes of this job that do not run a one-task step (within 30 s), one a line; none for a
# one-node job (its batch shell would be gone with its node).
atoll_lost_nodes() {
    local nodes="${SLURM_JOB_NUM_NODES:-1}" answered node
    if ((nodes < 2)); then
        return 0
    fi
    # shellcheck disable=SC2016  # the task expands it
    answered=$(timeout -k 5 30 srun --overlap --nodes="$nodes" --ntasks="$nodes" \
        --ntasks-per-node=1 --cpus-per-task=1 bash -c 'echo "$SLURMD_NODENAME"' 2>/dev/null) \
        || true  # the nodes that answered are listed all the same
    for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
        grep -qx "$node" <<<"$answered" || echo "$node"
    done
}

# The search ended neither done nor stopped: say why if SLURM or a lost node tells, chain a
# successor (without the lost nodes) if a node was lost, else print how to continue.
atoll_search_failed() {
    local code="$1" lost
    case "$atoll_term_cause" in
        requeue)
            atoll_log "atoll search exited $code; SLURM requeued this job: the requeued job" \
                "resumes the run"
            return ;;
        ?*)
            atoll_log "atoll search exited $code after SIGTERM ($atoll_term_cause): not" \
                "resubmitting; continue with: $(atoll_continue_command)"
            return ;;
    esac
    lost=$(atoll_lost_nodes | paste -sd, -)
    if [[ -z "$lost" ]]; then
        atoll_log "atoll search exited $code: stopping (no resubmission); the rows flushed" \
            "before are kept: read the rank logs (RUN_DIR/logs), then continue with:" \
            "$(atoll_continue_command)"
        return
    fi
    atoll_log "atoll search exited $code and node(s) $lost of this job did not answer: lost" \
        "with the search (the rows flushed before are kept); resubmitting without them"
    atoll_resubmit "$lost" || true
}

# One worker per node's GPUs unless ATOLL_RANKS_PER_WORKER says otherwise; it must divide the
# tasks per node, so that no worker spans two nodes.
atoll_ranks_per_worker() {
    local visible="${CUDA_VISIBLE_DEVICES:-}" per_node
    local gpus="${ATOLL_RANKS_PER_WORKER:-${SLURM_GPUS_ON_NODE:-}}"
    if [[ -z "$gpus" && -n "$visible" ]]; then
        gpus=$(tr ',' '\n' <<<"$visible" | grep -c .)
    fi
    per_node="${SLURM_NTASKS_PER_NODE:-$((${SLURM_NTASKS:-1} / ${SLURM_JOB_NUM_NODES:-1}))}"
    per_node="${per_node%%(*}"  # 4(x2) -> 4
    if [[ -z "$gpus" || "$gpus" -lt 1 || $((per_node % gpus)) -ne 0 ]]; then
        echo "atoll-job: error: ranks per worker '${gpus:-unknown}' must divide the $per_node tasks" \
            "per node: request GPUs (--gres=gpu:N) or set ATOLL_RANKS_PER_WORKER" >&2
        exit 2
    fi
    echo "$gpus"
}

# The whole job: profile, environment, staging, preflight, search, resubmission.
# Arguments: gpu|cpu CONFIG RUN_DIR [more atoll search options]
atoll_job() {
    if [[ $# -lt 3 ]]; then
        echo "atoll-job: error: usage: sbatch JOBSCRIPT CONFIG RUN_DIR [--set KEY=VALUE ...]" >&2
        exit 2
    fi
    local gpu="$1" config="$2" run_dir="$3"
    shift 3
    ATOLL_SCRIPT_ARGS=("$config" "$run_dir" "$@")
    trap 'atoll_on_signal USR1' USR1
    trap 'atoll_on_signal TERM' TERM
    if [[ -e "$run_dir/$ATOLL_STOP_FILE" ]]; then
        atoll_log "$run_dir/$ATOLL_STOP_FILE exists: the chain is stopped, not starting;" \
            "remove it to continue"
        return 0
    fi
    atoll_load_profile
    atoll_threads
    atoll_launcher "$gpu"
    local sets=()
    if [[ "$gpu" == gpu ]]; then
        sets+=(--set "search.ranks_per_worker=$(atoll_ranks_per_worker)")
    fi
    sets+=("$@")
    if [[ -n "${ATOLL_STAGE_FROM:-}" ]]; then
        local staged
        staged="${ATOLL_STAGE_TO:-${TMPDIR:-/tmp}}/atoll-$(basename "$run_dir")-data"
        atoll_stage_data "$ATOLL_STAGE_FROM" "$staged"
        sets+=(--set "objective.data_dir=$staged")
    fi
    atoll_log "job $(atoll_chain_index) of the chain on ${SLURM_JOB_NUM_NODES:-1} node(s)," \
        "${SLURM_NTASKS:-1} tasks x ${SLURM_CPUS_PER_TASK:-1} CPUs; atoll: ${ATOLL_CMD[*]}"
    if [[ "${ATOLL_PREFLIGHT:-1}" != 0 && $atoll_stop_requested == 0 ]]; then
        local rc=0
        atoll_srun "${ATOLL_CMD[@]}" doctor --config "$config" --run-dir "$run_dir" \
            "${sets[@]}" || rc=$?
        if [[ $atoll_stop_requested == 0 && $rc != 0 ]]; then
            atoll_log "preflight failed (atoll doctor exit $rc): not starting the search"
            return "$rc"
        fi
    fi
    local code="$ATOLL_EXIT_RESUME"
    if [[ $atoll_stop_requested == 0 ]]; then
        code=0
        atoll_srun "${ATOLL_CMD[@]}" search --config "$config" --run-dir "$run_dir" \
            "${sets[@]}" || code=$?
    fi
    case "$code" in
        0) atoll_log "the run's budget is spent: done" ;;
        "$ATOLL_EXIT_RESUME")
            atoll_log "stopped before the budget was spent"
            if atoll_continue "$run_dir"; then
                code=0  # a successor resumes the run: this job's part is done
            fi ;;
        "$ATOLL_EXIT_DISK_FULL")
            atoll_log "the run directory's disk is full (or over quota): not resubmitting; free" \
                "space, then submit again (the run resumes)" ;;
        *) atoll_search_failed "$code" ;;
    esac
    return "$code"
}
