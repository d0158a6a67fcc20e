package flows_test

import (
	"testing"

	"github.com/agenthost/host/internal/testkit/hosttest"
)

func TestMain(m *testing.M) { hosttest.Main(m) }
