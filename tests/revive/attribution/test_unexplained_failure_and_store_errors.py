"""Rule 3ax (a job the scheduler reports FAILED, with nothing in the evidence to explain it) and the
c10d store/rendezvous signature (catalog 2026.12.9), as incidents reach Revive.

A Neuron runtime module prints errors the catalog has never seen; the job ends FAILED with exit code 1.
The verdict is an unexplained crash (unknown domain, restart in place, low confidence), never "healthy".
The same log with a COMPLETED record stays healthy. (A Slurm prolog failure that revokes the allocation
was this test's other example until catalog 2026.12.25 gave it an entry, ``slurm.prolog_failed``: it is
now explained, as a node failure.) A TCPStore/rendezvous connect timeout is the job's own key-value store
over TCP, not an NCCL failure: a crash of unknown cause."""

from __future__ import annotations

from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord

PROLOG_REVOKED = """\
salloc: Granted job allocation 235454
salloc: Waiting for resource configuration
salloc: Prolog failure on node gpu-node-006
salloc: Job allocation 235454 has been revoked.
"""

UNKNOWN_LIBRARY_ERRORS = """\
step 1200 | loss 2.314 | 3.1 s/it
2024-Nov-09 16:14:06.614656 66954:67406 ERROR  TDRV:build_enc_source_target_pairs           Failed to parse src_target_pairs on ENC
2024-Nov-09 16:14:06.662122 66954:67406 ERROR  TDRV:ib_create_one_block                     failed to translate instructions
"""
"""Neuron runtime driver (TDRV) lines (aws-neuron/aws-neuron-sdk#1030), a module the catalog has no
entry for (its collectives module, ENC, is ``neuron.collectives_error`` since catalog 2026.12.14)."""


def job(state: str, exit_code: str | None) -> JobRecord:
    return JobRecord(job_id="235454", nodes=["gpu-node-006"], state=state, exit_code=exit_code)


def test_a_failed_job_nothing_explains_is_an_unexplained_crash_not_healthy():
    a = attribute(EvidenceBundle(job_log=UNKNOWN_LIBRARY_ERRORS, job=job("FAILED", "1:0")))
    assert (a.category.value, a.domain.value, a.action.value) == ("crash", "unknown", "restart_in_place"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "slurm.state_failed"
    assert "exit_code=1:0" in a.root_event.text
    assert a.confidence < 0.5  # nothing to go on: below the policy floor, never a drain
    assert a.culprit_nodes == []


def test_a_revoked_allocation_after_a_prolog_failure_is_explained_now_not_unexplained():
    a = attribute(EvidenceBundle(job_log=PROLOG_REVOKED, job=job("FAILED", "1:0")))
    assert a.root_event is not None and a.root_event.signature_id == "slurm.prolog_failed"
    assert (a.category.value, a.domain.value) == ("node_failure", "system")


def test_the_same_log_with_a_clean_exit_stays_healthy():
    for state, code in (("COMPLETED", "0:0"), ("RUNNING", None), ("FAILED", "0:0"), ("FAILED", None)):
        a = attribute(EvidenceBundle(job_log=UNKNOWN_LIBRARY_ERRORS, job=job(state, code)))
        assert a.category.value == "none", (state, code, a.explanation)


def test_a_known_failure_keeps_its_own_verdict_under_a_failed_record():
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB\n"
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0")))
    assert a.category.value == "oom_gpu", a.explanation
    assert a.root_event is not None and a.root_event.signature_id != "slurm.state_failed"


def test_a_rendezvous_store_timeout_is_a_crash_not_an_nccl_error():
    text = ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d "
            "store has failed. See inner exception for details.\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0")))
    assert (a.category.value, a.domain.value) == ("crash", "unknown"), a.explanation
    assert a.root_event is not None and a.root_event.signature_id == "c10d.store_error"


def test_an_nccl_backend_error_stays_an_nccl_error():
    text = ("torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId "
            "from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer\n")
    a = attribute(EvidenceBundle(job_log=text, job=job("FAILED", "1:0")))
    assert a.category.value == "nccl_error", a.explanation
