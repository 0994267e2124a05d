-- inspect: a consistent snapshot of a lock of any kind (Mutex, FairMutex,
-- RwLock, Election), for operators. Read-only.
--
-- KEYS[1]  lock key     P:{N}              owner token: Mutex, FairMutex, RwLock writer
-- KEYS[2]  fence key    P:{N}:fence
-- KEYS[3]  waiters      P:{N}:waiters      Mutex queue: member -> expiry ms
-- KEYS[4]  fair queue   P:{N}:fifo         FairMutex queue: member -> arrival us
-- KEYS[5]  readers      P:{N}:readers      RwLock read holds: token -> expiry ms
-- KEYS[6]  intents      P:{N}:writers      RwLock waiting writers: member -> expiry ms
-- KEYS[7]  owner notes  P:{N}:owners       hash: token -> note (e.g. "host:pid")
-- KEYS[8]  leader key   P:{N}:leader       Election: hash of token, value, term
-- ARGV[1]  version  the protocol version, "1" (protocol.lua)
--
-- Returns {holder, pttl, fence, waiters, fair, intents, note, readers, term,
-- value}:
--   holder   the token in P:{N}, or "" when there is none
--   pttl     its remaining lease in ms (-2: none, -1: no expiry)
--   fence    the last fence handed out ("" if none is remembered)
--   waiters  live entries (server time) of the Mutex queue
--   fair     entries of the FairMutex queue
--   intents  live RwLock writer intents
--   note     the holder's owner note, "" if none
--   readers  flat {token, ttl_ms, note, ...}: each live read hold, soonest
--            expiry first, its remaining lease and its note ("" if none)
--   term     an Election's leader's term, when the holder's token (letter
--            l) is the one the leader key names: it has proclaimed; ""
--            otherwise (the leader key is read for an l token only)
--   value    that leader's proclaimed value ("" when term is "")
--   error WRONGTYPE  a key holds foreign data
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function note(token)
  return redis.call('HGET', KEYS[7], token) or ''
end
local holder = redis.call('GET', KEYS[1]) or ''
local pttl = redis.call('PTTL', KEYS[1])
if string.sub(holder, 1, 2) == 'm:' then
  -- A Mutex reserved for the waiter its release just woke: free, for a
  -- moment, to nobody else; shown as free.
  holder, pttl = '', -2
end
local fence = redis.call('GET', KEYS[2]) or ''
local live = '(' .. now_ms
local waiters = redis.call('ZCOUNT', KEYS[3], live, '+inf')
local fair = redis.call('ZCOUNT', KEYS[4], 0, '+inf')
local intents = redis.call('ZCOUNT', KEYS[6], live, '+inf')
local holder_note = ''
if holder ~= '' then
  holder_note = note(holder)
end
local readers = {}
local held = redis.call('ZRANGEBYSCORE', KEYS[5], live, '+inf', 'WITHSCORES')
for i = 1, #held, 2 do
  readers[#readers + 1] = held[i]
  readers[#readers + 1] = tostring(tonumber(held[i + 1]) - now_ms)
  readers[#readers + 1] = note(held[i])
end
local term, value = '', ''
if string.sub(holder, 1, 1) == 'l' then
  local f = redis.call('HMGET', KEYS[8], 'token', 'term', 'value')
  if f[1] == holder then
    term, value = f[2] or '0', f[3] or ''
  end
end
return {holder, pttl, fence, waiters, fair, intents, holder_note, readers, term, value}
