"""Close stage: one JSONL audit record per incident, appended to the configured audit file."""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from activities.blocking import run_blocking
from revive import metrics as rm
from revive.appendfile import append_line
from revive.models import AuditRecord


class AuditActivities:
    def __init__(self, audit_file: Path) -> None:
        self.audit_file = audit_file

    @activity.defn(name="append_audit")
    async def append_audit(self, rec: AuditRecord) -> str:
        """Append ``rec`` as one JSON line (O_APPEND + fsync, in a thread). Idempotent per
        incident: a retried activity does not write a second record. Returns the file path."""
        return await run_blocking(self._append, rec)

    def _append(self, rec: AuditRecord) -> str:
        self.audit_file.parent.mkdir(parents=True, exist_ok=True)
        key = f'"incident_id":"{rec.incident_id}"'
        if self.audit_file.exists():
            with self.audit_file.open("rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 4 * 1024 * 1024))
                if key.encode() in f.read():
                    return str(self.audit_file)
        append_line(self.audit_file, rec.model_dump_json() + "\n")
        rm.observe_incident_closed(rec.result, rec.mode)  # after the fsync: counted once it is durable
        return str(self.audit_file)
