#!/usr/bin/env bash
# Debian's Slurm and MUNGE for the scheduler tests (tests/slurm): installed if missing,
# never started here (the tests start their own munged, slurmctld and slurmd).
set -euo pipefail

if command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 \
  && command -v sbatch >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm-setup: not root; install them with: sudo apt-get install -y slurmctld slurmd slurm-client munge" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The daemons and the client commands; no recommends (the dev packages, the docs).
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
