"""Round-28 incidents (catalog 2026.12.22): the cluster layer ends a training job.

- Open MPI's launcher reports a rank the kernel (or the kubelet) killed as ``mpirun noticed that
  process rank 1 ... exited on signal 9 (Killed)``: a crash, not a healthy run; without an
  oom-kill line it is not yet an OOM.
- The kubelet refusing a pod whose GPU its device plugin no longer offers
  (``UnexpectedAdmissionError: Pod Allocate failed due to requested number of devices unavailable
  for nvidia.com/gpu``) is the node's state: place the job elsewhere."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

MPIJOB_RANK_KILLED = """\
[1,0]<stdout>:Running benchmark...
[1,0]<stdout>:Iter #0: 212.4 img/sec per GPU
[1,0]<stdout>:Iter #1: 214.0 img/sec per GPU
-------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
-------------------------------------------------------
--------------------------------------------------------------------------
mpirun.real noticed that process rank 1 with PID 39 on node mpi-test-2-mpijob-worker-1 exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""


def test_an_mpi_rank_killed_by_signal_9_is_a_crash_not_a_healthy_run():
    a = attribute(EvidenceBundle(job_log=MPIJOB_RANK_KILLED))
    assert a.category.value == "crash", a.explanation  # before catalog 2026.12.22: no incident
    assert a.root_event is not None and a.root_event.signature_id == "host.killed"
    assert (a.domain.value, a.action.value) == ("unknown", "restart_in_place")


ADMISSION_REFUSED = """\
$ kubectl describe node gpu-node-004 | grep -A1 -E 'Capacity|Allocatable' | grep -E 'Capacity|Allocatable|nvidia'
Capacity:
  nvidia.com/gpu:     4
Allocatable:
  nvidia.com/gpu:     3
$ kubectl describe pod train-worker-0 | grep -E '^(Name|Node|Status|Reason|Message):'
Name:           train-worker-0
Node:           gpu-node-004/10.0.0.14
Status:         Failed
Reason:         UnexpectedAdmissionError
Message:        Pod Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected
"""


def test_a_pod_the_kubelet_cannot_give_its_gpu_is_the_nodes_state_and_the_job_goes_elsewhere():
    job = JobRecord(job_id="1782", nodes=["gpu-node-004"], state="FAILED", exit_code="0:0")
    a = attribute(EvidenceBundle(job_log=ADMISSION_REFUSED, job=job))
    assert (a.category.value, a.domain.value) == ("node_failure", "system"), a.explanation
    assert a.action.value == "requeue_exclude_nodes"
    assert a.culprit_nodes == ["gpu-node-004"]

