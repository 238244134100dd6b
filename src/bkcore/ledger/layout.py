"""Where ledger metadata, bookie registrations and the id generator live in the metastore tree.

Same paths as BookKeeper under a root (default /ledgers):
  <root>/available/<bookie>            ephemeral registration of a writable bookie
  <root>/available/readonly/<bookie>   ephemeral registration of a readonly bookie
  <root>/idgen/ID-<seq>                sequential nodes that hand out ledger ids
  <root>/cookies/<bookie>              the registered copy of a bookie's cookie
  <root>/INSTANCEID                    the cluster's instance id (a UUID, text)
  <root>/underreplication/ledgers/urL%010d   a ledger with fragments on lost bookies
  <root>/underreplication/locks/urL%010d     ephemeral: a worker is re-replicating it
  <root>/underreplication/auditor            ephemeral: the elected auditor
  <root>/underreplication/disable            present: ledger replication is switched off
  <root>/underreplication/lostBookieRecoveryDelay   the cluster's delay, seconds (text)
  <root>/underreplication/auditRequest       rewritten to ask the auditor for an audit now
  flat layout:          <root>/L%010d
  hierarchical layout:  <root>/00/0000/L0001   (id as 10 digits split 2/4/4)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LedgerLayout:
    root: str = "/ledgers"
    is_hierarchical: bool = False

    @property
    def available_path(self) -> str:
        return f"{self.root}/available"

    @property
    def readonly_path(self) -> str:
        return f"{self.root}/available/readonly"

    @property
    def idgen_prefix(self) -> str:
        return f"{self.root}/idgen/ID-"

    @property
    def cookies_path(self) -> str:
        """Where every bookie that ever joined the cluster left its cookie."""
        return f"{self.root}/cookies"

    def cookie_path(self, bookie_id: str) -> str:
        """The metastore copy of a bookie's cookie (BookKeeper's <root>/cookies/<bookie>)."""
        return f"{self.cookies_path}/{bookie_id}"

    @property
    def instance_id_path(self) -> str:
        """The cluster's instance id, BookKeeper's <root>/INSTANCEID: made with the cluster,
        renewed when its metadata is formatted."""
        return f"{self.root}/INSTANCEID"

    def bookie_path(self, bookie_id: str, *, is_readonly: bool = False) -> str:
        return f"{self.readonly_path if is_readonly else self.available_path}/{bookie_id}"

    @property
    def underreplicated_path(self) -> str:
        return f"{self.root}/underreplication/ledgers"

    def underreplicated_ledger_path(self, ledger_id: int) -> str:
        return f"{self.underreplicated_path}/urL{ledger_id:010d}"

    def replication_lock_path(self, ledger_id: int) -> str:
        return f"{self.root}/underreplication/locks/urL{ledger_id:010d}"

    @property
    def auditor_path(self) -> str:
        return f"{self.root}/underreplication/auditor"

    @property
    def replication_disabled_path(self) -> str:
        """BookKeeper's switch: while this node exists, workers copy nothing and audits mark nothing."""
        return f"{self.root}/underreplication/disable"

    @property
    def recovery_delay_path(self) -> str:
        return f"{self.root}/underreplication/lostBookieRecoveryDelay"

    @property
    def audit_request_path(self) -> str:
        return f"{self.root}/underreplication/auditRequest"

    def ledger_path(self, ledger_id: int) -> str:
        assert 0 <= ledger_id < 10**10
        if not self.is_hierarchical:
            return f"{self.root}/L{ledger_id:010d}"
        digits = f"{ledger_id:010d}"
        return f"{self.root}/{digits[:2]}/{digits[2:6]}/L{digits[6:]}"

    def ledger_id_from_sequential(self, created_path: str) -> int:
        """Ledger id handed out by a sequential create under idgen_prefix."""
        return int(created_path.rsplit("ID-", 1)[1])
