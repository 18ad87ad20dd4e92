"""Incident identity and opt-in (pure parts of the monitor)."""

from __future__ import annotations

from datetime import UTC, datetime

from revive.config import ClusterConfig
from revive.ids import incident_id
from revive.models import JobRecord
from revive.policy import RecoveryPolicy
from worker.monitor import opted_in

CFG = ClusterConfig(name="c", audit_file="/tmp/a", state_dir="/tmp/s")


def test_incident_id_has_cluster_job_first_submit_attempt_and_family():
    t = datetime(2026, 11, 29, 15, 4, 5, tzinfo=UTC)
    assert incident_id("local", "1", t, 2, "gpu") == "local-1-20261129T150405-a2-gpu"
    # job ids restart at 1 on a fresh cluster: the submit time keeps a second demo apart
    assert incident_id("local", "1", t, 0, "gpu") != incident_id("local", "1", t.replace(minute=9), 0, "gpu")


def test_opt_in_by_partition_or_comment_json():
    pol = RecoveryPolicy(opt_in={"partitions": ["gpu"]})
    assert opted_in(JobRecord(job_id="1", partition="gpu"), CFG, pol)
    assert not opted_in(JobRecord(job_id="1", partition="debug"), CFG, pol)
    assert opted_in(JobRecord(job_id="1", partition="debug", comment='{"revive": {"policy": "default"}}'), CFG, pol)
    assert not opted_in(JobRecord(job_id="1", comment="{not json"), CFG, pol)
    assert not opted_in(JobRecord(job_id="1", comment='{"other": 1}'), CFG, pol)
