-- rw_write_release: drop the write hold if it is still ours and wake the
-- lock's waiters (readers, and a writer).
--
-- KEYS[1]  writer   P:{N}
-- KEYS[2]  channel  P:{N}:rw
-- ARGV[1]  token    the writer's owner token
--
-- Returns
--   1   ours: deleted, and "w" published
--   0   held by another token
--  -1   gone (the lease expired)
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v then
    return 0
  end
  return -1
end
redis.call('DEL', KEYS[1])
-- pcall: a PUBLISH the ACL refuses must not fail the script after its writes.
redis.pcall('PUBLISH', KEYS[2], 'w')
return 1
