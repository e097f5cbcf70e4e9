-- publish.lua: publishes ARGV[2] on the channel ARGV[1]. Its one key is the
-- channel's name, never read: it routes the call, on a Redis Cluster or a
-- Ring, to the server that holds the channel's subscribers.
-- Reply: {receivers}.
return {redis.call('PUBLISH', ARGV[1], ARGV[2])}
