package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestLogFormat(t *testing.T) {
	cases := []struct {
		format string
		tty    bool
		json   bool
	}{
		{"auto", true, false},
		{"auto", false, true},
		{"console", false, false},
		{"console", true, false},
		{"json", true, true},
		{"json", false, true},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		log, err := buildLogger("info", c.format, zapcore.AddSync(&buf), c.tty)
		if err != nil {
			t.Fatal(err)
		}
		log.Error("function refused", zap.Error(errors.New("f.py:2: bad")))
		log.Sync()
		line := buf.String()
		var m map[string]any
		isJSON := json.Unmarshal([]byte(line), &m) == nil
		if isJSON != c.json {
			t.Errorf("%s (terminal %t): JSON %t, want %t: %q", c.format, c.tty, isJSON, c.json, line)
		}
		if strings.Count(line, "\n") != 1 || strings.Contains(line, "stacktrace") || strings.Contains(line, "log_test.go:") && strings.Contains(line, "testing.tRunner") {
			t.Errorf("%s (terminal %t): want one line without a stack trace, got %q", c.format, c.tty, line)
		}
		if !strings.Contains(line, "f.py:2: bad") {
			t.Errorf("%s: the error is missing: %q", c.format, line)
		}
		if colored := strings.Contains(line, "\x1b["); colored != (c.tty && !c.json) {
			t.Errorf("%s (terminal %t): colored %t", c.format, c.tty, colored)
		}
	}
	if _, err := buildLogger("info", "xml", zapcore.AddSync(&bytes.Buffer{}), false); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("a bad format: %v", err)
	}
}
