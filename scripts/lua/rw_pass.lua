-- rw_pass: a waiting writer gives up (cancelled, timed out): its intent is
-- withdrawn at once, and readers held back by it are woken.
--
-- KEYS[1]  intents  P:{N}:writers   sorted set: waiting writer -> expiry ms
-- KEYS[2]  channel  P:{N}:rw
-- ARGV[1]  member   "<client id>:<waiter id>" of the leaving writer
--
-- Returns
--   1   the last intent was withdrawn and the waiters woken
--   0   other writers still wait (readers stay held back), or it was gone
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 and redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', KEYS[2], 'i')
  return 1
end
return 0
