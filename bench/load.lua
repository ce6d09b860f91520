-- wrk script for the service's targets in bench/compare.py: the shared yardsticks' load.lua
-- (../shared/bench/load.lua) with the same request bodies for join, send, get and session, the same
-- answer checks and the same WRKJSON line, plus one mode of the service's own, `replay`. The
-- yardsticks are loaded with their own script; compare.py checks that the bodies here and there
-- are still the same.
--
--   taskset -c 1 wrk -t1 -c16 -d5s --timeout 5s -s bench/load.lua http://127.0.0.1:PORT -- MODE RUNID DATAFILE
--
-- MODE     join | replay | send | get | session
-- RUNID    a number, different for every wrk run (seeds the generator of commandIds/messageIds)
-- DATAFILE tab-separated lines (compare.py writes them):
--   path<TAB>/a2a                 the request path
--   header<TAB>Name<TAB>Value     a header sent with every request
--   row<TAB>f1<TAB>f2…            per-request data, used round-robin from a random start
--     join:    token, sessionId, endpointId, sessionEpoch   → aim.realtime.JoinSession, fresh commandId
--     replay:  token, sessionId, endpointId, sessionEpoch, commandId
--                                                           → the same JoinSession with the row's
--                                                             commandId, already applied: a replay
--     send:    token (empty: no Authorization)              → SendMessage, one text part, fresh messageId
--     get:     token (empty: none), taskId                  → GetTask
--     session: token, sessionId                             → aim.realtime.GetSession
--
-- Every answer is read: an HTTP status other than 200, a JSON-RPC error object or a body without a
-- "result" counts as an error (by code); the first such body is kept. At the end it
-- prints one line "WRKJSON {...}" (rps, latency percentiles in µs, error counts) and, when there
-- were errors, "WRKSAMPLE <first error body>".

local mode, runid, datafile = "get", "0", nil
local path = "/a2a"
local base_headers = {}
local rows = {}
local nrows = 0
local counter = 0
local next_row = 0
threadno = 0  -- global: setup() sets it in each thread's state

-- read by done() through thread:get()
rpc_errors = 0
bad_answers = 0
err_codes = ""
err_sample = nil
local codes = {}

local threads = {}
function setup(thread)
  thread:set("threadno", #threads)
  table.insert(threads, thread)
end

local function split_tabs(line)
  local out = {}
  for field in string.gmatch(line .. "\t", "([^\t]*)\t") do
    table.insert(out, field)
  end
  return out
end

function init(args)
  mode = args[1] or mode
  runid = args[2] or runid
  datafile = args[3]
  if datafile then
    local f = assert(io.open(datafile, "r"))
    for line in f:lines() do
      local x = split_tabs(line)
      if x[1] == "path" then
        path = x[2]
      elseif x[1] == "header" then
        base_headers[x[2]] = x[3]
      elseif x[1] == "row" then
        table.remove(x, 1)
        table.insert(rows, x)
      end
    end
    f:close()
  end
  nrows = #rows
  -- per-row header tables, built once (the bearer token is the only per-row header)
  for _, row in ipairs(rows) do
    local h = {}
    for k, v in pairs(base_headers) do h[k] = v end
    if row[1] and row[1] ~= "" then
      h["Authorization"] = "Bearer " .. row[1]
    end
    row.headers = h
  end
  math.randomseed((tonumber(runid) or os.time()) + 7919 * (threadno or 0))
  next_row = math.random(0, math.max(nrows, 1) - 1)
end

local function r16()
  return math.random(0, 0xffff)
end

-- a version-4 UUID; the last 8 hex digits are this thread's request counter, so that ids never
-- repeat within a run, and the 96 random bits before them keep runs apart
local function uuid4()
  return string.format("%04x%04x-%04x-4%03x-%04x-%04x%08x",
    r16(), r16(), r16(), math.random(0, 0xfff), 0x8000 + math.random(0, 0x3fff), r16(), counter)
end

local function pick()
  next_row = next_row % nrows + 1
  return rows[next_row]
end

function request()
  counter = counter + 1
  local row = pick()
  local body
  if mode == "join" then
    body = string.format('{"jsonrpc":"2.0","id":%d,"method":"aim.realtime.JoinSession","params":{"sessionId":"%s","sessionEpoch":%s,"endpointId":"%s","commandId":"%s"}}',
      counter, row[2], row[4], row[3], uuid4())
  elseif mode == "replay" then
    body = string.format('{"jsonrpc":"2.0","id":%d,"method":"aim.realtime.JoinSession","params":{"sessionId":"%s","sessionEpoch":%s,"endpointId":"%s","commandId":"%s"}}',
      counter, row[2], row[4], row[3], row[5])
  elseif mode == "send" then
    body = string.format('{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"messageId":"%s","role":"ROLE_USER","parts":[{"text":"hello agent %d"}]}}}',
      counter, uuid4(), counter)
  elseif mode == "get" then
    body = string.format('{"jsonrpc":"2.0","id":%d,"method":"GetTask","params":{"id":"%s"}}', counter, row[2])
  elseif mode == "session" then
    body = string.format('{"jsonrpc":"2.0","id":%d,"method":"aim.realtime.GetSession","params":{"sessionId":"%s"}}',
      counter, row[2])
  else
    error("unknown mode " .. tostring(mode))
  end
  return wrk.format("POST", path, row.headers, body)
end

local function note(code, body)
  codes[code] = (codes[code] or 0) + 1
  local parts = {}
  for k, v in pairs(codes) do
    table.insert(parts, k .. ":" .. v)
  end
  err_codes = table.concat(parts, ",")
  if err_sample == nil then
    err_sample = string.sub(body or "", 1, 400)
  end
end

-- a success has a "result" member before any error object (a result may hold an "error" member of
-- its own further in; an error object may mention "result" in its data)
function response(status, headers, body)
  if status ~= 200 then
    bad_answers = bad_answers + 1
    note("http" .. status, body)
    return
  end
  local at_result = string.find(body, '"result"%s*:')
  local at_error = string.find(body, '"error"%s*:%s*{')
  if at_error and (not at_result or at_error < at_result) then
    rpc_errors = rpc_errors + 1
    note(string.match(body, '"code"%s*:%s*(%-?%d+)', at_error) or "?", body)
  elseif not at_result then
    bad_answers = bad_answers + 1
    note("no-result", body)
  end
end

function done(summary, latency, requests)
  local rpc, bad, all_codes, sample = 0, 0, {}, nil
  for _, t in ipairs(threads) do
    rpc = rpc + (t:get("rpc_errors") or 0)
    bad = bad + (t:get("bad_answers") or 0)
    local c = t:get("err_codes")
    if c and c ~= "" then table.insert(all_codes, c) end
    sample = sample or t:get("err_sample")
  end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"rps":%.1f,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,"rpc_errors":%d,"bad_answers":%d,"err_codes":"%s"}\n',
    summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout, rpc, bad, table.concat(all_codes, ",")))
  if sample then
    io.write("WRKSAMPLE " .. (string.gsub(sample, "[\r\n]", " ")) .. "\n")
  end
end
