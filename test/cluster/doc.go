// Package cluster holds the host's multi-process tests: real `host serve` processes and real
// nats-server processes (built from the module's own dependency), bubblewrap jails and a
// versitygw S3 store, killed with SIGKILL, restarted, frozen and cut off while flows run.
//
// The package has no code of its own; everything is in its _test.go files:
//
//	go test -p 1 -count=1 ./test/cluster/...
package cluster
