"""The ready proof of the shell fallback's hosts (no python3), in one observation, in bash.

The same rule as the Python collector's (``gpudash.collector.host.proof``): the probe's own
connection is the evidence. The script opens it (bash's ``/dev/tcp``), sends its request
head without the blank line that ends it, finds the server end of that connection in
``/proc/net/tcp*`` and the process holding it among ``/proc/*/fd`` (at most
``HOLDER_SCAN_MAX`` descriptors looked at), prints that process's comm and cgroup, quoted
line by line as the stream script quotes host text (a file name or comm can never be read
as a marker), and only then finishes the request and prints the status line. gpudash
counts the status only when the process is the owner's. A host without bash offers no
ready proof: it is said, never guessed.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from gpudash.collector.host.proof import HOLDER_SCAN_MAX
from gpudash.collector.host.ready import (
    container_listener_refusal,
    unit_listener_refusal,
)
from gpudash.protocol.source import CommandResult, ContainerOwner, ListenerOwner
from gpudash.record import record

Run = Callable[[list[str], float], Awaitable[CommandResult]]

# $1 port, $2 the descriptor cap, $3 the path, $4 seconds to wait for the status line: each
# checked before it is passed, never interpolated into the script.
# readlink -z: a link target holding a newline cannot pass for "socket:[INODE]".
PROBE_SCRIPT = r"""
LC_ALL=C; export LC_ALL
port=$1; cap=$2; path=$3; secs=$4
q() { awk '{ print "|" $0 }'; }
{ exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || { echo "@refused"; exit 0; }
printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nUser-Agent: gpudash-probe\r\n' "$path" "$port" \
  >&3 2>/dev/null || { echo "@closed"; exit 0; }
printf 'Accept: */*\r\nConnection: close\r\n' >&3 2>/dev/null || { echo "@closed"; exit 0; }
me=$(readlink "/proc/$$/fd/3"); me=${me#socket:}
m='function m(a) { return substr(a, 1, 24) == "0000000000000000FFFF0000" ? substr(a, 25) : a }'
set -- $(awk -v i="$me" "$m"' "[" $10 "]" == i { print m($2), m($3); exit }' \
  /proc/net/tcp /proc/net/tcp6 2>/dev/null)
[ $# -eq 2 ] || { echo "@unseen"; exit 0; }
ours=$1; theirs=$2; n=0
while :; do
  got=$(awk -v l="$theirs" -v r="$ours" -v i="$me" "$m"'
    m($2) == l && m($3) == r && $4 == "01" && $10 != "0" { print "S " $10 }
    "[" $10 "]" == i && $4 != "01" { print "C" }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
  case "$got" in
    *S\ *) srv=${got#*S }; srv=${srv%%[!0-9]*}; break ;;
    *C*) echo "@closed"; exit 0 ;;
  esac
  n=$((n + 1))
  [ "$n" -lt 300 ] || { echo "@unaccepted"; exit 0; }
  sleep 0.01 2>/dev/null || sleep 1
done
seen=0; hidden=
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ -d "$d/fd" ] || continue
  if [ ! -r "$d/fd" ] || [ ! -x "$d/fd" ]; then hidden=1; continue; fi
  set -- "$d"/fd/*
  [ -e "$1" ] || [ -L "$1" ] || continue
  seen=$((seen + $#))
  if [ "$seen" -gt "$cap" ]; then echo "@capped"; exit 0; fi
  if readlink -z -- "$@" 2>/dev/null | tr '\n\000' '?\n' | grep -Fxq -e "socket:[$srv]"; then
    echo "@pid $pid"
    echo "@comm"; head -c 64 "$d/comm" 2>/dev/null | q
    echo "@cgroup"; head -c 65536 "$d/cgroup" 2>/dev/null | q
    echo "@end"
    printf '\r\n' >&3 2>/dev/null || { echo "@closed"; exit 0; }
    if IFS= read -r -t "$secs" line <&3; then
      echo "@status"; printf '%s\n' "$line" | head -c 200 | tr -d '\r' | q
    else
      echo "@noanswer"
    fi
    exit 0
  fi
done
if [ -n "$hidden" ]; then echo "@hidden"; else echo "@nobody"; fi
"""

# What the script says when it found nobody to name, in words (port filled in).
WHY = {
    "refused": "connection refused",
    "closed": "port {port}: the other end spoke or closed before it was seen: who it was "
              "cannot be told",
    "unseen": "port {port}: the probe's own connection is not in /proc/net/tcp",
    "unaccepted": "the connection to port {port} was not accepted in time",
    "hidden": "who answers on port {port} cannot be told: some processes' descriptors are "
              "not readable by this login (--sudo)",
    "nobody": "who answers on port {port} cannot be told: nobody holds its connection",
    "capped": "who answers on port {port} cannot be told: more than {cap} descriptors",
    "unread": "port {port}: the probe gave no answer",
}
NO_BASH = ("no ready proof on this host: it has neither python3 (the collector) nor bash "
           "(the shell fallback's probe)")
STATUS_LINE = re.compile(r"HTTP/1\.[01] ([1-5][0-9][0-9])(?: .*)?")
URL_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]{0,1024}")


@record
class ShellListener:
    """What the script found: the pid holding the other end of the probe's connection,
    with its comm and cgroup text, and the status it answered; or nobody, and why
    (``reason``: a key of ``WHY``)."""

    pid: int | None
    comm: str = ""
    cgroup: str = ""
    reason: str = ""
    status: int | None = None  # the answer's status line, asked only after the above


def probe_argv(port: int, path: str, seconds: float, cap: int = HOLDER_SCAN_MAX) -> list[str]:
    """The command that GETs ``path`` on the host's 127.0.0.1:``port`` and says who
    answered."""
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError(f"not a TCP port: {port!r}")
    if not URL_PATH.fullmatch(path):
        raise ValueError(f"not a URL path to ask: {path!r}")
    secs = f"{min(max(float(seconds), 0.1), 60.0):.1f}"
    return ["bash", "-c", PROBE_SCRIPT, "bash", str(port), str(int(cap)), path, secs]


def parse_listener(output: str) -> ShellListener:
    """The script's output (host text quoted with ``|``) -> what it found."""
    lines = output.splitlines()
    heads = [line for line in lines if line.startswith("@")]
    if not heads:
        return ShellListener(None, reason="unread")
    first = heads[0]
    if not first.startswith("@pid "):
        reason = first[1:].strip()
        return ShellListener(None, reason=reason if reason in WHY else "unread")
    pid_text = first[5:].strip()
    if "@end" not in heads or not pid_text.isdigit():
        return ShellListener(None, reason="unread")
    sections: dict[str, list[str]] = {"@comm": [], "@cgroup": [], "@status": []}
    current: list[str] | None = None
    for line in lines[lines.index(first) + 1:]:
        if line.startswith("@"):
            current = sections.get(line.strip())
        elif line.startswith("|") and current is not None:
            current.append(line[1:])
    status = STATUS_LINE.fullmatch(sections["@status"][0].strip()) if sections[
        "@status"] else None
    return ShellListener(int(pid_text), "\n".join(sections["@comm"]),
                         "\n".join(sections["@cgroup"]),
                         "" if sections["@status"] or "@noanswer" in heads else "unread",
                         int(status[1]) if status else None)


def shell_listener_refusal(port: int, owner: ListenerOwner, found: ShellListener
                           ) -> str | None:
    """Why the shell's finding does not prove ``owner`` serves, or None: the process that
    holds the other end of the probe's connection is the owner's own."""
    if found.pid is None:
        return WHY.get(found.reason, WHY["unread"]).format(port=port, cap=HOLDER_SCAN_MAX)
    if isinstance(owner, ContainerOwner):
        return container_listener_refusal(port, owner.id, owner.runtime, found.pid,
                                          found.comm, found.cgroup)
    return unit_listener_refusal(port, owner, found.pid, found.comm, found.cgroup)


async def ask_owned(url: str, owner: ListenerOwner, run: Run, timeout_s: float
                    ) -> tuple[int | None, str | None]:
    """The shell fallback's GET of ``url`` for ``owner``, asked of a host through ``run``
    (its connection's way to run an argv): (status, None), or (None, why)."""
    parts = urlsplit(url)
    try:
        port = parts.port or 80
        argv = probe_argv(port, (parts.path or "/") + (f"?{parts.query}" if parts.query
                                                      else ""), timeout_s)
    except ValueError as exc:
        return None, str(exc)
    result = await run(argv, timeout_s + 10)
    if result.returncode == 127:  # bash: command not found
        return None, NO_BASH
    if result.returncode is None:
        return None, result.output or "no answer"
    found = parse_listener(result.output)
    refused = shell_listener_refusal(port, owner, found)
    if refused is not None:
        return None, refused
    if found.status is None:
        return None, f"no answer within {timeout_s:g} s" if not found.reason else WHY[
            "unread"].format(port=port)
    return found.status, None
