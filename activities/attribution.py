"""Attribute stage: the rules engine over the evidence bundle, plus the optional external service."""

from __future__ import annotations

from temporalio import activity

from revive.models import Action, Attribution, Category, Domain, EvidenceBundle, TriggerKind


def fallback_attribution(bundle: EvidenceBundle, why: str) -> Attribution:
    """A recorded 'unknown' when the engine itself fails: never a drain, never a crash."""
    cat = Category.hang if bundle.trigger and bundle.trigger.kind == TriggerKind.no_progress else Category.crash
    return Attribution(category=cat, domain=Domain.unknown, action=Action.restart_in_place, confidence=0.1,
                       explanation=f"attribution failed ({why}); unknown cause, restart in place")


class AttributionActivities:
    """Wraps ``revive.attribution.engine.attribute`` (pure) and the optional external service."""

    def __init__(self, external: object | None = None) -> None:
        self.external = external

    @activity.defn(name="attribute")
    async def attribute(self, bundle: EvidenceBundle) -> Attribution:
        from revive.attribution.engine import attribute

        try:
            a = attribute(bundle)
        except Exception as e:  # the engine must never take an incident down
            activity.logger.exception("attribution engine failed")
            return fallback_attribution(bundle, f"{type(e).__name__}: {e}")
        if bundle.notes and a.category == Category.none and bundle.trigger is not None:
            # something triggered but the evidence could not be read: say unknown, not healthy
            return fallback_attribution(bundle, "; ".join(bundle.notes))
        return a

    @activity.defn(name="attribute_external")
    async def attribute_external(self, bundle: EvidenceBundle) -> Attribution | None:
        """The external service's verdict, or None when none is configured or it did not answer."""
        if self.external is None:
            return None
        return await self.external.attribute(bundle)  # type: ignore[attr-defined]
