package annot

import (
	"slices"
	"testing"
	"time"
)

func TestDistance(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"volume", "volume", 0},
		{"volum", "volume", 1},
		{"volmue", "volume", 1}, // adjacent swap costs one
		{"sanbdox", "sandbox", 1},
		{"sandboxx", "sandbox", 1},
		{"snadbxo", "sandbox", 2},
		{"", "on", 2},
		{"no", "on", 1},
		{"ca", "abc", 3}, // OSA, unlike true Damerau-Levenshtein, cannot edit a swapped pair again
		{"kitten", "sitting", 3},
		{"averyveryverylongword", "on", 3}, // capped: only "at most 2" matters
	}
	for _, tc := range cases {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := distance(tc.b, tc.a); got != tc.want {
			t.Errorf("distance(%q, %q) = %d, want %d (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	cases := []struct {
		word, want string
	}{
		{"volum", "volume"},
		{"retry", ""}, // "retries" is two edits away but "retry" → three
		{"retrys", "retries"},
		{"nxt", "next"},
		{"text", "next"},
		{"an", "on"},
		{"type", ""},
		{"noqa", ""},
		{"note", ""},
		{"todo", ""},
		{"schedules", "schedule"},
	}
	for _, tc := range cases {
		got, ok := suggest(tc.word)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("suggest(%q) = %q, %v; want %q", tc.word, got, ok, tc.want)
		}
	}
}

func TestLines(t *testing.T) {
	type numbered struct {
		n    int
		line string
	}
	cases := []struct {
		src  string
		want []numbered
	}{
		{"", nil},
		{"a", []numbered{{1, "a"}}},
		{"a\n", []numbered{{1, "a"}}},
		{"a\nb", []numbered{{1, "a"}, {2, "b"}}},
		{"a\r\nb\r\n", []numbered{{1, "a"}, {2, "b"}}},
		{"a\rb", []numbered{{1, "a"}, {2, "b"}}},
		{"a\n\r\nb", []numbered{{1, "a"}, {2, ""}, {3, "b"}}},
		{"a\r\rb", []numbered{{1, "a"}, {2, ""}, {3, "b"}}},
		{"\n\n", []numbered{{1, ""}, {2, ""}}},
	}
	for _, tc := range cases {
		var got []numbered
		for n, l := range lines(tc.src) {
			got = append(got, numbered{n, l})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("lines(%q) = %v, want %v", tc.src, got, tc.want)
		}
	}
}

func TestParseSchedule(t *testing.T) {
	from := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	good := map[string]time.Time{
		"CRON_TZ=UTC */5 * * * *": from.Add(5 * time.Minute),
		"@every 90s":              from.Add(90 * time.Second),
		"CRON_TZ=UTC @hourly":     from.Add(time.Hour),
	}
	for s, want := range good {
		sched, err := ParseSchedule(s)
		if err != nil {
			t.Errorf("ParseSchedule(%q): %v", s, err)
			continue
		}
		if got := sched.Next(from); !got.Equal(want) {
			t.Errorf("ParseSchedule(%q).Next = %v, want %v", s, got, want)
		}
	}
	for _, s := range []string{"", "* * * *", "TZ=UTC", "CRON_TZ=Nowhere/City * * * * *", "@yearlyish", "0 0 0 0 0 0"} {
		if _, err := ParseSchedule(s); err == nil {
			t.Errorf("ParseSchedule(%q) succeeded, want an error", s)
		}
	}
}

func TestKnownNamesTheParsersAnnotations(t *testing.T) {
	for _, k := range keys {
		if !Known(k) {
			t.Errorf("Known(%q) = false; the parser takes %q", k, k+":")
		}
	}
	for _, k := range []string{"", "warm:", "Warm", "nonsense"} {
		if Known(k) {
			t.Errorf("Known(%q) = true; the parser does not take it", k)
		}
	}
}
