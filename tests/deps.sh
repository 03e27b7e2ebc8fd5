#!/usr/bin/env bash
# What the test suite needs beyond the Python packages, installed where that is ours to
# do (the SSO test provider's npm packages, the FOCUS validator's venv), named in one line
# where it is the system's
# (Debian packages), so a newcomer's `make test` tests what CI tests, with no silent skip.
set -uo pipefail
cd "$(dirname "$0")/.."

if command -v npm >/dev/null 2>&1; then
  if [ ! -d tests/sso/provider/node_modules/oidc-provider ]; then
    npm ci --prefix tests/sso/provider --no-audit --no-fund --loglevel=error >/dev/null \
      || echo "tests: npm ci --prefix tests/sso/provider failed; the single sign-on tests will be skipped"
  fi
fi

# The FinOps Foundation's FOCUS validator needs Python 3.12+: a venv of its own
# (tests/board/test_focus_validator.py).
if [ ! -x .venv-focus/bin/python ]; then
  for py in /root/.pyenv/versions/3.1[2-9]*/bin/python3 python3.13 python3.12; do
    if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      ("$py" -m venv .venv-focus && .venv-focus/bin/pip install -q 'focus-validator>=2.2,<3' 'pyarrow<22' 2>/dev/null) \
        || { rm -rf .venv-focus; echo "focus-validator install failed"; }
      break
    fi
  done
fi

missing=()
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || missing+=(slurmd)
command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
command -v munged >/dev/null 2>&1 || missing+=(munge)
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests: some tests will be skipped until you run: sudo apt-get install -y ${missing[*]}"
fi
if ! command -v python3.12 >/dev/null 2>&1; then
  echo "tests: the released agent's interop tests and the FOCUS validator need a python3.12 on PATH (skipped without)"
fi
exit 0
