"""The command line's contract with scripts: what goes where, and what each exit code means.

stdout carries only the result (the snapshot, the report; JSON with ``--json``). Plans,
prompts, progress, warnings and errors go to stderr, so ``gpudash reclaim --json > out``
is always valid JSON and a pipe never waits on a prompt it cannot see.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # memory confirmed free (reclaim); the fix in force (fix); every host read
    NOT_FREED = 1  # reclaim: not confirmed (the report says why); snapshot: a host has no GPUs
    USAGE = 2  # bad arguments or a plan that makes no sense: nothing was done
    CONNECT = 3  # a host (or --prometheus) could not be reached or refused us
    UNKNOWN = 4  # the link dropped mid-action and re-verification could not reach the host
    CANCELLED = 5  # declined at the prompt, or interrupted before anything was sent
    INTERRUPTED = 6  # interrupted (Ctrl+C, SIGTERM, quit) after something was sent
    NOT_AUDITED = 7  # refused: the intent record could not be written; nothing was sent
    INTERNAL = 70  # a bug in gpudash (EX_SOFTWARE): the log file has the traceback


# Several hosts, one exit code: the first of these any host ended with. Every code has a
# rank (a test fails when one is added without it): a host that refused to act must never
# read as success beside hosts that did nothing wrong. Worst first: a bug; something sent
# whose outcome is not known or was cut short; nothing sent, by choice or by refusal;
# nobody to ask; memory still held; a usage error; success.
WORST_FIRST: tuple[Exit, ...] = (
    Exit.INTERNAL, Exit.INTERRUPTED, Exit.UNKNOWN, Exit.NOT_AUDITED, Exit.CANCELLED,
    Exit.CONNECT, Exit.NOT_FREED, Exit.USAGE, Exit.OK)


def worst(codes: Iterable[int]) -> int:
    """One exit code for several hosts (or several steps): the worst any ended with; a code
    outside ``Exit`` (a bug) counts as ``INTERNAL``."""
    seen = set()
    for code in codes:
        seen.add(Exit(code) if code in Exit._value2member_map_ else Exit.INTERNAL)
    for code in WORST_FIRST:
        if code in seen:
            return int(code)
    return int(Exit.OK)


EXIT_CODES_HELP = """exit codes:
  0  memory confirmed free (reclaim) / every host read (snapshot) /
     systemctl show reports gpudash's drop-in (fix) /
     scontrol show node reports the node drained or resumed (drain, resume)
  1  not confirmed: the report names what still holds memory and why (reclaim);
     a host was read but could not report its GPUs (snapshot);
     Slurm did not report the node's new state in time (drain, resume)
  2  usage or plan error: nothing was done
  3  a host could not be reached or refused us (auth, host key, sudo -n);
     --prometheus: Prometheus down, slow, refused (401/403), TLS, a query error,
     an answer too big or not Prometheus' (stderr says which)
  4  outcome unknown: the link dropped mid-action and re-verification failed
  5  cancelled: declined at the prompt or interrupted before anything was sent
  6  interrupted after something was sent: the report lists what reached the host
  7  refused: the audit record could not be written (a full disk, a state directory
     refused); nothing was sent (--no-audit acts anyway)
 70  internal error (a bug): $XDG_STATE_HOME/gpudash/gpudash.log has the traceback
stdout carries only the result; plan, prompt, progress and errors go to stderr."""
