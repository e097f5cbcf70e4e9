// Package decide decides one request of a compiled route: its keys and the
// rules in force, the deny cache, the Redis call, strikes, in-flight
// holdings, the failure policy, and the answer written back.
package decide
