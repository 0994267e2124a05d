-- protocol: shared code, prepended first to every script (not run alone).
--
-- ARGV[1] of every script is the protocol version the client speaks
-- (PROTOCOL.md, "Compatibility and versioning"); these scripts speak "1".
-- Any other value (or none) gets, before any key is read or written:
--   error REDBELL_PROTOCOL client speaks <x>, scripts speak 1
-- where <x> is ARGV[1] cut to 16 characters, each character outside
-- [0-9A-Za-z._-] shown as '?' ("none" when ARGV is empty), so that a
-- client of another version fails closed instead of misreading a queue.
if ARGV[1] ~= '1' then
  local spoken = string.gsub(string.sub(ARGV[1] or 'none', 1, 16), '[^%w%._%-]', '?')
  return redis.error_reply('REDBELL_PROTOCOL client speaks ' .. spoken .. ', scripts speak 1')
end
