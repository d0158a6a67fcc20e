package annot

import (
	"strings"
	"testing"
)

func TestPin(t *testing.T) {
	s, err := Parse("f.py", []byte("# pin: latest\ndef main(): pass\n"))
	if err != nil || !s.PinLatest {
		t.Fatalf("pin: latest: %+v %v", s, err)
	}
	if s, _ := Parse("f.py", []byte("def main(): pass\n")); s.PinLatest {
		t.Fatal("pinned to latest without saying so")
	}
	_, err = Parse("f.py", []byte("# pin: oldest\ndef main(): pass\n"))
	if err == nil || !strings.Contains(err.Error(), "f.py:1:") || !strings.Contains(err.Error(), `write "pin: latest"`) {
		t.Fatalf("pin: oldest: %v", err)
	}
}
