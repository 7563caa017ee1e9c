-- wrk -s benches/gateway/chat.lua: a small non-streaming chat completion, as in the LiteLLM figures.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"Say hello."}]}'
