-- rw_read_acquire: take a read hold on a read-write lock unless a writer
-- holds it or waits for it (writer preference).
--
-- KEYS[1]  writer   P:{N}            string: the writer's token, PX = lease
-- KEYS[2]  readers  P:{N}:readers    sorted set: reader token -> expiry ms
-- KEYS[3]  intents  P:{N}:writers    sorted set: waiting writer -> expiry ms
-- KEYS[4]  fence    P:{N}:fence      string: fencing counter (read only here)
-- ARGV[1]  token    this reader's owner token
-- ARGV[2]  lease_ms the read lease (> 0)
-- ARGV[3]  park_ms  the park when the writer's key has no expiry
--
-- Returns
--   {1, fence}  held: the token is in the readers set with expiry now +
--               lease_ms; fence = the lock's current fence (0 if none)
--   {0, park}   a writer holds the lock (park = its PTTL) or waits for it
--               (park = until the earliest waiting writer's entry expires)
--   error WRONGKIND  the writer key holds a Mutex, FairMutex or Election
--                    token (a Semaphore's permits are not looked for here:
--                    that would cost the uncontended path a command; the
--                    Semaphore refuses a writer's name instead)
--   error WRONGTYPE  a key holds foreign data
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
    pttl = tonumber(ARGV[3])
  end
  return {0, pttl}
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if first[2] then
  return {0, math.max(tonumber(first[2]) - now_ms, 1)}
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
local expiry = now_ms + tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return {1, tonumber(redis.call('GET', KEYS[4])) or 0}
