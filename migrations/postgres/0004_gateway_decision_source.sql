-- Where a gateway decision's traffic came from, PostgreSQL dialect; migrations/sqlite/0004 adds the same.
-- `live` for a gateway's own traffic, `pilot:WORKLOAD` for a pilot's replay through its gateway, so that
-- replays are shown (and filtered) apart from live traffic.
ALTER TABLE gateway_decisions
    ADD COLUMN source TEXT NOT NULL DEFAULT 'live' CHECK (length(source) > 0);
