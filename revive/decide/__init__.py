"""Decide stage: attribution + policy + history → a plan, and whether it may run without a person.

Pure functions (no I/O, no wall clock, no randomness), called inside workflow code:

- ``revive.decide.plan``: ``plan_for`` — which runbook, which nodes, which rule;
- ``revive.decide.budgets``: retry budgets (``stop_rule``), repeat offenders, exclusion limits,
  drain ownership — the policy's limits on what Revive may do to one job or node;
- ``revive.decide.breaker``: the drain circuit breaker (``evaluate_drain``), the state of the
  per-cluster guard workflow (``workflows.guard``);
- ``revive.decide.approval``: whether a plan needs a person, and whether a decision is acceptable.

Names: the *guard* is the per-cluster workflow only; the policy's limits are *budgets*; the
fail-open release of Revive's holds is the *hold release* (``revive.failopen``).
"""
