"""A real SLURM on this host for the tests: munged, slurmctld and two slurmd "nodes" (n1, n2).

Everything lives in one temporary directory (configs, state, logs, fake GPU device files);
the daemons run in the foreground as children of the test session and are stopped by their
PIDs. A requeued job waits for the credential lifetime (``cred_expire``, 120 s by default,
10 s here) before it is eligible again, and then for the scheduler's next pass over the pending
jobs (``sched_interval``, 60 s by default, 2 s here). Each node has 4 CPUs
(``SlurmdParameters=config_overrides`` lets it claim more than the host has) and 4 fake GPUs:
character devices that SLURM hands out through ``--gres`` and
``CUDA_VISIBLE_DEVICES`` (torch sees no CUDA device behind them).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from conftest import alive, descendants

NODES = ("n1", "n2")
CPUS_PER_NODE = 4
GPUS_PER_NODE = 4
CRED_EXPIRE = 10
"""Seconds a requeued job waits before it is eligible (SLURM's default: 120)."""
SCHED_INTERVAL = 2
"""Seconds between the scheduler's passes over pending jobs (SLURM's default: 60)."""
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol")


def missing_tools() -> list[str]:
    return [tool for tool in DAEMONS if shutil.which(tool) is None
            and not Path("/usr/sbin", tool).exists()]


def _tool(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


class SlurmCluster:
    """Start with :meth:`start`, stop with :meth:`stop`; :attr:`env` is what clients need."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.host = socket.gethostname()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.munge_pid: int | None = None
        self.socket = root / "munge" / "munge.socket.2"
        self.conf = root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # --- setup --------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        self._start_munge()
        text = self._slurm_conf()
        for where in ("etc", *(f"etc-{n}" for n in NODES)):
            (self.root / where).mkdir(parents=True, exist_ok=True)
            (self.root / where / "slurm.conf").write_text(text)
            (self.root / where / "gres.conf").write_text(self._gres_conf())
        for node in NODES:
            pmix = self.root / "pmix" / node
            pmix.mkdir(parents=True, exist_ok=True)
            (self.root / f"etc-{node}" / "mpi.conf").write_text(f"PMIxCliTmpDirBase={pmix}\n")
            (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
        for name in ("state", "log"):
            (self.root / name).mkdir(exist_ok=True)
        self._daemon("slurmctld", [_tool("slurmctld"), "-D", "-c", "-f", str(self.conf)],
                     self.env)
        for node in NODES:
            self._slurmd(node)
        self._wait_idle(timeout)

    def _slurmd(self, node: str) -> None:
        conf = self.root / f"etc-{node}" / "slurm.conf"
        self._daemon(f"slurmd-{node}", [_tool("slurmd"), "-D", "-N", node, "-f", str(conf)],
                     {**os.environ, "SLURM_CONF": str(conf)})

    def lose_node(self, node: str) -> None:
        """Kill ``node`` as a failing node would end: its slurmd, its job steps' slurmstepd
        and their tasks, all at once (SIGKILL)."""
        daemon = self.procs[f"slurmd-{node}"]
        victims = [daemon.pid, *self.stepds(node)]
        victims += [child for pid in victims for child in descendants(pid)]
        for pid in victims:
            _signal(pid, signal.SIGKILL)
        daemon.wait()

    def restart_node(self, node: str, timeout: float = 60) -> None:
        """Start ``node``'s slurmd again after :meth:`lose_node`; returns once both nodes are
        idle (the lost node's jobs have been cleaned up)."""
        self._slurmd(node)
        self._wait_idle(timeout)

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        munge.mkdir(parents=True, exist_ok=True)
        key = munge / "munge.key"
        subprocess.run([_tool("mungekey"), "--create", f"--keyfile={key}", "--force"],
                       check=True, capture_output=True)
        shutil.chown(munge, "munge", "munge")
        shutil.chown(key, "munge", "munge")
        key.chmod(0o600)
        munge.chmod(0o755)
        pid_file = munge / "munged.pid"
        done = subprocess.run(["runuser", "-u", "munge", "--", _tool("munged"),
                        f"--socket={self.socket}", f"--pid-file={pid_file}",
                        f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'seed'}",
                        f"--key-file={key}"], capture_output=True, text=True, timeout=30)
        if done.returncode:
            raise RuntimeError(f"munged did not start: {done.stderr.strip()}")
        self.munge_pid = int(pid_file.read_text().split()[0])

    def _slurm_conf(self) -> str:
        r = self.root
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={_free_port()} "
            f"CPUs={CPUS_PER_NODE} RealMemory=4000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
            for n in NODES)
        return f"""\
ClusterName=atolltest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={self.socket},cred_expire={CRED_EXPIRE}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SchedulerType=sched/builtin
SchedulerParameters=sched_interval={SCHED_INTERVAL}
GresTypes=gpu
MpiDefault=none
ReturnToService=2
JobRequeue=1
# SLURM's default: saving a search on a loaded 2-core host can take more than 5 s
KillWait=30
MinJobAge=600
{nodes}
PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP \
OverSubscribe=FORCE:4
"""

    def _gres_conf(self) -> str:
        dev = self.root / "dev"
        dev.mkdir(exist_ok=True)
        lines = ["AutoDetect=off"]
        for node in NODES:
            files = []
            for i in range(GPUS_PER_NODE):
                path = dev / f"{node}-nvidia{i}"
                if not path.exists():
                    os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))  # a char device, like GPUs
                files.append(str(path))
            lines += [f"NodeName={node} Name=gpu File={f}" for f in files]
        return "\n".join(lines) + "\n"

    def _daemon(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("wb")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}: {self.logs()}")
            done = subprocess.run([_tool("sinfo"), "-h", "-N", "-o", "%N %t"], env=self.env,
                                  capture_output=True, text=True, check=False)
            state = done.stdout + done.stderr
            if all(f"{n} idle" in state for n in NODES):
                return
            time.sleep(0.5)
        raise RuntimeError(f"SLURM nodes not idle after {timeout}s: {state}\n{self.logs()}")

    def logs(self) -> str:
        """The daemons' logs, for a failure message."""
        found = []
        for path in sorted((self.root / "log").glob("*")):
            found.append(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(found)

    # --- teardown -----------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every daemon this cluster started, by PID: TERM, then KILL after 10 s."""
        pids = [p.pid for p in self.procs.values() if p.poll() is None]
        if self.munge_pid:
            pids.append(self.munge_pid)
        pids += self.stepds()
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                _signal(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in [p for p in pids if p not in {q.pid for q in self.procs.values()}]:
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if alive(pid):
                _signal(pid, signal.SIGKILL)

    def stepds(self, node: str = "") -> list[int]:
        """The slurmstepd processes of this cluster's slurmd (of ``node`` only, if given): they
        detach from it, and are known by the slurmd log file of ours that they keep open."""
        mine = str(self.root / "log" / f"slurmd-{node}.log") if node else str(self.root)
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if not (proc / "cmdline").read_bytes().startswith(b"slurmstepd"):
                    continue
                if any(os.readlink(fd).startswith(mine) for fd in
                       (proc / "fd").iterdir()):
                    found.append(int(proc.name))
            except OSError:
                continue
        return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass

