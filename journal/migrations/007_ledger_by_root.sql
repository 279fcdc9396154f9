-- A session's extraction history (the operator's page) reads the ledger by root session.
CREATE INDEX ledger_by_root ON ledger (root_id, at);
