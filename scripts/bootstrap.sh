#!/usr/bin/env bash
# Make ./.venv, a virtual environment with gpudash installed (editable), plus EXTRAS.
#
#   bash scripts/bootstrap.sh          # the app
#   bash scripts/bootstrap.sh test     # the app and everything the test suite needs
#
# A venv works where pip refuses the system Python (PEP 668: Debian 12, Ubuntu 24.04).
# Python >= 3.11 is taken from $PYTHON, else the newest python3.1x on PATH. As root on
# Debian/Ubuntu the venv module is installed when missing; otherwise we say how.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-}

py=""
for candidate in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    py=$(command -v "$candidate"); break
  fi
done
if [ -z "$py" ]; then
  echo "bootstrap: gpudash needs Python >= 3.11 (apt-get install python3, or set PYTHON=...)" >&2
  exit 1
fi

if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing python${version}-venv" >&2
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "python${version}-venv" >/dev/null
  else
    echo "bootstrap: $py has no venv module: sudo apt-get install python${version}-venv" >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  rm -rf .venv
  "$py" -m venv .venv
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e "$spec"
echo "bootstrap: .venv ready ($(.venv/bin/python --version), gpudash${extras:+ + $extras})" >&2
