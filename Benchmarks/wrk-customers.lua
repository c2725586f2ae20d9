-- wrk script for `storekeeper bench entitlements --external-load`: reads customer-0 … customer-999 round-robin.
-- wrk -t1 -c16 -d10s -s Benchmarks/wrk-customers.lua -H "Authorization: Bearer $STOREKEEPER_BENCH_API_KEY" --latency http://127.0.0.1:PORT
local customers = tonumber(os.getenv("CUSTOMERS") or "1000")
local counter = 0
request = function()
  counter = counter + 1
  return wrk.format("GET", "/v1/customers/customer-" .. (counter % customers) .. "?environment=Sandbox")
end
