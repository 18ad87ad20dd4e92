"""Revive's custom Temporal search attributes, defined once.

Every incident workflow upserts these so operators (and Revive itself, for the job history used by
the retry budgets) can find incidents through visibility, e.g.
``WorkflowType='IncidentWorkflow' AND ReviveCluster='h200-a' AND ReviveJobId='1234'``.

Register them before starting workers:

- dev server: ``temporal server start-dev --search-attribute ReviveCluster=Keyword …`` or
  ``WorkflowEnvironment.start_local(search_attributes=ALL)``;
- a running server: ``temporal operator search-attribute create --name ReviveCluster --type Keyword``;
- Java time-skipping test server: ``operator_service.add_search_attributes`` (see
  ``tests/fixtures_temporal.py``).

Values are stored unencrypted in visibility: IDs and names only, never secrets.

``TYPES`` gives each key's ``temporal --search-attribute NAME=TYPE`` type; ``scripts/temporal-up.sh``
keeps the same list (``tests/ops`` checks they agree).
"""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

CLUSTER = SearchAttributeKey.for_keyword("ReviveCluster")
"""Cluster name from the cluster config (``h200-a``)."""
JOB_ID = SearchAttributeKey.for_keyword("ReviveJobId")
"""Slurm job id the incident is about (string)."""
CATEGORY = SearchAttributeKey.for_keyword("ReviveCategory")
"""``revive.models.Category`` value of the attribution."""
STATE = SearchAttributeKey.for_keyword("ReviveState")
"""Incident stage (``gathering``, ``awaiting_approval``, …) and finally the outcome."""
MODE = SearchAttributeKey.for_keyword("ReviveMode")
"""``observe`` or ``auto`` as read at the last gate."""
NODES = SearchAttributeKey.for_keyword_list("ReviveNodes")
"""Culprit nodes (KeywordList): ``ReviveNodes IN ('node1','node2')`` finds repeat offenders."""
INCIDENT_ID = SearchAttributeKey.for_keyword("ReviveIncidentId")
"""Revive's incident id (also in the workflow id)."""
CULPRITS = SearchAttributeKey.for_keyword_list("ReviveCulprits")
"""Nodes the attribution blames (KeywordList), upserted after attribution when there are any:
``ReviveCulprits IN ('node2')`` (``ReviveNodes`` holds the job's nodes at detection)."""

ALL: list[SearchAttributeKey] = [CLUSTER, JOB_ID, CATEGORY, STATE, MODE, NODES, INCIDENT_ID, CULPRITS]
"""Every key, for registration (``start_local(search_attributes=ALL)``)."""


def cli_type(key: SearchAttributeKey) -> str:
    """The ``temporal server start-dev --search-attribute NAME=TYPE`` type of ``key``."""
    return {"KEYWORD_LIST": "KeywordList", "KEYWORD": "Keyword", "TEXT": "Text", "INT": "Int",
            "DOUBLE": "Double", "BOOL": "Bool", "DATETIME": "Datetime"}[key.indexed_value_type.name]


TYPES: dict[str, str] = {k.name: cli_type(k) for k in ALL}
"""Name → CLI type, for every key in ``ALL``."""
