// Package system_test runs whole hosts: a real embedded nats-server, the composition root's
// host (package app) with its real runner, bubblewrap jails, volumes and egress proxy, driven
// from outside as callers and operators do. The engine's own package keeps its white-box tests
// and the engine tests with a fake runner.
package system_test

import (
	"testing"

	"github.com/agenthost/host/internal/testkit/hosttest"
)

func TestMain(m *testing.M) { hosttest.Main(m) }
