"""The host's Slurm facts (gpudash/collector/host/slurm.py) on what a real Slurm 22.05
printed (tests/data/slurm/, captured on the lab's Slurm host), odd inputs, and the reader
against stand-in tools (a tool missing, hanging, failing; no PATH, as in an Epilog)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from gpudash.collector.host import slurm

DATA = Path(__file__).resolve().parent / "data" / "slurm"
MARK = "@gpudash:0123456789abcdef:"  # the mark squeue_node.txt was captured with
FORGED = ("evil Nodes=gpuhost1 CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:0-3) UserId=root(0) "
          "GroupId=root(0) MCS_label=N/A\nJobId=77 JobName=x UserId=root(0) GroupId=root(0) "
          "MCS_label=N/A JobState=RUNNING")


def data(name: str) -> str:
    return (DATA / name).read_text()


def local(stamp: str) -> int:
    return int(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")))


# --------------------------------------------------------------------------- cgroups


def test_a_batch_task_v2_names_its_job_and_step() -> None:
    assert slurm.job_of_cgroup(data("v2_batch_task.cgroup")) == {
        "job_id": 8, "step": "batch", "task": "0", "uid": None, "stepd": False,
        "layout": "v2"}


def test_the_slurmstepd_of_a_step_is_the_jobs_and_says_so() -> None:
    got = slurm.job_of_cgroup(data("v2_batch_stepd.cgroup"))
    assert got is not None and (got["job_id"], got["step"], got["stepd"]) == (8, "batch", True)


def test_an_srun_step_is_named_by_its_number() -> None:
    got = slurm.job_of_cgroup(data("v2_step0_task.cgroup"))
    assert got is not None and (got["job_id"], got["step"], got["task"]) == (8, "0", "0")


def test_v1_names_job_step_and_uid_from_the_freezer_line() -> None:
    assert slurm.job_of_cgroup(data("v1_batch_task.cgroup")) == {
        "job_id": 2, "step": "batch", "task": None, "uid": 1001, "stepd": False,
        "layout": "v1"}


@pytest.mark.parametrize("name", ["v2_parked_stepd.cgroup", "ssh_session.cgroup"])
def test_no_job_outside_a_jobs_cgroup(name: str) -> None:
    assert slurm.job_of_cgroup(data(name)) is None


def test_a_users_own_cgroup_that_looks_like_a_job_is_no_job() -> None:
    """alice made this path herself (a user's systemd subtree is hers): it is no claim."""
    text = data("user_delegated_lookalike.cgroup")
    assert "gpuhost1_slurmstepd.scope/job_9/step_batch/user/task_0" in text
    assert slurm.job_of_cgroup(text) is None


@pytest.mark.parametrize(("line", "job", "step", "task"), [
    # the recipe's captures (shared/slurm/README.md): PrologFlags=Contain, no Constrain*
    ("0::/system.slice/slurmlab1_slurmstepd.scope/job_8/step_extern/user/task_special",
     8, "extern", "special"),
    ("0::/system.slice/slurmlab1_slurmstepd.scope/job_2/step_batch/user/task_special",
     2, "batch", "special"),
    # 22.05's source: a build without MULTIPLE_SLURMD, slurmd in a container's cgroup
    ("0::/docker.slice/docker-0a1b.scope/system.slice/slurmstepd.scope/job_3/step_0/user/task_1",
     3, "0", "1"),
    ("0::/system.slice/slurmstepd.scope/job_4/step_interactive/user/task_0",
     4, "interactive", "0"),
    ("0::/system.slice/slurmstepd.scope/job_5", 5, None, None),  # the job's own cgroup
])
def test_other_steps_and_scopes(line: str, job: int, step: str | None, task: str | None
                                ) -> None:
    got = slurm.job_of_cgroup(line + "\n")
    assert got is not None and (got["job_id"], got["step"], got["task"]) == (job, step, task)


def test_v2s_line_wins_over_a_v1_line_that_names_another_cgroup() -> None:
    """The recipe's stuck process: its freezer line names the freezer cgroup it was moved
    to, its v2 line still names job 6."""
    text = ("6:freezer:/slurmlab.slurmlab1.stuck\n"
            "0::/system.slice/slurmlab1_slurmstepd.scope/job_6/step_batch/user/task_0\n")
    got = slurm.job_of_cgroup(text)
    assert got is not None and (got["job_id"], got["layout"]) == (6, "v2")


@pytest.mark.parametrize("text", [
    "", "garbage", "\x00\xff::::", "0::/", "0::/system.slice/slurmd.service\n",
    "0::/system.slice/x_slurmstepd.scope/job_/step_batch\n",
    "0::/system.slice/x_slurmstepd.scope/job_12/step_$(reboot)/user/task_0\n",
    "0::/home/alice/slurmstepd.scope/job_3/step_0\n",  # not in a slice
    "6:freezer:/home/slurm_x/uid_1/job_2/step_batch\n",  # not at the hierarchy's root
    "0::/system.slice/a_slurmstepd.scope/job_4294967296/step_0\n",  # past 32 bits
    "6:freezer:/slurm/uid_99999999999999999999/job_2/step_batch\n",
    "0::/system.slice/a_slurmstepd.scope/job_1/step_0\n".replace("/", "//") * 1000,
], ids=lambda text: repr(text[:60]))
def test_odd_cgroups_name_no_job(text: str) -> None:
    assert slurm.job_of_cgroup(text) is None


# --------------------------------------------------------------------------- squeue


def test_the_queue_keeps_names_whole_and_forges_no_job() -> None:
    jobs = {j["job_id"]: j for j in slurm.parse_queue(data("squeue_node.txt"), MARK)}
    assert sorted(jobs) == [1, 2, 5, 6, 7, 8, 9, 10]  # no 77, no 99
    assert jobs[2]["name"] == "x\nJobId=99 JobName=fake UserId=root(0)"
    assert jobs[10]["name"] == FORGED
    assert jobs[9] == {
        "job_id": 9, "array_job_id": None, "array_task_id": None, "uid": 1001,
        "user": "alice", "state": "RUNNING", "partition": "gpu", "end_time": None,
        "nodes": "gpuhost1", "name": "train"}
    assert (jobs[5]["array_job_id"], jobs[5]["array_task_id"]) == (4, 0)
    assert (jobs[8]["array_job_id"], jobs[8]["array_task_id"]) == (8, 3)
    assert jobs[1]["state"] == "CANCELLED"
    assert jobs[1]["end_time"] == local("2026-12-05T03:22:17")


def test_the_queue_read_with_another_mark_is_empty() -> None:
    assert slurm.parse_queue(data("squeue_node.txt"), "@gpudash:ffffffffffffffff:") == []


@pytest.mark.parametrize("text", ["", "\n\n", "garbage\n", MARK + "\n", MARK + "x|y|z\n",
                                  MARK + "1|1|N/A|notanumber|alice|RUNNING|gpu|NONE|n|j\n",
                                  MARK + "1|1|N/A|1001|alice|running lowercase|gpu|NONE|n|j\n"])
def test_odd_queue_lines_are_skipped(text: str) -> None:
    assert slurm.parse_queue(text, MARK) == []


def test_a_name_with_separators_and_a_final_newline_stays_whole() -> None:
    text = (MARK + "3|3|N/A|1001|alice|RUNNING|gpu|NONE|n1|a=b c|d\n\n"
            + MARK + "4|4|N/A|1002|bob|PENDING|gpu|NONE||bob's\n")
    jobs = slurm.parse_queue(text, MARK)
    assert [(j["job_id"], j["name"]) for j in jobs] == [(3, "a=b c|d\n"), (4, "bob's")]


def test_a_long_name_is_cut() -> None:
    text = MARK + "3|3|N/A|1001|alice|RUNNING|gpu|NONE|n1|" + "x" * 5000 + "\n"
    [job] = slurm.parse_queue(text, MARK)
    assert len(job["name"]) == slurm.NAME_MAX and job["name"].endswith(slurm.TRUNCATED)
    [whole] = slurm.parse_queue(text, MARK, name_max=None)
    assert whole["name"] == "x" * 5000


# --------------------------------------------------------------------------- scontrol


def test_a_running_job_says_its_user_partition_state_and_gpus() -> None:
    assert slurm.parse_job(data("job_train_running.txt"), "train", "gpuhost1") == {
        "job_id": 9, "array_job_id": None, "array_task_id": None, "name": "train",
        "user": "alice", "uid": 1001, "state": "RUNNING", "partition": "gpu",
        "nodes": "gpuhost1", "end_time": None, "gpus": [0, 1],
        "gpus_by_nodes": {"gpuhost1": [0, 1]}}


def test_a_forged_name_neither_adds_gpus_nor_changes_the_user() -> None:
    got = slurm.parse_job(data("job_forged_name_running.txt"), FORGED, "gpuhost1")
    assert got is not None
    assert (got["job_id"], got["user"], got["uid"], got["state"]) == (10, "alice", 1001,
                                                                       "RUNNING")
    assert got["gpus"] == [2] and got["gpus_by_nodes"] == {"gpuhost1": [2]}
    assert got["name"] == FORGED


def test_without_its_name_a_record_whose_name_could_mislead_is_not_read() -> None:
    assert slurm.parse_job(data("job_forged_name_running.txt"), None, "gpuhost1") is None
    assert slurm.parse_job(data("job_newline_name_cancelled.txt"), None, "gpuhost1") is None
    # a name that is not the record's: nothing
    assert slurm.parse_job(data("job_forged_name_running.txt"), "evil", "gpuhost1") is None


def test_without_its_name_a_plain_record_is_read() -> None:
    got = slurm.parse_job(data("job_train_running.txt"), None, "gpuhost1")
    assert got is not None and (got["name"], got["gpus"]) == ("train", [0, 1])


def test_the_newline_names_record_is_read_whole_with_its_name() -> None:
    got = slurm.parse_job(data("job_newline_name_cancelled.txt"),
                          "x\nJobId=99 JobName=fake UserId=root(0)", "gpuhost1")
    assert got is not None
    assert (got["job_id"], got["user"], got["uid"], got["state"]) == (2, "alice", 1001,
                                                                       "CANCELLED")


def test_array_tasks() -> None:
    task = slurm.parse_job(data("job_array_task_running.txt"), "arr", "gpuhost1")
    assert task is not None
    assert (task["job_id"], task["array_job_id"], task["array_task_id"], task["gpus"]) == (
        5, 4, 0, [2])
    single = slurm.parse_job(data("job_array_single_running.txt"), "steps", "gpuhost1")
    assert single is not None
    assert (single["job_id"], single["array_job_id"], single["array_task_id"],
            single["gpus"]) == (8, 8, 3, [0, 1])


def test_a_completing_job_no_longer_says_its_gpus() -> None:
    got = slurm.parse_job(data("job_completing.txt"), "steps", "gpuhost1")
    assert got is not None and got["state"] == "COMPLETING"
    assert got["gpus"] is None  # Slurm's detail is empty then: unknown, not "none"
    assert got["end_time"] == local("2026-12-05T03:22:50")


def test_a_listing_is_read_for_its_first_record_only() -> None:
    text = data("jobs_all.txt")
    assert "JobId=99 JobName=fake UserId=root(0)" in text
    got = slurm.parse_job(text, "train", "gpuhost1")
    assert got is not None and (got["job_id"], got["gpus"]) == (1, [0, 1])


def test_another_nodes_gpus_are_not_this_nodes() -> None:
    got = slurm.parse_job(data("job_train_running.txt"), "train", "gpuhost2")
    assert got is not None and got["gpus"] == []


@pytest.mark.parametrize("text", ["", "garbage", "JobId=x JobName=a",
                                  "JobId=1 JobName=a UserId=alice(1001) GroupId=a(1) "
                                  "JobState=running"])
def test_odd_job_records_are_none(text: str) -> None:
    assert slurm.parse_job(text, None, "n") is None


@pytest.mark.parametrize(("gres", "gpus"), [
    ("gpu:2(IDX:0-1)", [0, 1]),
    ("gpu:a100:2(IDX:0,2)", [0, 2]),
    ("gpu:1(IDX:0),gpu:v100:2(IDX:2-3)", [0, 2, 3]),
    ("gpu:3(IDX:0-1,3)", [0, 1, 3]),
    ("", []), ("(null)", []), ("mps:100(0/100)", []),
    ("gpu:2", None), ("gpu:2(IDX:N/A)", None), ("gpu:2(IDX:3-1)", None),
    ("gpu:2(IDX:0-99999)", None),
])
def test_gpu_indexes(gres: str, gpus: list[int] | None) -> None:
    assert slurm.gpu_indexes(gres) == gpus


@pytest.mark.parametrize(("node", "expr", "inside"), [
    ("gpuhost1", "gpuhost1", True),
    ("gpuhost10", "gpuhost1", False),
    ("node07", "node[01-04,07],login1", True),
    ("login1", "node[01-04,07],login1", True),
    ("node7", "node[01-04,07]", False),
    ("node05", "node[01-04,07]", False),
    ("node10", "node[1-10]", True),
    ("node010", "node[1-10]", False),
    ("rack2-node3", "rack[1-2]-node[1-4]", True),
    ("", "gpuhost1", False),
    ("a.b", "a[1]", False),
])
def test_in_hostlist(node: str, expr: str, inside: bool) -> None:
    assert slurm.in_hostlist(node, expr) is inside


def test_a_drained_node_says_its_reason() -> None:
    assert slurm.parse_node(data("node_drain.txt")) == {
        "node": "gpuhost1", "state": "MIXED+DRAIN", "base": "MIXED", "flags": ["DRAIN"],
        "responding": True, "drain": True,
        "reason": "gpudash: GPU 1 holds 30000 MiB after job 12 [pid 727 D]",
        "reason_user": "root", "reason_time": local("2026-12-05T03:22:30")}


def test_a_busy_node_has_no_reason() -> None:
    got = slurm.parse_node(data("node_allocated.txt"))
    assert got is not None
    assert (got["state"], got["drain"], got["reason"]) == ("ALLOCATED", False, None)


def test_a_node_that_does_not_respond() -> None:
    got = slurm.parse_node("NodeName=n1 Arch=x86_64 State=IDLE*+DRAIN Reason=Kill task "
                           "failed [root@2026-12-05T00:19:22]\n")
    assert got is not None
    assert (got["base"], got["flags"], got["responding"], got["drain"], got["reason"]) == (
        "IDLE", ["DRAIN"], False, True, "Kill task failed")


@pytest.mark.parametrize("text", ["", "garbage", "NodeName=n1 State=idle",
                                  "Node n1 not found\n"])
def test_odd_node_records_are_none(text: str) -> None:
    assert slurm.parse_node(text) is None


@pytest.mark.parametrize("token", ["Unknown", "NONE", "N/A", "", None, "2026-13-45T99:00:00"])
def test_times_that_are_not_times(token: str | None) -> None:
    assert slurm.slurm_time(token) is None


# --------------------------------------------------------------------------- the reader


def stand_in(bin_dir: Path, name: str, body: str) -> None:
    """A stand-in Slurm tool (python), replaying what the real one printed."""
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport sys, time\nDATA = {str(DATA)!r}\n{body}")
    path.chmod(0o755)


REPLAY_SQUEUE = f"""
fmt = sys.argv[sys.argv.index("-o") + 1]
mark = fmt[: fmt.index("%A")]
assert sys.argv[sys.argv.index("-w") + 1] == "gpuhost1"
sys.stdout.write(open(DATA + "/squeue_node.txt").read().replace({MARK!r}, mark))
"""
REPLAY_SCONTROL = """
files = {"9": "job_train_running.txt", "10": "job_forged_name_running.txt"}
if sys.argv[1:3] == ["show", "node"]:
    sys.stdout.write(open(DATA + "/node_drain.txt").read())
elif sys.argv[1:5] == ["show", "job", "-o", "-d"] and sys.argv[5] in files:
    sys.stdout.write(open(DATA + "/" + files[sys.argv[5]]).read())
else:
    sys.stderr.write("slurm_load_jobs error: Invalid job id specified\\n")
    sys.exit(1)
"""


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the reader finds its tools: no PATH at all (an Epilog's), only this."""
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.delenv("PATH", raising=False)
    monkeypatch.setattr(slurm, "SLURM_BIN_DIRS", (str(d),))
    return d


def test_the_reader_replays_a_nodes_jobs_with_no_path(bin_dir: Path) -> None:
    stand_in(bin_dir, "squeue", REPLAY_SQUEUE)
    stand_in(bin_dir, "scontrol", REPLAY_SCONTROL)
    got = slurm.read_jobs("gpuhost1")
    assert got["error"] is None and got["node"] == "gpuhost1"
    jobs = {j["job_id"]: j for j in got["jobs"]}
    assert sorted(jobs) == [1, 2, 5, 6, 7, 8, 9, 10]
    assert (jobs[9]["gpus"], jobs[10]["gpus"], jobs[1]["gpus"]) == ([0, 1], [2], None)
    assert jobs[10]["name"] == FORGED and jobs[10]["user"] == "alice"
    node = slurm.read_node("gpuhost1")
    assert node["error"] is None and node["node"]["reason_user"] == "root"


def test_a_missing_tool_is_an_error_value(bin_dir: Path) -> None:
    got = slurm.read_jobs("gpuhost1")
    assert got["jobs"] == [] and "squeue not found" in got["error"]
    node = slurm.read_node("gpuhost1")
    assert node["node"] is None and "scontrol not found" in node["error"]


def test_a_controller_that_does_not_answer_costs_the_timeout_only(bin_dir: Path) -> None:
    stand_in(bin_dir, "squeue", "time.sleep(30)\n")
    stand_in(bin_dir, "scontrol", "time.sleep(30)\n")
    t0 = time.monotonic()
    got = slurm.read_jobs("gpuhost1", timeout_s=0.5)
    node = slurm.read_node("gpuhost1", timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    assert got == {"node": "gpuhost1", "jobs": [], "error": "squeue: no answer in 0.5s"}
    assert node == {"node": None, "error": "scontrol show node: no answer in 0.5s"}


def test_a_controller_that_refuses_says_why(bin_dir: Path) -> None:
    said = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
    stand_in(bin_dir, "squeue", f"sys.stderr.write({said!r} + '\\n')\nsys.exit(1)\n")
    got = slurm.read_jobs("gpuhost1")
    assert got["jobs"] == [] and got["error"] == f"squeue: {said}"


def test_a_job_scontrol_no_longer_knows_is_kept_without_gpus(bin_dir: Path) -> None:
    stand_in(bin_dir, "squeue", REPLAY_SQUEUE)
    stand_in(bin_dir, "scontrol", "sys.stderr.write('slurm_load_jobs error: Invalid job id "
                                  "specified\\n')\nsys.exit(1)\n")
    got = slurm.read_jobs("gpuhost1")
    assert got["error"] is None
    assert {j["job_id"]: j["gpus"] for j in got["jobs"]}[9] is None


def test_path_entries_that_mean_the_working_directory_are_never_searched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path, "scontrol", "")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurm, "SLURM_BIN_DIRS", ())
    assert slurm.find_tool("scontrol", {"PATH": ":.:bin"}) is None
    assert slurm.find_tool("scontrol", {"PATH": str(tmp_path)}) == str(tmp_path / "scontrol")


def test_the_local_node_is_slurmds_name_else_the_short_host_name() -> None:
    assert slurm.local_node({"SLURMD_NODENAME": "gpu07"}) == "gpu07"
    assert "." not in slurm.local_node({})


# --------------------------------------------------------------------------- a Slurm node?
FAILING_SQUEUE = ("sys.stderr.write('squeue: error: resolve_ctls_from_dns_srv: res_nsearch "
                  "error: Unknown host\\n')\nsys.exit(1)\n")


def fake_comm(proc: Path, pid: int, comm: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "comm").write_text(comm + "\n")


def test_squeue_alone_is_not_a_slurm_node(bin_dir: Path, tmp_path: Path) -> None:
    """A host with Slurm's client installed and never configured (seen on CI: squeue
    failing on DNS SRV) says nothing; with a slurmd running, or a process in a job's
    cgroup, the same failure is this host's error."""
    from gpudash.collector.host.claims import SlurmJobs

    stand_in(bin_dir, "squeue", FAILING_SQUEUE)
    proc = tmp_path / "proc"
    fake_comm(proc, 1, "systemd")
    fake_comm(proc, 200, "slurmdbd")
    now = [0.0]
    jobs = SlurmJobs(clock=lambda: now[0], proc=str(proc))
    assert jobs.read(set(), force=True) == ({}, [])
    section, errors = jobs.read({"42"}, force=True)  # a process names job 42
    assert errors and "Unknown host" in errors[0] and "Unknown host" in section[""]["error"]

    fake_comm(proc, 300, "slurmd")
    assert jobs.read(set(), force=True) == ({}, [])  # looked for again only after RETRY_S
    now[0] += 31
    section, errors = jobs.read(set(), force=True)
    assert errors and section[""]["error"].startswith("squeue: ")
