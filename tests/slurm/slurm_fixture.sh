#!/usr/bin/env bash
# A private single-host Slurm for the `slurm` tests: munged with its own key and socket, slurmctld
# and slurmd from Debian's packages, a generated slurm.conf on localhost ports, all under DIR.
#   slurm_fixture.sh start DIR   start the daemons; DIR/env holds SLURM_CONF for the tests, or
#                                DIR/skip the reason they could not start (the tests then skip)
#   slurm_fixture.sh stop DIR    stop every daemon by the PID it wrote, then remove its state
# It never touches a system Slurm or munge: every path and port is its own.
set -uo pipefail

cmd="${1:-}"
dir="${2:-}"
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|stop DIR" >&2
  exit 2
fi
dir="$(realpath -m "$dir")"
ctld_port="${CAPPLAN_SLURM_PORT:-26817}"
slurmd_port=$((ctld_port + 1))

skip() {
  echo "$*" > "$dir/skip"
  echo "slurm fixture: not started: $*"
  stop_daemons
  exit 0
}

stop_pid_file() {
  local f="$1" pid i
  [ -f "$f" ] || return 0
  pid="$(cat "$f" 2>/dev/null)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
}

stop_daemons() {
  stop_pid_file "$dir/slurmd.pid"
  stop_pid_file "$dir/slurmctld.pid"
  stop_pid_file "$dir/munged.pid"
}

start() {
  rm -rf "$dir"
  mkdir -p "$dir"/{state,spool,log,munge}
  chmod 700 "$dir/munge"
  local host
  host="$(hostname -s)"
  for p in munged slurmctld slurmd sbatch srun squeue sacct scancel scontrol sinfo; do
    command -v "$p" >/dev/null 2>&1 || skip "$p not found (apt-get install munge slurmctld slurmd slurm-client)"
  done
  [ "$(id -u)" -eq 0 ] || skip "the private Slurm runs its daemons as root (SlurmUser=root); this is uid $(id -u)"

  # munge: its own key, socket and pid file; -f lets it run with a key and folders it did not make.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
         --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
         --seed-file="$dir/munge/munge.seed" -f >"$dir/log/munged.out" 2>&1 \
    || skip "munged did not start: $(tail -n 3 "$dir/log/munged.out" "$dir/log/munged.log" 2>/dev/null | tr '\n' ' ')"

  local cpus
  cpus="$(nproc)"
  [ "$cpus" -ge 2 ] || cpus=2
  local mem_mb
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))
  cat > "$dir/slurm.conf" <<EOF
ClusterName=capplan-test
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobRequeue=1
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF

  SLURM_CONF="$dir/slurm.conf" slurmctld -c -f "$dir/slurm.conf" >"$dir/log/slurmctld.out" 2>&1 \
    || skip "slurmctld did not start: $(tail -n 5 "$dir/log/slurmctld.out" "$dir/log/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
  SLURM_CONF="$dir/slurm.conf" slurmd -f "$dir/slurm.conf" >"$dir/log/slurmd.out" 2>&1 \
    || skip "slurmd did not start: $(tail -n 5 "$dir/log/slurmd.out" "$dir/log/slurmd.log" 2>/dev/null | tr '\n' ' ')"

  # Ready when the node answers idle (or mixed/allocated, should a job already run).
  local state="" i
  for i in $(seq 1 60); do
    state="$(SLURM_CONF="$dir/slurm.conf" sinfo -h -n "$host" -o %T 2>/dev/null | head -n 1)"
    case "$state" in idle*|mixed*|allocated*) break ;; esac
    sleep 0.5
  done
  case "$state" in
    idle*|mixed*|allocated*) ;;
    *) skip "the node did not come up (state '${state:-none}'): $(tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" 2>/dev/null | tr '\n' ' ')" ;;
  esac
  printf 'SLURM_CONF=%s\nCAPPLAN_SLURM_NODE=%s\nCAPPLAN_SLURM_PARTITION=debug\n' "$dir/slurm.conf" "$host" > "$dir/env"
  rm -f "$dir/skip"
  echo "slurm fixture: started in $dir (node $host, ports $ctld_port/$slurmd_port)"
}

stop() {
  [ -d "$dir" ] || exit 0
  if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
    # Jobs still in the queue are cancelled first so that their steps end with slurmd.
    SLURM_CONF="$dir/slurm.conf" scancel --quiet --full --state=RUNNING 2>/dev/null
    SLURM_CONF="$dir/slurm.conf" scancel --quiet --state=PENDING 2>/dev/null
    sleep 1
  fi
  stop_daemons
  rm -f "$dir/env"
  echo "slurm fixture: stopped"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
