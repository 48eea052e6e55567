-- mix.lua: the request mix of the web-app example for wrk (Debian's wrk 4.1), and the
-- record of every write the server acknowledged.
--
--   wrk -t2 -c32 -d10s -s mix.lua http://127.0.0.1:8000 -- READ INSERT USERS OUT [SEED] [BODY]
--
-- Each request is, at random: READ % GET /users/<u>, INSERT % POST /posts (a BODY-byte
-- post, default 100), the rest POST /users/<u>/visit; u uniform in 1..USERS. Every
-- thread draws from its own generator (SEED + thread number).
--
-- A 200 reply to a write is an acknowledgement: its post id, or its user's visit
-- count, is recorded. At the end, OUT gets one JSON object: wrk's counts and errors,
-- latency percentiles (microseconds), requests per kind, the acknowledged post ids
-- and, per user, the largest acknowledged visit count. Every id listed must be in
-- the database afterwards, and every user's visits at least that count.

local threads = {}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
  table.insert(threads, thread)
end

local reads, inserts, users, body
-- per thread, read back by done()
posts = {}
visits = {}
kinds = {read = 0, insert = 0, visit = 0, other = 0, failed = 0}

function init(args)
  reads = tonumber(args[1])
  inserts = tonumber(args[2])
  users = tonumber(args[3])
  out_path = args[4]      -- read by done(), which gets no arguments
  math.randomseed((tonumber(args[5]) or 1) * 1000 + tid)
  body = string.rep("x", tonumber(args[6]) or 100)
end

local form = {["Content-Type"] = "application/x-www-form-urlencoded"}

function request()
  local r = math.random(100)
  local u = math.random(users)
  if r <= reads then
    return wrk.format("GET", "/users/" .. u)
  elseif r <= reads + inserts then
    return wrk.format("POST", "/posts", form, "user_id=" .. u .. "&body=" .. body)
  end
  return wrk.format("POST", "/users/" .. u .. "/visit")
end

function response(status, headers, reply)
  if status ~= 200 then
    kinds.failed = kinds.failed + 1
    return
  end
  local id = reply:match('"post_id":%s*(%d+)')
  if id then
    kinds.insert = kinds.insert + 1
    posts[#posts + 1] = tonumber(id)
    return
  end
  local u, v = reply:match('"user_id":%s*(%d+),%s*"visits":%s*(%d+)')
  if u then
    kinds.visit = kinds.visit + 1
    u = tonumber(u)
    v = tonumber(v)
    if (visits[u] or 0) < v then visits[u] = v end
    return
  end
  if reply:find('"post_count"', 1, true) then
    kinds.read = kinds.read + 1
  else
    kinds.other = kinds.other + 1
  end
end

local function json_list(t)
  local parts = {}
  for i = 1, #t do parts[i] = string.format("%d", t[i]) end
  return "[" .. table.concat(parts, ",") .. "]"
end

function done(summary, latency, requests)
  local all_posts, best = {}, {}
  local total = {read = 0, insert = 0, visit = 0, other = 0, failed = 0}
  for _, thread in ipairs(threads) do
    for _, id in ipairs(thread:get("posts")) do all_posts[#all_posts + 1] = id end
    for u, v in pairs(thread:get("visits")) do
      if (best[u] or 0) < v then best[u] = v end
    end
    for k, n in pairs(thread:get("kinds")) do total[k] = total[k] + n end
  end
  local vis = {}
  for u, v in pairs(best) do vis[#vis + 1] = string.format('"%d":%d', u, v) end
  local pct = {}
  for _, p in ipairs({50, 90, 99, 99.9}) do
    pct[#pct + 1] = string.format('"%s":%d', tostring(p), latency:percentile(p))
  end
  local e = summary.errors
  local f = assert(io.open(threads[1]:get("out_path"), "w"))
  f:write(string.format(
    '{"duration_us":%d,"requests":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"max":%d,"mean":%.1f,"stdev":%.1f,"percentiles":{%s}},' ..
    '"kinds":{"read":%d,"insert":%d,"visit":%d,"other":%d,"failed":%d},' ..
    '"acked_posts":%s,"acked_visits":{%s}}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.max, latency.mean, latency.stdev, table.concat(pct, ","),
    total.read, total.insert, total.visit, total.other, total.failed,
    json_list(all_posts), table.concat(vis, ",")))
  f:close()
end
