package web_test

import (
	"testing"

	"github.com/agenthost/host/internal/hosttest"
)

func TestMain(m *testing.M) { hosttest.Main(m) }
