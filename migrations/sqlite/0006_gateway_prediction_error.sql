-- What the gateway predicted for a request beside what it observed, SQLite dialect; migrations/postgres/0006
-- adds the same. predicted_latency_ms and predicted_ttft_ms are the predictions the route used, after the
-- endpoint's online correction; the raw_ columns are the service model's own, before it, so that the
-- error of both can be read on the same traffic. other_pools holds what each pool not chosen was
-- predicted to give: [{"pool": NAME, "ttft_ms": X, "e2e_ms": Y}].
ALTER TABLE gateway_decisions ADD COLUMN predicted_ttft_ms REAL;
ALTER TABLE gateway_decisions ADD COLUMN observed_ttft_ms REAL;
ALTER TABLE gateway_decisions ADD COLUMN raw_predicted_ttft_ms REAL;
ALTER TABLE gateway_decisions ADD COLUMN raw_predicted_latency_ms REAL;
ALTER TABLE gateway_decisions ADD COLUMN other_pools TEXT CHECK (json_valid(other_pools));
