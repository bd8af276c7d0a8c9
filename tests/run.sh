#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what the tests need
# (OpenSSH server, systemd-nspawn, sudo, gcc/make for the stand-in NVIDIA driver, the
# Python test dependencies), then runs the linters, the type checker, the import
# contract and pytest (lab tests included when run as root, the real vLLM's too: it is
# installed once per machine under /var/cache/gpudash/realvllm). Extra arguments go to pytest.
#
# pytest runs in three parts (pytest-xdist): everything but the lab, two workers per core
# (half of a UI test's time is real waiting: a dialog's arming, a pty's output, a real
# server's answer); then the lab hosts and the real vLLM, a test module per core (each
# worker boots its own hosts, on ports of their own; the modules share no daemon); then the
# tests that flood the machine by design (marker serial), alone.
#
# `bash tests/run.sh --fast`: the edit-test loop's tier. No installs but the venv, no
# linters; pytest on every core without the tests that boot lab hosts, start a real sshd
# or a real Prometheus, run the real vLLM or the real program on a pty (markers lab, ssh,
# prometheus, realvllm, terminal).
# Everything else (the UI on a stepped clock, the CLI in-process, the wire, the engine)
# runs. `.ci/run` always runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# A test's screen is composed at most 10 times a second, not Textual's 60: the dashboard
# redraws its data at most 5 times a second anyway (ui/throttle.py), and the tests run the
# app on every worker at once (a sixth of the CPU they spent drawing frames nobody sees).
export TEXTUAL_FPS="${TEXTUAL_FPS:-10}"
# Bytecode cached (where the environment says not to): each pytest worker otherwise
# rewrites every test module's asserts and compiles gpudash again, ~6 s of CPU a worker.
unset PYTHONDONTWRITEBYTECODE

if [ "${1:-}" = "--fast" ]; then
  shift
  bash scripts/bootstrap.sh test >/dev/null
  exec .venv/bin/python -m pytest -q -n "$(( 2 * $(nproc) ))" --dist worksteal \
    -m "not lab and not ssh and not realvllm and not terminal and not prometheus and not serial" "$@"
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  need=()
  [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  command -v ssh >/dev/null || need+=(openssh-client)
  command -v systemd-nspawn >/dev/null || need+=(systemd-container)
  command -v sudo >/dev/null || need+=(sudo)
  command -v gcc >/dev/null || need+=(gcc)
  command -v make >/dev/null || need+=(make)
  command -v tmux >/dev/null || need+=(tmux)
  command -v xauth >/dev/null || need+=(xauth)  # the no-X11-forwarding test needs a real one
  command -v groff >/dev/null || need+=(groff-base)  # the man page renders (docs/gpudash.1)
  # the exporter's end-to-end test starts its own server on 127.0.0.1 (promtool: the rules)
  command -v prometheus >/dev/null || need+=(prometheus)
  [ -x /usr/sbin/dockerd ] || need+=(docker.io)  # a real dockerd inside a lab host
  [ -x /usr/bin/podman ] || need+=(podman)  # and a real podman
  # a real Slurm 22.05 inside a lab host (tests/lab/slurm.py): its daemons run there only
  slurm=0
  [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/slurmctld ] && command -v scontrol >/dev/null \
    && [ -x /usr/sbin/munged ] || { need+=(slurmd slurmctld slurm-client munge); slurm=1; }
  # the real vLLM's venv is made from Debian's python3 (tests/realvllm/install.py)
  /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
  if [ ${#need[@]} -gt 0 ]; then
    echo "run.sh: installing ${need[*]}"
    apt-get update -q >/dev/null
    # dockerd and podman are for the lab hosts only (they start them): never start them here
    rcd=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      rcd=/usr/sbin/policy-rc.d
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
    [ -z "$rcd" ] || rm -f "$rcd"
    # their postinst enabled munge, slurmd and slurmctld on this machine itself: every lab
    # host booted over / would inherit the links (the lab drops them too, but the machine
    # must not start them either)
    if [ "$slurm" = 1 ]; then
      rm -f /etc/systemd/system/multi-user.target.wants/{munge,slurmd,slurmctld}.service
    fi
  fi
fi

# A virtual environment (.venv) so this works where pip refuses the system Python
# (PEP 668); PYTHON picks the interpreter it is made from.
bash scripts/bootstrap.sh test
PY=.venv/bin/python
# The real vLLM (CPU build) that the lab's real-vLLM tests run: installed once per machine
# outside the checkout (tests/realvllm/README.md; a few minutes, ~3.5 GB), silent when
# cached; a failure prints the install log's tail and ends the run.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  "$PY" tests/realvllm/install.py
fi
# The collector decoder's bounds are tested under Python 3.12 and 3.13 too (their json
# reads deeper nesting than 3.11's): pyenv's or python3.1x on PATH; pyenv installs one
# that is missing (silent when present). Those found are required: the test fails, not
# skips, without them.
required=()
for v in 3.12 3.13; do
  root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
  if compgen -G "$root/versions/$v.*/bin/python$v" >/dev/null \
      || python$v -c '' 2>/dev/null; then
    required+=("$v")
  elif command -v pyenv >/dev/null; then
    echo "run.sh: installing Python $v with pyenv (for tests/test_wire.py)"
    log=$(mktemp)
    if ! pyenv install -s "$v" >"$log" 2>&1; then
      tail -20 "$log"; rm -f "$log"; exit 1
    fi
    rm -f "$log"
    required+=("$v")
  else
    echo "run.sh: no Python $v here and no pyenv to install it: tests/test_wire.py skips it"
  fi
done
export GPUDASH_REQUIRE_PYTHONS="${required[*]}"

echo "== ruff";         "$PY" -m ruff check gpudash tests bench screenshots scripts
echo "== mypy --strict (every package, the UI too)"; "$PY" -m mypy
# the collector runs on GPU hosts' own python3: 3.7 at the oldest (novermin marks guarded calls)
echo "== vermin (collector/host: Python 3.7+)"
if ! out=$("$PY" -c "import sys, vermin; sys.exit(vermin.main())" \
    --no-tips --violations -t=3.7- gpudash/collector/host/*.py 2>&1); then
  echo "$out"; exit 1
fi
echo "3.7 kept"
echo "== import contract"
"$PY" -c "from importlinter.cli import lint_imports_command; lint_imports_command()" --no-cache >/dev/null \
  && echo "contract kept"
echo "== pytest, part 1 of 3: everything but the lab hosts, two workers per core"
one=0; "$PY" -m pytest -q --durations=15 -n "$(( 2 * $(nproc) ))" --dist worksteal \
  -m "not lab and not realvllm and not serial" "$@" || one=$?
echo "== pytest, part 2 of 3: the lab hosts and the real vLLM, a module per core"
two=0; "$PY" -m pytest -q --durations=15 -n "$(nproc)" --dist loadfile \
  -m "(lab or realvllm) and not serial" "$@" || two=$?
echo "== pytest, part 3 of 3: the floods, alone"
three=0; "$PY" -m pytest -q --durations=5 -m serial "$@" || three=$?
# exit 5 is "no test selected" (arguments that pick only one part's tests): a failure only
# where no part ran one
for rc in "$one" "$two" "$three"; do
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then exit "$rc"; fi
done
if [ "$one" = 5 ] && [ "$two" = 5 ] && [ "$three" = 5 ]; then exit 5; fi
exit 0
