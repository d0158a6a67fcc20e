package runner

import (
	"strings"
	"testing"
)

func TestLineWriter(t *testing.T) {
	var lines []string
	sink := func(stream string, line []byte) { lines = append(lines, stream+":"+string(line)) }
	budget := &outputBudget{left: 1 << 20}
	w := newLineWriter("stdout", sink, budget, 32, 8)
	for _, chunk := range []string{"one\ntw", "o\r\n\n", "   \n", "last line no newline"} {
		w.Write([]byte(chunk))
	}
	w.Close()
	want := []string{"stdout:one", "stdout:two", "stdout:", "stdout:   ", "stdout:last line no newline"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Fatalf("lines = %q", lines)
	}
	if string(w.last) != "last line no newline" || w.lastOverflow {
		t.Fatalf("last = %q", w.last)
	}
	if w.tail.String() != " newline" {
		t.Fatalf("tail = %q", w.tail.String())
	}
}

func TestLineWriterBoundsWhatItKeeps(t *testing.T) {
	budget := &outputBudget{left: 10}
	var published int
	w := newLineWriter("stdout", func(string, []byte) { published++ }, budget, 16, 4)
	w.Write([]byte(strings.Repeat("x", 100) + "\n"))
	w.Write([]byte("ok\n"))
	w.Close()
	if !(string(w.last) == "ok" && !w.lastOverflow) {
		t.Fatalf("last = %q overflow %v", w.last, w.lastOverflow)
	}
	// The 100-byte line is kept as 16 bytes (+1 for its newline), over the budget of 10: it and
	// everything after it are dropped and counted, so the log never has holes in the middle.
	if published != 0 || budget.droppedBytes() != 17+3 {
		t.Fatalf("published %d, dropped %d", published, budget.droppedBytes())
	}
	w2 := newLineWriter("stdout", nil, &outputBudget{}, 16, 4)
	w2.Write([]byte(strings.Repeat("y", 40)))
	w2.Close()
	if !w2.lastOverflow || len(w2.last) != 16 {
		t.Fatalf("overflowing last line: %q %v", w2.last, w2.lastOverflow)
	}
}

func TestDecodePayload(t *testing.T) {
	cases := []struct {
		in, wantErr string
	}{
		{"", ""}, {"  ", ""}, {`{"a":1}`, ""}, {`{}`, ""},
		{`{"a":`, "not valid JSON"}, {`[1]`, "an array"}, {`"s"`, "a string"}, {`3`, "a number"},
		{`true`, "a boolean"}, {`null`, "null"}, {"\xff", "not valid JSON"},
	}
	for _, c := range cases {
		_, _, err := DecodePayload([]byte(c.in))
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr) || !IsTerminal(err)) {
			t.Errorf("DecodePayload(%q) = %v, want %q", c.in, err, c.wantErr)
		}
	}
}
