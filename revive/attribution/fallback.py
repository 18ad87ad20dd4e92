"""The one fallback verdict when attribution cannot run: a recorded ``unknown``, never a drain.

Used by the attribute activity when the engine raises (a bug) or when the evidence could not be
read at all (the bundle's notes say why, and the engine would otherwise call it healthy). The
plan that follows is a requeue in place (the job already failed or hung; a requeue from the last
checkpoint is the least invasive recovery), and the retry budgets stop a repeat.
"""

from __future__ import annotations

from revive.models import Action, Attribution, Category, Domain, EvidenceBundle, TriggerKind

FALLBACK_CONFIDENCE = 0.1


def unknown_attribution(bundle: EvidenceBundle, why: str) -> Attribution:
    """Category from the trigger (``hang`` for no progress, else ``crash``), domain ``unknown``,
    action ``restart_in_place``, confidence 0.1, and ``why`` in the explanation (capped)."""
    cat = Category.hang if bundle.trigger and bundle.trigger.kind == TriggerKind.no_progress else Category.crash
    return Attribution(category=cat, domain=Domain.unknown, action=Action.restart_in_place,
                       confidence=FALLBACK_CONFIDENCE, engine="revive-fallback",
                       explanation=f"attribution failed ({why[:500]}); unknown cause, restart in place")
