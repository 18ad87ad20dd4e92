"""The verdict does not depend on how the log was collected.

Incidents as they reach Revive from sites it was not written on: the same job's log read from a
Kubernetes node's container log (CRI lines), from ``kubectl logs --timestamps``, through Docker
Compose, from ``mpiexec -prepend-rank`` (MPICH/Intel MPI), from ``srun -l`` over torchrun's
``[rankN]:``, with a collector's ``[timestamp]`` in front, or indented. Every shared case and every
``dev`` corpus case is re-read under each wrapper and must keep its category, domain, culprit nodes
and action (the ``test`` set is never read case by case). Before these prefixes were part of the log
protocol, 15-17 of the 137 cases changed verdict under each of the first four wrappers and 2 under
the rest (a JAX barrier's task list and NCCL's interface list are continuation lines, read raw).
A wrapper that names a rank leaves a line that already names one as it is: no launcher labels a line
twice, and two rank labels on one line would be two different claims about who printed it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from revive.attribution.cases import load_case
from revive.attribution.engine import attribute
from revive.models import EvidenceBundle, JobRecord
from revive.signatures.matcher import split_prefix

ROOT = Path(__file__).resolve().parents[3]
SPLIT = yaml.safe_load((ROOT / "tests/data/corpus/split.yaml").read_text(encoding="utf-8"))
CASES = sorted(d for d in (ROOT / "tests/data/cases").iterdir() if (d / "expected.yaml").is_file())
CASES += [ROOT / "tests/data/corpus/pool" / n for n, s in sorted(SPLIT.items()) if s == "dev"]


def _ts(i: int, sep: str = "T", frac: str = ".123456789Z") -> str:
    t = 43200 + i // 20  # 20 lines a second, increasing
    return f"2024-05-01{sep}{t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}{frac}"


WRAPPERS = {
    "cri": lambda i, x: f"{_ts(i)} stderr F {x}",
    "kubectl_timestamps": lambda i, x: f"{_ts(i)} {x}",
    "compose": lambda i, x: f"trainer-1  | {x}",
    "prepend_rank": lambda i, x: f"[3] {x}",
    "srun_l_over_torchrun": lambda i, x: f"3: [rank3]: {x}",
    "collector_bracket_ts": lambda i, x: f"[{_ts(i, ' ', '')}] 0: {x}",
    "indented": lambda i, x: f"    {x}",
}
RANKED = {"prepend_rank", "srun_l_over_torchrun", "collector_bracket_ts"}
"""The wrappers that put a rank label in front of the line."""


def _key(bundle: EvidenceBundle) -> tuple:
    a = attribute(bundle)
    return a.category, a.domain, tuple(sorted(a.culprit_nodes)), a.action


@pytest.fixture(scope="module")
def baseline() -> dict[str, tuple[EvidenceBundle, tuple]]:
    out = {}
    for case in CASES:
        bundle = load_case(case)
        out[case.name] = (bundle, _key(bundle))
    return out


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_every_case_keeps_its_verdict_when_its_log_arrives_under_a_launcher_or_collector_prefix(wrapper, baseline):
    wrap = WRAPPERS[wrapper]
    changed = []
    for name, (bundle, before) in baseline.items():
        text = "\n".join(wrap(i, x) if x and not (wrapper in RANKED and split_prefix(x)[1].rank is not None) else x
                         for i, x in enumerate(bundle.job_log.split("\n")))
        after = _key(bundle.model_copy(update={"job_log": text}))
        if wrapper in RANKED and after[:2] + after[3:] == before[:2] + before[3:]:
            # a rank label is information: srun's "0: " is task 0, which the job's layout places on its
            # first node, so a node-local fault may gain that node - never lose one, never leave the job
            job_nodes = set(bundle.job.nodes) if bundle.job else set()
            if set(before[2]) <= set(after[2]) and set(after[2]) - set(before[2]) <= job_nodes:
                continue
        if after != before:
            changed.append(f"{name}: {before} -> {after}")
    assert not changed, f"{len(changed)} of {len(baseline)} verdicts changed:\n" + "\n".join(changed[:10])


@pytest.mark.parametrize(("line", "body", "rank", "ts"), [
    ("2024-05-01T12:00:00.123456789Z stderr F ValueError: bad", "ValueError: bad", None, "2024-05-01T12:00:00.123456789Z"),
    ("2024-05-01T12:00:00+02:00 stdout P [rank2]: step 5", "step 5", 2, "2024-05-01T12:00:00+02:00"),
    ("trainer-1  | [rank1]: KeyError: 'x'", "KeyError: 'x'", 1, None),
    ("[7] Traceback (most recent call last):", "Traceback (most recent call last):", 7, None),
    ("\t  TypeError: unsupported operand", "TypeError: unsupported operand", None, None),
])
def test_collection_prefixes_are_stripped_and_what_they_say_is_kept(line, body, rank, ts):
    got, meta = split_prefix(line)
    assert (got, meta.rank, meta.ts) == (body, rank, ts)


def test_a_bracketed_word_or_a_table_row_is_not_taken_for_a_prefix():
    assert split_prefix("[rank] is not a number")[0] == "[rank] is not a number"
    assert split_prefix("[0]bond0:192.168.1.161<0>")[0] == "[0]bond0:192.168.1.161<0>"
    assert split_prefix("0 | model | GPT | 124 M")[0] == "0 | model | GPT | 124 M"


def test_torchrun_summary_under_a_cri_prefix_still_ties_the_failed_rank_to_its_host():
    job = JobRecord(job_id="9", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED")
    summary = [
        "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-05-01_12:00:05",
        "  host      : gpu-node-002",
        "  rank      : 5 (local_rank: 1)",
        "  exitcode  : 1 (pid: 4242)",
    ]
    plain = attribute(EvidenceBundle(job_log="\n".join(summary), job=job))
    cri = attribute(EvidenceBundle(job_log="\n".join(f"{_ts(i)} stderr F {x}" for i, x in enumerate(summary)), job=job))
    assert (cri.category, cri.culprit_ranks, cri.culprit_nodes) == (plain.category, plain.culprit_ranks, plain.culprit_nodes)


# ---- the rank -> node layout when the log prints none: the Slurm record's NumTasks / TresPerNode
ECC_ON_RANK_13 = (" iteration 100/1000 | elapsed time per iteration (ms): 500.1 |\n"
                  "[rank13]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")


@pytest.mark.parametrize(("num_tasks", "tres", "culprits"), [
    (16, None, ["gpu-node-002"]),              # srun started one task per rank: 8 per node
    (2, "gres:gpu:8", ["gpu-node-002"]),       # one torchrun per node, 8 GPUs each (scontrol TresPerNode)
    (2, "gres/gpu:h100:8", ["gpu-node-002"]),  # slurmrestd tres_per_node with a GPU type
    (2, None, []),                             # one task per node and no GPU count: the record does not say
    (None, None, []),
    (12, None, []),                            # 6 per node: rank 13 is outside the layout (0-11), no node
])
def test_a_rank_on_a_bad_gpu_names_its_node_from_the_slurm_record(num_tasks, tres, culprits):
    job = JobRecord(job_id="1", nodes=["gpu-node-001", "gpu-node-002"], state="FAILED", num_tasks=num_tasks,
                    tres_per_node=tres)
    a = attribute(EvidenceBundle(job_log=ECC_ON_RANK_13, job=job))
    assert a.category.value == "gpu_memory_ecc", a.explanation
    assert a.culprit_nodes == culprits
