"""Parsing of recorded ``scontrol show job|node -o`` output (Slurm 22.05.8) and error mapping."""

from pathlib import Path

import pytest

from revive.errors import JobNotFound, SchedulerCommandError, SchedulerUnavailable
from revive.scheduler.slurm_cli import SlurmCLI, parse_job_line, parse_kv_line, parse_node_line

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm"


def _line(name: str) -> str:
    return (DATA / name).read_text().splitlines()[0]


def test_running_job():
    j = parse_job_line(_line("show_job_running.txt"))
    assert j.job_id == "1"
    assert j.name == "rec"
    assert j.user == "root"
    assert j.state == "RUNNING"
    assert j.reason is None
    assert j.exit_code == "0:0"
    assert j.nodes == ["node1", "node2"]
    assert j.partition == "debug"
    assert j.restart_count == 0
    assert j.submit_time is not None and j.submit_time.tzinfo is not None
    assert j.start_time is not None
    assert j.std_out == "/tmp/revive-cluster/jobs/rec-1.out"
    assert j.std_err == "/tmp/revive-cluster/jobs/rec-1.out"
    assert j.work_dir == "/work/main"
    assert j.comment == '{"revive": {"policy": "default"}}'  # value with spaces
    assert j.requeue is True
    assert j.exc_nodes == []
    assert j.batch_host == "node1"
    assert j.time_limit == "365-00:00:00"
    assert j.elapsed == "00:00:01"
    assert j.num_nodes == 2 and j.num_tasks == 2
    assert j.tres_per_node == "gres:gpu:1"
    assert j.hold is False


def test_held_job_with_exclusion():
    j = parse_job_line(_line("show_job_held.txt"))
    assert j.state == "PENDING"
    assert j.reason == "job_requeued_in_held_state"
    assert j.hold is True
    assert j.restart_count == 1
    assert j.nodes == []
    assert j.exc_nodes == ["node2"]


def test_requeued_running_job():
    j = parse_job_line(_line("show_job_requeued_running.txt"))
    assert j.state == "RUNNING" and j.hold is False
    assert j.restart_count == 1
    assert j.nodes == ["node3", "node4"]
    assert j.exc_nodes == ["node2"]


def test_failed_and_cancelled_jobs():
    f = parse_job_line(_line("show_job_failed.txt"))
    assert (f.state, f.reason, f.exit_code, f.requeue, f.tres_per_node) == (
        "FAILED", "NonZeroExitCode", "3:0", False, None)
    c = parse_job_line(_line("show_job_cancelled.txt"))
    assert c.state == "CANCELLED"


def test_end_time_is_read_and_trusted_only_once_the_job_ended():
    f = parse_job_line(_line("show_job_failed.txt"))
    assert f.ended_at is not None and f.ended_at == f.start_time  # EndTime=2026-11-29T16:23:14
    r = parse_job_line(_line("show_job_running.txt"))
    assert r.end_time is not None and r.end_time.year == 2027  # the expected end: start + TimeLimit
    assert r.ended_at is None


def test_nodes():
    nodes = [parse_node_line(l) for l in (DATA / "show_node_all.txt").read_text().splitlines()]
    assert [n.name for n in nodes] == ["node1", "node2", "node3", "node4"]
    n2 = nodes[1]
    assert n2.state == "MIXED+DRAIN" and n2.drained
    assert n2.reason == "revive:abc gpu_hardware"  # [root@time] suffix stripped
    assert n2.partitions == ["debug"]
    assert nodes[2].state == "IDLE" and not nodes[2].drained and nodes[2].reason is None


def test_kv_values_with_spaces_and_equals():
    kv = parse_kv_line("JobId=7 JobName=x Comment=a=b c  StdErr=/e OS=Linux 6.1 #1 SMP")
    assert kv["Comment"] == "a=b c" and kv["StdErr"] == "/e" and kv["OS"] == "Linux 6.1 #1 SMP"


class ScriptedRunner:
    def __init__(self, rc, out="", err=""):
        self.result = (rc, out, err)
        self.argvs = []

    async def run(self, argv, input=None, timeout_s=30.0, env=None):
        self.argvs.append(list(argv))
        return self.result


async def test_dead_controller_is_unavailable():
    r = ScriptedRunner(1, err="slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    cli = SlurmCLI(r, "c1")
    with pytest.raises(SchedulerUnavailable, match="not reachable"):
        await cli.get_job("5")
    assert await cli.ping() is False


async def test_invalid_job_is_not_found():
    cli = SlurmCLI(ScriptedRunner(1, err="slurm_load_jobs error: Invalid job id specified\n"), "c1")
    with pytest.raises(JobNotFound):
        await cli.get_job("999")
    cli = SlurmCLI(ScriptedRunner(1, err="Invalid job id specified for job 999\n"), "c1")
    with pytest.raises(JobNotFound):
        await cli.requeue("999")


async def test_refusal_is_command_error():
    cli = SlurmCLI(ScriptedRunner(1, err="Requested operation is presently disabled for job 2\n"), "c1")
    with pytest.raises(SchedulerCommandError) as e:
        await cli.requeue("2")
    assert e.value.argv == ["scontrol", "requeue", "2"] and e.value.rc == 1


async def test_action_argv():
    r = ScriptedRunner(0, out="42\n")
    cli = SlurmCLI(r, "c1")
    assert await cli.drain_nodes(["node2", "node3"], "revive:i-1 gpu_hardware") == [
        "scontrol", "update", "NodeName=node[2-3]", "State=DRAIN", "Reason=revive:i-1 gpu_hardware"]
    assert await cli.requeue("5", hold=True) == ["scontrol", "requeuehold", "5"]
    assert await cli.update_job("5", ExcNodeList="node2") == [
        "scontrol", "update", "JobId=5", "ExcNodeList=node2"]
    assert await cli.release("5") == ["scontrol", "release", "5"]
    assert await cli.cancel("5", signal="USR1") == ["scancel", "--signal=USR1", "5"]
    assert await cli.submit("#!/bin/bash\n", ["--nodes=2"]) == "42"
    assert r.argvs[-1] == ["sbatch", "--parsable", "--nodes=2"]
