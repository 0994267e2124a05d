-- rw_write_acquire: take the write hold of a read-write lock when no writer
-- and no live reader holds it; otherwise register the caller's intent, which
-- makes new readers wait (writer preference).
--
-- KEYS[1]  writer   P:{N}            string: the writer's token, PX = lease
-- KEYS[2]  readers  P:{N}:readers    sorted set: reader token -> expiry ms
-- KEYS[3]  intents  P:{N}:writers    sorted set: waiting writer -> expiry ms
-- KEYS[4]  fence    P:{N}:fence      string: fencing counter
-- KEYS[5]  channel  P:{N}:rw         the read-write lock's release channel
-- KEYS[6]  count    P:{N}:permits    a Semaphore's permit count (checked only)
-- KEYS[7]  permits  P:{N}:holders    a Semaphore's permits (checked only)
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  token         this writer's owner token
-- ARGV[3]  lease_ms      the write lease (> 0)
-- ARGV[4]  fence_ttl_ms  expiry of the fence key
-- ARGV[5]  member        "<client id>:<waiter id>" of a waiting writer, or ""
--                        for a caller that will not wait (no intent)
-- ARGV[6]  grace_ms      how long an intent outlives the writer's park
-- ARGV[7]  park_ms       the park when the writer's key has no expiry
--
-- Returns
--   {1, fence}  held; fence = max(previous + 1, server TIME in us); the
--               caller's intent is withdrawn, and if it had one, "g" is
--               published so readers it held back re-park on its lease. A
--               re-sent call that finds its own token gets {1, current
--               fence} and changes nothing.
--   {0, park}   blocked by a writer (park = its PTTL) or by readers (park =
--               until the last reader's lease ends); a waiting caller's
--               intent is registered with expiry now + park + grace_ms
--   error WRONGKIND  the writer key holds a Mutex, FairMutex or Election
--                    token, or (on a free lock) a Semaphore's permits are
--                    live; nothing is written (an intent of the caller's
--                    from an earlier attempt lapses by its expiry)
--   error WRONGTYPE  a key holds foreign data
--
-- What each command of the uncontended path buys (7): TIME; GET of the
-- writer (its token, or WRONGTYPE); ZREMRANGEBYSCORE and ZRANGE of the
-- readers (the last live reader's lease); MGET of the fence and the
-- Semaphore's count key (the previous fence, and whether a Semaphore may
-- hold the name: the count key lives while any permit does, sem_common.lua,
-- so only then is a ZCOUNT of its permits spent); SET ... GET of the fence
-- (written, and WRONGTYPE on foreign data, which MGET reads as nil); SET
-- of the writer.
local function other_kind(token, mine)
  -- Tokens open with their kind: m (Mutex), q (FairMutex), w (RwLock
  -- writer), r (RwLock reader), l (Election). A token of another kind
  -- means the name is in use as another kind of lock, whose waiters this
  -- one would never wake (tokens of older clients, plain hex, are not
  -- judged).
  local tag = string.sub(token, 1, 1)
  return string.find('mqwrl', tag, 1, true) ~= nil and tag ~= mine
end
local KIND_ERROR = 'WRONGKIND the lock name is in use as another kind of lock'
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local park
local writer = redis.call('GET', KEYS[1])
if writer and other_kind(writer, 'w') then
  return redis.error_reply(KIND_ERROR)
end
if writer == ARGV[2] then
  -- A re-sent attempt whose first run acquired: report it again.
  if ARGV[5] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[5])
  end
  return {1, tonumber(redis.call('GET', KEYS[4])) or 0}
end
if writer then
  park = redis.call('PTTL', KEYS[1])
  if park < 0 then
    park = tonumber(ARGV[7])
  end
else
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if not last[2] then
    -- One kind per name: no live Semaphore permit beside the writer. The
    -- count key is read with the fence (no command of its own); only a
    -- name a Semaphore has used pays the ZCOUNT. The Semaphore's acquire
    -- refuses the writer's token in turn, each atomically, so neither can
    -- slip in beside the other. (KEYS[6] absent: an older caller, not
    -- checked.)
    local read = redis.call('MGET', KEYS[4], KEYS[6] or KEYS[4])
    if KEYS[7] and read[2] and redis.call('ZCOUNT', KEYS[7], '(' .. now_ms, '+inf') > 0 then
      return redis.error_reply(KIND_ERROR)
    end
    -- Everything that can fail on foreign data comes before the writer's
    -- key is set: the intents' ZREM, and the fence's SET ... GET (which
    -- aborts, writing nothing, on a value that is not a string).
    local had_intent = ARGV[5] ~= '' and redis.call('ZREM', KEYS[3], ARGV[5]) == 1
    local fence = math.max((tonumber(read[1]) or 0) + 1, now_us)
    redis.call('SET', KEYS[4], string.format('%d', fence), 'PX', ARGV[4], 'GET')
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    if had_intent then
      -- pcall: a PUBLISH the ACL refuses must not fail the script after its writes.
      redis.pcall('PUBLISH', KEYS[5], 'g')
    end
    return {1, fence}
  end
  park = math.max(tonumber(last[2]) - now_ms, 1)
end
if ARGV[5] ~= '' then
  local ttl = park + tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], now_ms + ttl, ARGV[5])
  if redis.call('PTTL', KEYS[3]) < ttl then
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
end
return {0, park}
