-- reset.lua: deletes its keys, all in one slot. Reply: {deleted}.
return {redis.call('DEL', unpack(KEYS))}
