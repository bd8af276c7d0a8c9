"""A Slurm node's own state, which an operator changes: drained (Slurm starts no new job
there; the jobs running finish) with a reason, and resumed.

What the host said of itself as a node is the Slurm kind's facts under the key ""
(``node``, ``node_state``, ``drain``, ``reason``, ``error``). The commands are built here
and nowhere else, as argv (never a shell line), from a node name checked to be one node
(a host list such as ``gpu[1-4]`` would drain four) and a reason made one line: Slurm
keeps a reason as given, but prints it inside the node's one-line record (a newline in
it splits ``scontrol show node -o``, as seen on 22.05), and ``scontrol`` takes off one
leading and one trailing double quote (``Reason=x"`` is stored ``x``): so the reason
always goes wrapped in quotes, which Slurm takes off, and its own quotes arrive intact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpudash.domain.model import Fact, HostSnapshot
from gpudash.domain.owners.slurm import KIND, LIVE, jobs, node_facts

DRAIN, RESUME = "drain", "resume"
VERBS = (DRAIN, RESUME)
REASON_MAX = 200  # characters sent; the collector carries 256 bytes of it (then "…")
# the operator's own words: what is left once "gpudash: USER drained: " has its part (a
# user name of up to 32 characters, as useradd allows)
WORDS_MAX = REASON_MAX - len("gpudash:  drained: ") - 32
TRUNCATED = "…"  # what the collector ends a text it cut with
# one node: a host name (letters, digits, '.', '_', '-'); no host-list brackets or commas
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` as Slurm is given a reason: control characters and line breaks become
    spaces, the ends trimmed (what is shown in the plan is exactly what is sent)."""
    return _CONTROL.sub(" ", text).strip()


def drain_reason(operator: str, text: str | None) -> str:
    """The reason a drain is given: says gpudash and who drained, then the operator's own
    words (``gpudash: alice drained: GPU 3 ECC errors``)."""
    words = one_line(text or "")
    head = f"gpudash: {one_line(operator) or 'someone'} drained"
    return f"{head}: {words}" if words else head


def validate_node(node: str) -> str:
    """One Slurm node's name, or ``ValueError`` (host text: never an option, a host list
    or a second ``Key=value``)."""
    if not isinstance(node, str) or NODE_NAME.fullmatch(node) is None:
        raise ValueError(f"not a Slurm node name: {node!r}")
    return node


def validate_reason(reason: str) -> str:
    """A drain's reason as sent: one line, not empty, at most ``REASON_MAX`` characters;
    else ``ValueError``."""
    if not isinstance(reason, str) or not reason or one_line(reason) != reason:
        raise ValueError(f"not a one-line reason: {reason!r}")
    if len(reason) > REASON_MAX:
        raise ValueError(f"the reason is {len(reason)} characters long; at most {REASON_MAX}")
    return reason


def node_argv(verb: str, node: str, reason: str | None = None) -> tuple[str, ...]:
    """``scontrol update NodeName=NODE State=DRAIN Reason="REASON"`` (or ``State=RESUME``),
    every part checked; ``ValueError`` otherwise."""
    node = validate_node(node)
    if verb == DRAIN:
        return ("scontrol", "update", f"NodeName={node}", "State=DRAIN",
                f'Reason="{validate_reason(reason or "")}"')
    if verb == RESUME and reason is None:
        return ("scontrol", "update", f"NodeName={node}", "State=RESUME")
    raise ValueError(f"not a node command: {verb!r}")


def _text(facts: Mapping[str, Fact], name: str) -> str | None:
    value = facts.get(name)
    return value if isinstance(value, str) and value else None


def node_of(snapshot: HostSnapshot) -> tuple[str | None, str | None]:
    """(the node's name, None) where the host is a Slurm node whose state Slurm said; else
    (None, why not), in words."""
    facts = node_facts(snapshot)
    if not facts:
        return None, (f"{snapshot.host} is not a Slurm node (no slurmd runs there, or "
                      "squeue is not installed)")
    error = _text(facts, "error")
    if error is not None or _text(facts, "node_state") is None:
        said = error or "no state for the node"
        return None, f"Slurm did not say {snapshot.host}'s node state: {said}"
    name = _text(facts, "node") or ""
    if NODE_NAME.fullmatch(name) is None:
        return None, f"not a Slurm node name gpudash passes to scontrol: {name!r}"
    return name, None


def is_drained(snapshot: HostSnapshot) -> bool:
    return bool(node_facts(snapshot).get("drain"))


def state_of(snapshot: HostSnapshot) -> str:
    """``MIXED+DRAIN`` and its reason, as Slurm said them (host text)."""
    facts = node_facts(snapshot)
    state = _text(facts, "node_state") or "?"
    why = _text(facts, "reason")
    return state + (f" (reason: {why})" if why else "")


def reason_matches(said: str | None, sent: str) -> bool:
    """Whether the reason Slurm reports is the one sent (or, cut on the wire, begins it)."""
    if said is None:
        return False
    if said.endswith(TRUNCATED) and len(said) > 1:
        return sent.startswith(said[: -len(TRUNCATED)])
    return said == sent


def running_jobs(snapshot: HostSnapshot) -> list[str]:
    """The jobs Slurm runs on the node, one line each (``job 4116 (carol's eval-harness,
    RUNNING, GPUs 4,5,6,7)``): a drain lets them finish."""
    out = []
    for key, facts in sorted(jobs(snapshot).items(), key=lambda kv: (len(kv[0]), kv[0])):
        state = _text(facts, "state")
        if state not in LIVE:
            continue
        user, name = _text(facts, "user"), _text(facts, "name")
        who = ", ".join(x for x in (f"{user}'s {name}" if user and name else user or name,
                                    state) if x)
        gpus = facts.get("gpus")
        if isinstance(gpus, tuple) and gpus:
            who += ", GPUs " + ",".join(str(g) for g in gpus)
        out.append(f"job {key} ({who})")
    return out


__all__ = ["DRAIN", "KIND", "REASON_MAX", "RESUME", "VERBS", "WORDS_MAX", "drain_reason",
           "is_drained", "node_argv", "node_of", "one_line", "reason_matches", "running_jobs",
           "state_of", "validate_node", "validate_reason"]
