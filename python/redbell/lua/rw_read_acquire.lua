-- rw_read_acquire: take a read hold on a read-write lock unless a writer
-- holds it or waits for it (writer preference).
--
-- KEYS[1]  writer   P:{N}            string: the writer's token, PX = lease
-- KEYS[2]  readers  P:{N}:readers    sorted set: reader token -> expiry ms
-- KEYS[3]  intents  P:{N}:writers    sorted set: waiting writer -> expiry ms
-- KEYS[4]  fence    P:{N}:fence      string: fencing counter (read only here)
-- KEYS[5]  count    P:{N}:permits    a Semaphore's permit count (checked only)
-- KEYS[6]  permits  P:{N}:holders    a Semaphore's permits (checked only)
-- ARGV[1]  version  the protocol version, "1" (protocol.lua)
-- ARGV[2]  token    this reader's owner token
-- ARGV[3]  lease_ms the read lease (> 0)
-- ARGV[4]  park_ms  the park when the writer's key has no expiry
--
-- Returns
--   {1, fence}  held: the token is in the readers set with expiry now +
--               lease_ms; fence = the lock's current fence (0 if none, or
--               if the fence key holds foreign data: MGET reads it as nil,
--               and a reader writes no fence; a writer's attempt reports it)
--               The same token already holding (this call re-sent after
--               its first run's reply was lost) also counts, even behind a
--               writer that queued since: its expiry is renewed.
--   {0, park}   a writer holds the lock (park = its PTTL) or waits for it
--               (park = until the earliest waiting writer's entry expires)
--   error WRONGKIND  the writer key holds a Mutex, FairMutex or Election
--                    token, or a Semaphore's permits are live; nothing is
--                    written
--   error WRONGTYPE  a key holds foreign data
--
-- What each command of the uncontended path buys (8, and a PEXPIRE when
-- the readers set would expire before this lease): TIME; GET of the writer
-- (its token, or WRONGTYPE); MGET of the fence and the Semaphore's count
-- key (the fence to report, and whether a Semaphore may hold the name: the
-- count key lives while any permit does, sem_common.lua, so only then is
-- a ZCOUNT of its permits spent); ZREMRANGEBYSCORE and ZRANGE of the
-- intents (writer preference); ZREMRANGEBYSCORE, ZADD and PTTL of the
-- readers (the hold, and the set outliving it).
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
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local writer = redis.call('GET', KEYS[1])
if writer and other_kind(writer, 'r') and string.sub(writer, 1, 1) ~= 'w' then
  return redis.error_reply(KIND_ERROR)
end
if writer then
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl < 0 then
    pttl = tonumber(ARGV[4])
  end
  return {0, pttl}
end
-- One kind per name: no live Semaphore permit beside a reader. The count
-- key is read with the fence (no command of its own); only a name a
-- Semaphore has used pays the ZCOUNT. The Semaphore's acquire refuses live
-- readers in turn, each atomically, so neither can slip in beside the
-- other. (KEYS[5] absent: an older caller, not checked.)
local read = redis.call('MGET', KEYS[4], KEYS[5] or KEYS[4])
if KEYS[6] and read[2] and redis.call('ZCOUNT', KEYS[6], '(' .. now_ms, '+inf') > 0 then
  return redis.error_reply(KIND_ERROR)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if first[2] then
  -- A re-sent attempt whose first run took the hold (its reply lost) finds
  -- its own live token: held, renewed below. Refused, the reader would
  -- park on its own unrenewed hold and the writer wait out its lease.
  local mine = redis.call('ZSCORE', KEYS[2], ARGV[2])
  if not (mine and tonumber(mine) > now_ms) then
    return {0, math.max(tonumber(first[2]) - now_ms, 1)}
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
local expiry = now_ms + tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], expiry, ARGV[2])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return {1, tonumber(read[1]) or 0}
