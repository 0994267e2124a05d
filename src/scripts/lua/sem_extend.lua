-- sem_extend: reset the lease of semaphore permits we still hold; one call
-- renews many (the renewal task batches them). Each permit takes three
-- keys and two arguments. (sem_common.lua is prepended.)
--
-- KEYS[1], KEYS[4], ..  holders   P:{N}:holders  sorted set: token -> expiry
--                                  (server ms); KEYS[3i-2] for permit i
-- KEYS[2], KEYS[5], ..  count     P:{N}:permits  string, kept alive as long as
--                                  the holders; KEYS[3i-1]
-- KEYS[3], KEYS[6], ..  queue     P:{N}:queue    sorted set: member -> arrival;
--                                  KEYS[3i]
-- ARGV[1]               version   the protocol version, "1" (protocol.lua)
-- ARGV[2]               lease_ms  the new lease in milliseconds, from now (> 0)
-- ARGV[3], ARGV[5], ..  token     the permit token of permit i: ARGV[2i+1]
-- ARGV[4], ARGV[6], ..  prefix    its wake channel prefix P:{N}:wake:: ARGV[2i+2]
--
-- A permit whose expiry moves in (a shorter lease) tells the first three
-- members "C:W" of the queue to stand by, "W::s<lease_ms>" on prefix .. C:
-- they parked on the earliest holder's old expiry, and a shorter one that
-- lapses would wake nobody. (Members owed a free permit were woken
-- already, and those behind them park no longer than the owed entries.)
--
-- Returns an array with one code per permit (i = 1..#KEYS/3), in order:
--   1   the permit was live; its expiry is now lease_ms from now
--  -1   the permit is gone (expired or reclaimed), or a key holds foreign
--       data (so one such key cannot fail the renewal of the others)
local _, now_ms = now()
local lease = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS / 3 do
  local holders, count, queue = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local token = ARGV[2 * i + 1]
  local expiry = redis.pcall('ZSCORE', holders, token)
  if type(expiry) == 'table' then
    expiry = false
  end
  if expiry and tonumber(expiry) > now_ms then
    redis.call('ZADD', holders, 'XX', now_ms + lease, token)
    for _, key in ipairs({holders, count}) do
      -- (a no-op on a count that is gone)
      keep_key(key, lease + HOLDERS_GRACE_MS)
    end
    if now_ms + lease < tonumber(expiry) then
      local head = redis.pcall('ZRANGE', queue, 0, 2)
      if type(head) == 'table' and not head.err then
        for _, m in ipairs(head) do
          local cid, waiter = string.match(m, '^([^:]+):(.*)$')
          if cid then
            redis.pcall('PUBLISH', ARGV[2 * i + 2] .. cid, waiter .. '::s' .. lease)
          end
        end
      end
    end
    out[i] = 1
  else
    out[i] = -1
  end
end
return out
