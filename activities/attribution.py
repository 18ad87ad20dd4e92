"""Attribute stage: the rules engine over the evidence bundle, plus the optional external service.

The engine is CPU-bound (seconds on a large bundle), so it runs in a thread while this coroutine
heartbeats: the worker's event loop keeps sending heartbeats and running other activities.
"""

from __future__ import annotations

from temporalio import activity

from activities.blocking import run_blocking
from revive.attribution.engine import attribute
from revive.attribution.external import ExternalAttributionClient
from revive.attribution.fallback import unknown_attribution
from revive.attribution.verdict import UNEXPLAINED_FAILURE
from revive.models import Attribution, Category, EvidenceBundle


class AttributionActivities:
    """Wraps ``revive.attribution.engine.attribute`` (pure) and the optional external service."""

    def __init__(self, external: ExternalAttributionClient | None = None) -> None:
        self.external = external

    @activity.defn(name="attribute")
    async def attribute(self, bundle: EvidenceBundle) -> Attribution:
        try:
            a = await run_blocking(attribute, bundle)
        except Exception as e:  # the engine must never take an incident down
            activity.logger.exception("attribution engine failed")
            return unknown_attribution(bundle, f"{type(e).__name__}: {e}")
        unexplained = a.category == Category.none or (a.root_event is not None
                                                      and a.root_event.signature_id == UNEXPLAINED_FAILURE)
        if bundle.notes and unexplained and bundle.trigger is not None:
            # something triggered but the evidence could not be read (the engine found nothing, or only
            # the scheduler's FAILED): the recorded fallback says why, not "healthy" or a guess
            return unknown_attribution(bundle, "; ".join(bundle.notes))
        return a

    @activity.defn(name="attribute_external")
    async def attribute_external(self, bundle: EvidenceBundle) -> Attribution | None:
        """The external service's verdict, or None when none is configured or it did not answer."""
        if self.external is None:
            return None
        return await self.external.attribute(bundle)
