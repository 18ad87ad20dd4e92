"""The chaos suite's short count inside ``make test``: one run of each cheap fault point
(``harness.CHEAP``) with the same assertions as ``make chaos`` (benchmarks/chaos.py): exactly one
drain and one requeue (recording scontrol shim), the job running again past its checkpoint, the
incident closed ``recovered`` with an audit record. Fails (never skips) when the testbed is missing."""

from __future__ import annotations

import pytest

from tests.chaos.harness import CHEAP, run_case, services_up

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.temporal]


@pytest.fixture(scope="module")
def testbed() -> None:
    try:
        services_up()
    except RuntimeError as e:
        pytest.fail(f"chaos testbed not up: {e}")


@pytest.mark.parametrize("point", CHEAP)
async def test_one_fault_at_an_exact_point_is_recovered_once(testbed: None, point: str) -> None:
    out = await run_case(point)
    assert out.ok, "\n".join(out.why)
    assert (out.drains, out.requeues) == (1, 1) and not out.duplicate and out.lost == 0
