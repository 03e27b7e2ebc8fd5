#!/usr/bin/env bash
# What the test suite needs beyond the Python packages, installed where that is ours to
# do (the SSO test provider's npm packages), named in one line where it is the system's
# (Debian packages), so a newcomer's `make test` tests what CI tests, with no silent skip.
set -uo pipefail
cd "$(dirname "$0")/.."

if command -v npm >/dev/null 2>&1; then
  if [ ! -d tests/sso/provider/node_modules/oidc-provider ]; then
    npm ci --prefix tests/sso/provider --no-audit --no-fund --loglevel=error >/dev/null \
      || echo "tests: npm ci --prefix tests/sso/provider failed; the single sign-on tests will be skipped"
  fi
fi

missing=()
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests: some tests will be skipped until you run: sudo apt-get install -y ${missing[*]}"
fi
if ! command -v python3.12 >/dev/null 2>&1; then
  echo "tests: the released agent's interop tests need a python3.12 on PATH (skipped without)"
fi
exit 0
